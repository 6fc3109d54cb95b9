"""History: every run recorded newest first, sticky failures until cleared, one run at a time."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sdcscan.errors import RunError, UsageError
from sdcscan.outputs.history import (
    RunActiveError,
    clear,
    default_history_path,
    flagged,
    record_run,
    run_lock,
    runs,
    status,
)
from tests.helpers.reports import make_report


def _record(db: Path, n: int, *, fail_unit: str | None) -> None:
    report = make_report(fail_unit=fail_unit, run_id=f"run-{n}", ended_at=f"2025-01-0{n}T00:01:00Z")
    record_run(db, report, f"reports/run-{n}.json")


def test_failure_is_sticky_until_cleared_with_a_reason(tmp_path: Path) -> None:
    """A unit that failed stays flagged through later passing runs until cleared; the clear is recorded."""
    db = tmp_path / "h.sqlite3"
    _record(db, 1, fail_unit="cpu:1")
    _record(db, 2, fail_unit=None)
    assert [f["unit"] for f in flagged(db)] == ["cpu:1"]
    assert flagged(db)[0]["run_id"] == "run-1"
    cleared = clear(db, "cpu:1", "replaced")
    assert [(c["unit"], c["clear_reason"]) for c in cleared] == [("cpu:1", "replaced")]
    assert cleared[0]["cleared_at"] and cleared[0]["cleared_by"]
    assert flagged(db) == []
    assert status(db)["cleared"][0]["clear_reason"] == "replaced"


def test_repeat_failures_count_on_one_flag_and_fail_again_after_clear(tmp_path: Path) -> None:
    """Failing again while flagged counts on the open flag; failing after a clear opens a new flag."""
    db = tmp_path / "h.sqlite3"
    _record(db, 1, fail_unit="cpu:1")
    _record(db, 2, fail_unit="cpu:1")
    assert [(f["failures"], f["last_run_id"]) for f in flagged(db)] == [(2, "run-2")]
    clear(db, "cpu:1", "reseated")
    _record(db, 3, fail_unit="cpu:1")
    assert [f["run_id"] for f in flagged(db)] == ["run-3"]


def test_history_is_newest_first_and_filters_by_unit(tmp_path: Path) -> None:
    """runs() lists newest first with per-unit verdicts; --unit keeps only that unit's rows."""
    db = tmp_path / "h.sqlite3"
    for n in (1, 2, 3):
        _record(db, n, fail_unit="cpu:1" if n == 2 else None)
    listed = runs(db)
    assert [r["run_id"] for r in listed] == ["run-3", "run-2", "run-1"]
    assert listed[1]["verdict"] == "fail"
    assert listed[1]["report_path"] == "reports/run-2.json"
    assert {u["unit"]: u["verdict"] for u in listed[1]["units"]} == {"cpu:0": "pass", "cpu:1": "fail"}
    only = runs(db, unit="cpu:1", limit=2)
    assert [r["run_id"] for r in only] == ["run-3", "run-2"]
    assert all([u["unit"] for u in r["units"]] == ["cpu:1"] for r in only)


def test_recording_the_same_run_twice_changes_nothing(tmp_path: Path) -> None:
    """record_run is idempotent on the run id."""
    db = tmp_path / "h.sqlite3"
    _record(db, 1, fail_unit="cpu:1")
    _record(db, 1, fail_unit="cpu:1")
    assert len(runs(db)) == 1
    assert flagged(db)[0]["failures"] == 1


def test_clear_needs_a_reason_and_a_flagged_unit(tmp_path: Path) -> None:
    """Clearing without a reason, or a unit that is not flagged, is a usage error naming what is flagged."""
    db = tmp_path / "h.sqlite3"
    _record(db, 1, fail_unit="cpu:1")
    with pytest.raises(UsageError, match="needs a reason"):
        clear(db, "cpu:1", "  ")
    with pytest.raises(UsageError, match=r"cpu:0 is not flagged \(flagged units: cpu:1\)"):
        clear(db, "cpu:0", "x")


def test_no_database_yet_means_nothing_recorded(tmp_path: Path) -> None:
    """Reading a history that does not exist yet is empty, not an error, and creates nothing."""
    db = tmp_path / "none.sqlite3"
    assert runs(db) == [] and flagged(db) == [] and status(db)["last_run"] is None
    assert not db.exists()


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    """A foreign file at the history path gives a one-line RunError."""
    db = tmp_path / "h.sqlite3"
    db.write_text("this is not sqlite " * 100)
    with pytest.raises(RunError, match="is it an sdcscan history database"):
        _record(db, 1, fail_unit=None)


def test_database_uses_wal(tmp_path: Path) -> None:
    """WAL lets `status` read while a run records."""
    db = tmp_path / "h.sqlite3"
    _record(db, 1, fail_unit=None)
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_second_run_lock_is_refused_naming_the_other_process(tmp_path: Path) -> None:
    """While another process holds the lock a run is refused at once, naming its pid."""
    state = tmp_path / "state"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(state)],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with (
            pytest.raises(RunActiveError, match=rf"another sdcscan run is active \(pid {holder.pid}, since "),
            run_lock(state),
        ):
            pass  # pragma: no cover
    finally:
        holder.communicate("done\n", timeout=10)
    with run_lock(state), pytest.raises(RunActiveError), run_lock(state):  # nor twice in one process
        pass  # pragma: no cover


_HOLD_LOCK = """
import sys
from sdcscan.outputs.history import run_lock
with run_lock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_default_path_follows_xdg_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$XDG_STATE_HOME/sdcscan/history.sqlite3, else ~/.local/state/sdcscan/."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_history_path() == tmp_path / "sdcscan" / "history.sqlite3"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_history_path() == tmp_path / "home/.local/state/sdcscan/history.sqlite3"
