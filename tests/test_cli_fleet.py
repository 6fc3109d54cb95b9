"""`sdcscan compare` and `sdcscan golden record` from the command line (CliRunner, separate streams)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from rich.console import Console

from sdcscan.cli.fleet import compare, golden, parse_age
from sdcscan.errors import ReportError, UsageError
from sdcscan.fleet.compare import summarize
from sdcscan.render.fleet import render_compare
from sdcscan.report import load_report
from tests.helpers.fleet import extract, report, unit


def write(tmp: Path, reports: list[dict[str, Any]]) -> Path:
    """Reports as files in tmp/r/."""
    root = tmp / "r"
    root.mkdir(exist_ok=True)
    for r in reports:
        (root / f"{r['host']['hostname']}-{r['run']['id']}.json").write_text(json.dumps(r))
    return root


def healthy(n: int = 4) -> list[dict[str, Any]]:
    """n healthy hosts."""
    return [report(f"h{k}") for k in range(n)]


def run(command: click.Command, args: list[str]) -> Any:
    """Invoke a command; streams are kept apart (click >= 8.2)."""
    return CliRunner().invoke(command, args)


@pytest.mark.parametrize("command", [compare, golden, golden.commands["record"]])
def test_every_command_has_help_with_an_example(command: click.Command):
    """--help works and shows an Example block."""
    result = run(command, ["--help"])
    assert result.exit_code == 0 and "Example:" in result.stdout


def test_clean_fleet_exits_0_with_json_on_stdout(tmp_path: Path):
    """A healthy fleet: exit 0, JSON on stdout, the human summary on stderr."""
    result = run(compare, [str(write(tmp_path, healthy())), "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["findings"] == [] and doc["counts"]["reports"] == 4 and doc["exit_code"] == 0
    assert "Findings: none." in result.stderr and "{" not in result.stderr


def test_divergent_unit_exits_1(tmp_path: Path):
    """One unit disagreeing with the majority: exit 1, named in the JSON and on stderr."""
    fleet = [*healthy(), report("bad", [unit("cpu:0", digests={2: "f" * 16}), unit("cpu:1")])]
    result = run(compare, [str(write(tmp_path, fleet)), "--json"])
    assert result.exit_code == 1
    (f,) = json.loads(result.stdout)["findings"]
    assert (f["host"], f["unit"], f["kind"]) == ("bad", "cpu:0", "divergent")
    assert "divergent" in result.stderr and "bad" in result.stderr


def test_slow_thresholds_from_the_command_line(tmp_path: Path):
    """--slow-drop and --slow-z change what counts as slow."""
    fleet = [report(f"h{k:02d}", [unit(ops={"train": 100.0 + k % 5})]) for k in range(19)]
    fleet.append(report("lag", [unit(ops={"train": 93.0})]))
    root = write(tmp_path, fleet)
    assert run(compare, [str(root)]).exit_code == 0
    assert run(compare, [str(root), "--slow-drop", "0.05"]).exit_code == 1
    assert run(compare, [str(root), "--slow-drop", "0.05", "--slow-z", "50"]).exit_code == 0


def test_coverage_from_the_command_line(tmp_path: Path):
    """--hosts, --stale and --now: missing and stale hosts are findings, not failures."""
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("h0\nh1\ngone\n")
    fleet = [report("h0"), report("h1", ended_at="2025-01-01T00:00:00Z")]
    args = [str(write(tmp_path, fleet)), "--hosts", str(hosts), "--now", "2025-06-02T00:00:00Z", "--json"]
    result = run(compare, args)
    assert result.exit_code == 0
    found = [(f["host"], f["kind"]) for f in json.loads(result.stdout)["findings"]]
    assert found == [("h1", "stale"), ("gone", "missing")]
    result = run(compare, [*args, "--stale", "26w"])
    assert [f["kind"] for f in json.loads(result.stdout)["findings"]] == ["missing"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{NOWHERE}"], "Error: no usable report to compare: {NOWHERE}: no such file or directory"),
        (["{R}", "--stale", "abc"], "Error: invalid duration 'abc'"),
        (["{R}", "--hosts", "{NOFILE}"], "Error: --hosts {NOFILE}: cannot read"),
        (["{R}", "--hosts", "{HOSTS}", "--now", "yesterday"], "Error: invalid --now 'yesterday'"),
        (["{R}", "--golden", "{NOFILE}"], "Error: {NOFILE}: cannot read golden"),
        (["{R}", "--slow-drop", "1.5"], "Invalid value for '--slow-drop'"),
        (["{R}", "--jobs", "-1"], "Invalid value for '--jobs'"),
        (
            ["{R}", "--hosts", "/dev/zero"],
            "Error: --hosts /dev/zero: is a character device, not a regular file",
        ),
        (["{R}", "--hosts", "{BINARY}"], "Error: --hosts {BINARY}: not UTF-8 text"),
    ],
)
def test_usage_errors_exit_2_with_one_clear_line(tmp_path: Path, args: list[str], message: str):
    """Bad arguments and unusable input: exit 2, a clear message, no traceback."""
    root = write(tmp_path, healthy(2))
    (tmp_path / "hosts").write_text("h0\n")
    (tmp_path / "binary").write_bytes(b"h0\n\xff\xfe\n")
    subst = {
        "BINARY": str(tmp_path / "binary"),
        "R": str(root),
        "HOSTS": str(tmp_path / "hosts"),
        "NOFILE": str(tmp_path / "nofile"),
        "NOWHERE": str(tmp_path / "nowhere"),
    }
    result = run(compare, [a.format(**subst) for a in args])
    assert result.exit_code == 2
    message = message.format(**subst)
    assert message in result.stderr and "Traceback" not in result.stderr
    if message.startswith("Error:"):
        assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"[" * 100000 + b"]" * 100000, "nested too deeply to be a report"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "not UTF-8 JSON text"),
        (b'{"schema_version": 1, "units": [', "truncated or not JSON"),
    ],
    ids=["deep", "binary", "truncated"],
)
def test_compare_skips_bad_files_with_the_readers_own_reason(tmp_path: Path, content: bytes, reason: str):
    """compare lists a bad file with the same reason `load_report` gives (one reader for every command)."""
    root = write(tmp_path, healthy(2))
    bad = root / "bad.json"
    bad.write_bytes(content)
    result = run(compare, [str(root), "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["skipped"] == [{"path": str(bad), "reason": reason}]
    with pytest.raises(ReportError) as err:
        load_report(bad)
    assert str(err.value) == f"{bad}: {reason}"


def test_a_deeply_nested_golden_is_one_line_exit_2(tmp_path: Path):
    """--golden naming a deeply nested file: exit 2 and the reader's reason, not a RecursionError."""
    root = write(tmp_path, healthy(2))
    deep = tmp_path / "deep.json"
    deep.write_bytes(b"[" * 100000 + b"]" * 100000)
    result = run(compare, [str(root), "--golden", str(deep)])
    assert result.exit_code == 2
    assert result.stderr == f"Error: {deep}: nested too deeply to be a golden\n"


def test_parse_age():
    """Durations in s, m, h, d, w and combinations; garbage is a usage error."""
    assert parse_age("60d") == 60 * 86400 and parse_age("1d12h") == 1.5 * 86400
    assert parse_age("2w") == 14 * 86400
    for bad in ("", "abc", "10", "0d", "5y"):
        with pytest.raises(UsageError):
            parse_age(bad)


def test_golden_record_then_compare_judges_a_lone_host(tmp_path: Path):
    """Record a golden from a healthy fleet; a host alone is then judged against it."""
    out = tmp_path / "golden.json"
    result = run(golden, ["record", str(write(tmp_path, healthy())), "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    assert "Wrote" in result.stderr and json.loads(out.read_text())["golden_version"] == 1
    lone = tmp_path / "lone"
    lone.mkdir()
    bad = report("q", [unit("cpu:0", digests={1: "f" * 16}), unit("cpu:1")])
    (lone / "q.json").write_text(json.dumps(bad))
    result = run(compare, [str(lone), "--golden", str(out), "--json"])
    assert result.exit_code == 1
    found = [(f["unit"], f["kind"]) for f in json.loads(result.stdout)["findings"]]
    # Alone, its two units tie on case 1; the golden overrules the tie (issue 12, item 2): cpu:0 is
    # divergent from the golden, and no `undecided` finding contradicts that (it used to list both).
    assert found == [("cpu:0", "divergent")]
    assert json.loads(result.stdout)["findings"][0]["evidence"]["basis"] == "golden"


def test_golden_record_refuses_when_nothing_is_clear(tmp_path: Path):
    """Nothing usable, or no case with a clear majority: exit 2 and no file."""
    out = tmp_path / "golden.json"
    tie = [report("a", [unit("cpu:0", cases=1, digests={0: "f" * 16}), unit("cpu:1", cases=1)])]
    result = run(golden, ["record", str(write(tmp_path, tie)), "-o", str(out)])
    assert result.exit_code == 2 and "nothing recorded" in result.stderr and not out.exists()
    result = run(golden, ["record", str(tmp_path / "none"), "-o", str(out)])
    assert result.exit_code == 2 and "no usable report" in result.stderr


def test_render_compare_snapshot():
    """The human summary: counts, then a findings table with a sentence of evidence per row."""
    fleet = [*healthy(), report("bad", [unit("cpu:0", digests={2: "f" * 16}), unit("cpu:1")])]
    buf = StringIO()
    render_compare(summarize(extract(fleet)), Console(file=buf, width=100, no_color=True))
    text = buf.getvalue()
    flat = " ".join(text.split())
    assert flat.startswith(
        "Compared 5 report(s) from 5 host(s), 10 unit(s): 1 comparison group(s), 4 case(s)"
    )
    assert "Findings: 1 divergent" in text
    # Wording of issue 12 (one vote per host): the evidence counts hosts as well as units.
    assert "│ bad  │ cpu:0 │ divergent │ 1 of 4 case(s) differ from the fleet's digest, first case 2" in text
    assert "4 host(s), 9 unit(s) hold the reference" in flat
    assert flat.endswith("take those that fail again out of service.")


def test_fail_on_undecided_turns_a_close_split_into_exit_3(tmp_path):
    """Two hosts split 1 against 1: nobody is accused (exit 0); with --fail-on undecided, 3 ("could not
    judge"), never 1."""
    for name, digest in (("a", None), ("b", "f" * 16)):
        doc = report(
            name,
            [
                unit("cpu:0", digests={1: digest} if digest else None),
                unit("cpu:1", digests={1: digest} if digest else None),
            ],
        )
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    plain = CliRunner().invoke(compare, [str(tmp_path), "--json"])
    strict = CliRunner().invoke(compare, [str(tmp_path), "--json", "--fail-on", "undecided"])
    assert plain.exit_code == 0 and strict.exit_code == 3, (plain.stderr, strict.stderr)
    assert {f["kind"] for f in json.loads(strict.stdout)["findings"]} == {"undecided"}
    assert json.loads(strict.stdout)["exit_code"] == 3
