"""Progress of `compare` and `ingest`: what the library tells its sink, and what a person sees.

The bar is drawn on a terminal only (a real pseudo-terminal here), never with --json, in a pipe or a log.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from sdcscan.fleet.compare import Options, compare_files, compare_from
from sdcscan.fleet.convert import CHUNK_FILES
from sdcscan.fleet.ingest import ingest
from sdcscan.fleet.progress import JUDGING, READING, WRITING, FleetProgress
from sdcscan.timefmt import parse_iso_utc
from tests.helpers.cli import ROOT
from tests.helpers.scripts import load_script

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

HOSTS = 2 * CHUNK_FILES + 40  # three chunks of files, the last one short


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("fleet")
    manifest = load_script("simulate_fleet").simulate(HOSTS, 2, 10, out, 7)
    files = sorted(str(p) for p in (out / "reports").rglob("*.json"))
    return {"out": out, "files": files, "now": manifest["now"]}


def _updates(run: object) -> list[FleetProgress]:
    seen: list[FleetProgress] = []
    run(seen.append)  # type: ignore[operator]
    return seen


def _check_reading(seen: list[FleetProgress], files: int) -> None:
    reading = [u for u in seen if u.phase == READING]
    assert len(reading) >= 3  # one per chunk
    done = [u.files_read for u in reading]
    assert done == sorted(done) and done[-1] == files and all(u.files == files for u in seen)
    rows = [u.case_rows for u in reading]
    assert rows == sorted(rows) and rows[0] > 0


@pytest.mark.parametrize("jobs", [1, 2])
def test_compare_tells_each_chunk_read_then_judging(fleet: dict[str, object], jobs: int):
    files = fleet["files"]
    assert isinstance(files, list)
    opts = Options(now=parse_iso_utc(str(fleet["now"])))
    summary = None

    def run(sink: object) -> None:
        nonlocal summary
        summary = compare_files(files, opts, jobs=jobs, progress=sink)  # type: ignore[arg-type]

    seen = _updates(run)
    _check_reading(seen, len(files))
    assert seen[-1].phase == JUDGING and [u.phase for u in seen].count(JUDGING) == 1
    assert summary is not None
    counts = summary.to_dict()["counts"]
    # every usable report was read; an identical copy of one is read too, and dropped when judging
    assert counts["reports"] + counts["superseded"] <= seen[-1].reports <= len(files) - counts["skipped"] + 1


def test_ingest_tells_each_chunk_then_writing_and_compare_from_judging(
    fleet: dict[str, object], tmp_path: Path
):
    files = fleet["files"]
    assert isinstance(files, list)
    result = None

    def run(sink: object) -> None:
        nonlocal result
        result = ingest(files, tmp_path / "ds", workers=1, progress=sink)  # type: ignore[arg-type]

    seen = _updates(run)
    _check_reading(seen, len(files))
    assert result is not None
    assert seen[-1].phase == WRITING and seen[-1].case_rows == result.rows["cases"]
    assert seen[-1].reports == result.reports
    judged = _updates(
        lambda sink: compare_from(
            tmp_path / "ds", Options(now=parse_iso_utc(str(fleet["now"]))), progress=sink
        )
    )
    assert [u.phase for u in judged] == [JUDGING]


def _compare_argv(fleet: dict[str, object]) -> list[str]:
    out = fleet["out"]
    assert isinstance(out, Path)
    return [sys.executable, "-m", "sdcscan", "compare", str(out / "reports"), "--now", str(fleet["now"])]


def _compare_on_terminal(fleet: dict[str, object], tmp: Path, *extra: str) -> tuple[str, str, int]:
    """Run `compare` with stderr on a pseudo-terminal; (stdout, what the terminal showed, exit code)."""
    master, slave = pty.openpty()
    argv = _compare_argv(fleet)
    out_path = tmp / "stdout"
    with out_path.open("wb") as out:
        proc = subprocess.Popen([*argv, *extra], stdout=out, stderr=slave, cwd=ROOT)
    os.close(slave)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    proc.wait(timeout=120)
    os.close(master)
    return out_path.read_text(), shown.decode(errors="replace"), proc.returncode


def test_a_terminal_shows_the_bar_with_files_reports_and_phase(fleet: dict[str, object], tmp_path: Path):
    _, shown, code = _compare_on_terminal(fleet, tmp_path)
    assert code == 1  # the simulated fleet has planted faults
    assert READING in shown and JUDGING in shown
    assert f"{HOSTS}" in shown and "case rows" in shown


def test_json_on_a_terminal_and_a_pipe_get_no_bar(fleet: dict[str, object], tmp_path: Path):
    stdout, shown, code = _compare_on_terminal(fleet, tmp_path, "--json")
    assert code == 1 and json.loads(stdout)["exit_code"] == 1
    assert READING not in shown and JUDGING not in shown
    argv = _compare_argv(fleet)
    piped = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert piped.returncode == 1 and "Findings:" in piped.stderr
    assert READING not in piped.stderr and JUDGING not in piped.stderr
