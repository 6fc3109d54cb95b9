"""Two outputs naming one file, and a path naming a directory, are refused before any work (issue 33, item 8).

Before: `sdcscan run -o x.json --junit x.json` ran the whole budget, exited 0, and x.json held the XML;
`-o newdir/` wrote a file named `newdir`. Now each is exit 2 with one `Error:` line naming both options
(or the option and the path), before the profile's workers start: nothing is written, no journal made.
Every invocation carries a 1 s budget on one unit, so code that does not refuse fails fast (exit 3).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sdcscan.cli import cli
from sdcscan.files import default_state_dir
from sdcscan.outputs.history import record_run
from tests.helpers.cli import CPUS, one_error_line
from tests.helpers.reports import make_report

RUN = ("run", "--budget", "1s", "--units", f"cpu:{CPUS[0]}")


def invoke(*args: str) -> tuple[Result, float]:
    began = time.monotonic()
    result = CliRunner().invoke(cli, list(args))
    return result, time.monotonic() - began


def refused(tmp_path: Path, *args: str, names: tuple[str, ...]) -> str:
    """Assert `sdcscan ARGS` is exit 2 at once, one line naming each of `names`; and nothing ran."""
    before = sorted(p.name for p in tmp_path.iterdir())
    result, took = invoke(*args)
    assert result.exit_code == 2, result.output
    line = one_error_line(result.stderr)
    for name in names:
        assert name in line, line
    assert took < 5.0, took  # no worker started (a run takes its 1 s budget plus start-up)
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "a refused run wrote something"
    return line


PAIRS = [
    ("-o", "--junit"),
    ("-o", "--prom"),
    ("--junit", "--prom"),
    ("-o", "--history"),
    ("--junit", "--history"),
    ("--prom", "--history"),
]


def _named(option: str) -> str:
    return "--out" if option == "-o" else option


@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_two_options_naming_one_file_are_refused(tmp_path: Path, first: str, second: str) -> None:
    x = str(tmp_path / "x.json")
    line = refused(tmp_path, *RUN, first, x, second, x, names=(_named(first), _named(second)))
    assert "same file" in line


@pytest.mark.parametrize(
    "spelling",
    ["./x.json", "sub/../x.json", "sub/./../x.json", "linked-dir/x.json", "link.json"],
)
def test_other_spellings_of_the_same_file_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    """Relative to the working directory, through `..`, a symlinked directory, a symlink to the file."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "linked-dir").symlink_to(tmp_path)
    (tmp_path / "link.json").symlink_to(tmp_path / "x.json")
    monkeypatch.chdir(tmp_path)
    refused(tmp_path, *RUN, "-o", "x.json", "--junit", spelling, names=("--out", "--junit"))
    refused(
        tmp_path, *RUN, "--prom", str(tmp_path / "x.json"), "--junit", spelling, names=("--prom", "--junit")
    )


def test_a_history_reached_through_a_symlink_is_the_same_file(tmp_path: Path) -> None:
    """The history is opened through links (SQLite follows them): `--history link` is the file it names."""
    db = tmp_path / "h.sqlite3"
    record_run(db, make_report(fail_unit=None), None)
    (tmp_path / "hist-link").symlink_to(db)
    refused(
        tmp_path,
        *RUN,
        "--history",
        str(tmp_path / "hist-link"),
        "--prom",
        str(db),
        names=("--prom", "--history"),
    )


def test_an_output_over_the_default_history_is_refused(tmp_path: Path) -> None:
    """No --history: the default database in the state directory is as much the run's as a named one."""
    default_state_dir().mkdir(parents=True, exist_ok=True)
    target = default_state_dir() / "history.sqlite3"
    line = refused(tmp_path, *RUN, "-o", str(target), names=("--out", "history"))
    assert str(target) in line


def test_no_history_frees_the_history_path_but_not_the_run_lock(tmp_path: Path) -> None:
    """--no-history writes no database, but the run still takes the lock beside it."""
    lock = tmp_path / "run.lock"
    refused(
        tmp_path, *RUN, "--no-history", "--history", str(tmp_path / "h.sqlite3"), "--junit", str(lock),
        names=("--junit", "run lock"),
    )  # fmt: skip


@pytest.mark.parametrize("option", ["-o", "--junit", "--prom"])
def test_a_path_ending_in_a_separator_is_refused(tmp_path: Path, option: str) -> None:
    """`-o newdir/` named a directory that did not exist, and a file `newdir` was written."""
    line = refused(
        tmp_path, *RUN, option, str(tmp_path / "newdir") + os.sep, names=(_named(option), "newdir")
    )
    assert "names a directory" in line
    assert not (tmp_path / "newdir").exists()


@pytest.mark.parametrize("option", ["-o", "--junit", "--prom"])
def test_an_existing_directory_is_refused(tmp_path: Path, option: str) -> None:
    (tmp_path / "d").mkdir()
    result, took = invoke(*RUN, option, str(tmp_path / "d"))
    assert result.exit_code == 2 and took < 5.0, result.output
    assert "directory" in result.stderr


def test_export_refuses_one_file_for_both_outputs_and_overwriting_its_report(tmp_path: Path) -> None:
    import json

    report = tmp_path / "r.json"
    report.write_text(json.dumps(make_report()))
    x = str(tmp_path / "x")
    refused(tmp_path, "export", str(report), "--junit", x, "--prom", x, names=("--junit", "--prom"))
    refused(tmp_path, "export", str(report), "--junit", str(report), names=("REPORT", "--junit"))


def test_distinct_outputs_are_not_refused(tmp_path: Path) -> None:
    """The check compares files, not names: x.json and x.json.xml, two directories' x.json, are fine."""
    from sdcscan.outputs.publish import Outputs, check_targets

    (tmp_path / "a").mkdir()
    check_targets(
        Outputs(
            report=tmp_path / "x.json",
            junit=str(tmp_path / "x.json.xml"),
            prom=str(tmp_path / "a" / "x.json"),
            history=str(tmp_path / "h.sqlite3"),
        )
    )
