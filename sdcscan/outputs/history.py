"""Run history in a local SQLite database: sticky failures, coverage, and a lock against overlapping runs.

Every run is recorded with its per-unit verdicts and what each unit screened (cases, and seconds of
cases, for Ripple's coverage per day: `sdcscan.outputs.coverage`). A unit that failed once stays
flagged until an operator clears it with a reason (recorded with the time and the user), even if
later runs pass: a part that miscomputed once is not trusted again by default (cf. gpud #1072,
OpenDCDiag's service query). Kernel-log scans (`sdcscan sentinel`) are recorded beside the runs
(`sdcscan.outputs.sentinel_history`). Two overlapping cron runs must not corrupt the database or
each other's reports: writers take an immediate transaction, and `run_lock`
(`sdcscan.outputs.run_lock`) refuses a second concurrent run. Readers and writers wait for another
process's lock at most HISTORY_WAIT_S, then give up with `HistoryBusyError`.

Writers and readers are kept apart (`sdcscan.outputs.history_db`). Readers (`runs`, `flagged`,
`status`, `coverage`, `last_sentinel_scan`) open the database read-only (`mode=ro`): they never
create, migrate or write it, so a user who may only read the file (a non-root `sdcscan status` on
root's 0644 history) can; they read every version in READABLE_VERSIONS. The first writer after an
upgrade migrates an older history inside its transaction, keeping every run and flag
(`sdcscan.outputs.history_schema`).

A database is created complete under a temporary name and linked into place, so the history path
never holds a half-made one: a file there that is empty, foreign, of another version or damaged is
refused (`check_health`, before a run starts) instead of being silently re-created, which would
drop every sticky flag. The state directory sdcscan creates is 0700 and the lock file 0600 (see
`run_lock`); the database itself is FILE_MODE (0644) like every file sdcscan writes.
"""

from __future__ import annotations

import getpass
import os
import sqlite3
import time
from pathlib import Path

from typing_extensions import TypedDict

from sdcscan.errors import UsageError
from sdcscan.files import default_state_dir
from sdcscan.outputs.coverage import (
    UnitCoverage,
    background_flag,
    coverage,
    coverage_by_day,
    screened_seconds,
    window_coverage,
)
from sdcscan.outputs.history_db import (
    HISTORY_WAIT_S,
    HistoryBusyError,
    now_iso,
    quick_check,
    reading,
    writing,
)
from sdcscan.outputs.history_schema import DB_VERSION, READABLE_VERSIONS, has_column
from sdcscan.outputs.run_lock import LOCK_MODE, LOCK_NAME, RunActiveError, run_lock
from sdcscan.outputs.sentinel_history import SentinelScan, last_scan, last_sentinel_scan, record_sentinel_scan
from sdcscan.report.document import Report, Unit

__all__ = [
    "DB_VERSION", "HISTORY_WAIT_S", "LOCK_MODE", "LOCK_NAME", "READABLE_VERSIONS", "HistoryBusyError",
    "RunActiveError", "check_health", "clear", "coverage", "coverage_by_day", "default_history_path",
    "default_state_dir", "flagged", "last_sentinel_scan", "record_run", "record_sentinel_scan", "run_lock",
    "runs", "status",
]  # fmt: skip

COVERAGE_WINDOW_S = 86400.0  # `status` shows what each unit screened in the last 24 h
_INSERT_RUN = (
    "INSERT OR IGNORE INTO runs (run_id, recorded_at, started_at, ended_at, host, profile, seed, verdict, "
    "exit_code, report_path, background) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
)
_UNIT_ROWS = (
    "SELECT unit, verdict, reason, cases_run, mismatches, {screened} FROM unit_results "
    "WHERE run = ? ORDER BY rowid"
)


# The rows the readers return, as history_schema.SCHEMA declares their tables (without the internal id).


class UnitResult(TypedDict):
    """One unit of a recorded run."""

    unit: str
    verdict: str
    reason: str | None
    cases_run: int | None
    mismatches: int | None
    screened_s: float | None  # None: not recorded (a version-1 history)


class RecordedRun(TypedDict):
    """A recorded run and its units."""

    background: int | None  # 1, 0, or None: not recorded
    run_id: str
    recorded_at: str
    started_at: str | None
    ended_at: str | None
    host: str | None
    profile: str | None
    seed: int | None
    verdict: str
    exit_code: int | None
    report_path: str | None
    units: list[UnitResult]


class Flag(TypedDict):
    """A unit flagged by a failing run, open or cleared."""

    unit: str
    host: str | None
    run_id: str
    flagged_at: str
    reason: str | None
    failures: int
    last_run_id: str | None
    cleared_at: str | None
    clear_reason: str | None
    cleared_by: str | None


class Status(TypedDict):
    """What `sdcscan status` shows."""

    history: str
    flagged: list[Flag]
    last_run: RecordedRun | None
    cleared: list[Flag]
    coverage_24h: dict[str, UnitCoverage]
    last_sentinel: SentinelScan | None


def default_history_path() -> Path:
    """Where the history database lives unless `--history PATH` says otherwise."""
    return default_state_dir() / "history.sqlite3"


def check_health(db_path: str | os.PathLike[str]) -> None:
    """Refuse, before a run starts, a history database the run could not record into, or would mislead.

    Opens the database read-only, if it exists, and checks it is an sdcscan history of a version
    this sdcscan reads (an older one is migrated by the run) that passes SQLite's `quick_check`. A
    missing database is fine: the first run creates it. So is one another process holds locked for
    HISTORY_WAIT_S: nothing says it is bad, and the history is a record, not the judgement; the run
    goes on, and says at its end if the lock kept it from recording (`publish`).

    Raises:
        UsageError: one line naming the file: not a regular file, empty (0 bytes), unreadable, not an
            SQLite database, not an sdcscan history, another version, or damaged.
        Interrupted: SIGINT or SIGTERM while waiting for the lock.
    """
    try:
        with reading(db_path) as db:
            if db is not None:
                quick_check(db, Path(db_path))
    except HistoryBusyError:
        return


def record_run(db_path: str | os.PathLike[str], report: Report, report_path: str | None) -> None:
    """Record a run, its unit verdicts and what each unit screened; flag every failed unit not flagged yet.

    Recording the same run twice (same run id) changes nothing.

    Raises:
        RunError: the database could not be created, opened or written (a full disk included).
        HistoryBusyError: another process held it locked for HISTORY_WAIT_S, or a signal came while
            waiting; nothing was recorded.
    """
    run, host = report["run"], report["host"]["hostname"]
    now = now_iso()
    with writing(db_path) as db:
        row = (run["id"], now, run.get("started_at"), run.get("ended_at"), host, run["profile"]["name"],
               run.get("seed"), report["verdict"], report.get("exit_code"), report_path,
               background_flag(run))  # fmt: skip
        cur = db.execute(_INSERT_RUN, row)
        if cur.rowcount == 0:
            return
        for u in report["units"]:
            db.execute(
                "INSERT INTO unit_results VALUES (?,?,?,?,?,?,?)",
                (cur.lastrowid, u["id"], u["verdict"], u.get("reason"), u.get("cases_run"),
                 u.get("mismatches"), screened_seconds(u)),
            )  # fmt: skip
            if u["verdict"] == "fail":
                _flag(db, u, host, run["id"], now)


def _flag(db: sqlite3.Connection, unit: Unit, host: str, run_id: str, now: str) -> None:
    updated = db.execute(
        "UPDATE flags SET failures = failures + 1, last_run_id = ? WHERE unit = ? AND cleared_at IS NULL",
        (run_id, unit["id"]),
    ).rowcount
    if not updated:
        db.execute(
            "INSERT INTO flags (unit, host, run_id, flagged_at, reason, last_run_id) VALUES (?,?,?,?,?,?)",
            (unit["id"], host, run_id, now, unit.get("reason"), run_id),
        )


def runs(
    db_path: str | os.PathLike[str], *, unit: str | None = None, limit: int | None = None
) -> list[RecordedRun]:
    """Recorded runs, newest first, each with its per-unit verdicts (only `unit`'s, when given).

    Read-only. A database that does not exist yet holds no runs. Each run has `background` (1, 0 or
    None: not recorded) and each unit `screened_s` (None when not recorded, as in a version-1 history).

    Raises:
        UsageError: the database is unreadable, empty, foreign or of another version.
    """
    with reading(db_path) as db:
        return [] if db is None else _runs(db, unit=unit, limit=limit)


def _runs(db: sqlite3.Connection, *, unit: str | None, limit: int | None) -> list[RecordedRun]:
    where, args = ("WHERE id IN (SELECT run FROM unit_results WHERE unit = ?)", [unit]) if unit else ("", [])
    rows = db.execute(f"SELECT * FROM runs {where} ORDER BY id DESC LIMIT ?", [*args, limit or -1]).fetchall()
    v2 = has_column(db, "unit_results", "screened_s")
    unit_rows = _UNIT_ROWS.format(screened="screened_s" if v2 else "NULL AS screened_s")
    background = has_column(db, "runs", "background")  # a version-1 history has no such column
    out: list[RecordedRun] = []
    for r in rows:
        units = db.execute(unit_rows, (r["id"],)).fetchall()
        out.append(
            {
                "background": r["background"] if background else None,
                "run_id": r["run_id"],
                "recorded_at": r["recorded_at"],
                "started_at": r["started_at"],
                "ended_at": r["ended_at"],
                "host": r["host"],
                "profile": r["profile"],
                "seed": r["seed"],
                "verdict": r["verdict"],
                "exit_code": r["exit_code"],
                "report_path": r["report_path"],
                "units": [_unit_result(u) for u in units if not unit or u["unit"] == unit],
            }
        )
    return out


def _unit_result(r: sqlite3.Row) -> UnitResult:
    """A row of _UNIT_ROWS."""
    return {
        "unit": r["unit"],
        "verdict": r["verdict"],
        "reason": r["reason"],
        "cases_run": r["cases_run"],
        "mismatches": r["mismatches"],
        "screened_s": r["screened_s"],
    }


def _flag_row(r: sqlite3.Row) -> Flag:
    """A row of `flags` (SELECT *)."""
    return {
        "unit": r["unit"],
        "host": r["host"],
        "run_id": r["run_id"],
        "flagged_at": r["flagged_at"],
        "reason": r["reason"],
        "failures": r["failures"],
        "last_run_id": r["last_run_id"],
        "cleared_at": r["cleared_at"],
        "clear_reason": r["clear_reason"],
        "cleared_by": r["cleared_by"],
    }


def flagged(db_path: str | os.PathLike[str]) -> list[Flag]:
    """Units flagged by a failure and not cleared yet, oldest flag first. Read-only; no database: none.

    Raises:
        UsageError: the database is unreadable, empty, foreign or of another version.
    """
    with reading(db_path) as db:
        return [] if db is None else _flagged(db)


def _flagged(db: sqlite3.Connection) -> list[Flag]:
    rows = db.execute("SELECT * FROM flags WHERE cleared_at IS NULL ORDER BY id").fetchall()
    return [_flag_row(r) for r in rows]


def clear(db_path: str | os.PathLike[str], unit: str, reason: str) -> list[Flag]:
    """Clear the flag of `unit`, recording the time, the reason and the user. Returns the cleared flags.

    Raises:
        UsageError: the reason is empty, the unit is not flagged (the message lists those that are),
            or the database is unreadable, empty, foreign or of another version.
        RunError: the database could not be written.
    """
    if not reason.strip():
        raise UsageError("clear needs a reason, e.g. --reason 'replaced DIMM B2'")
    open_flags = flagged(db_path)
    if unit not in {f["unit"] for f in open_flags}:
        names = ", ".join(sorted({f["unit"] for f in open_flags})) or "none"
        raise UsageError(f"{unit} is not flagged (flagged units: {names})")
    with writing(db_path) as db:
        # No UPDATE ... RETURNING: it needs SQLite 3.35, newer than some long-term-support distributions ship.
        ids = [
            r[0] for r in db.execute("SELECT id FROM flags WHERE unit = ? AND cleared_at IS NULL", (unit,))
        ]
        marks = ",".join("?" * len(ids))
        db.execute(
            f"UPDATE flags SET cleared_at = ?, clear_reason = ?, cleared_by = ? WHERE id IN ({marks})",
            (now_iso(), reason.strip(), _user(), *ids),
        )
        return [
            _flag_row(r) for r in db.execute(f"SELECT * FROM flags WHERE id IN ({marks})", ids).fetchall()
        ]


def status(db_path: str | os.PathLike[str], *, now: float | None = None) -> Status:
    """What `sdcscan status` shows. Read-only.

    Args:
        db_path: the history database; a missing one has nothing recorded.
        now: Unix time the 24 h coverage window ends at (default: the current time).

    Returns:
        `{"history", "flagged", "last_run", "cleared"` (the 10 most recent clears), `"coverage_24h"`
        (`coverage` over the last 24 h: `{unit: {"cases", "seconds", "runs"}}`), `"last_sentinel"`
        (`last_sentinel_scan` without its section, or None)`}`.

    Raises:
        UsageError: the database is unreadable, empty, foreign or of another version.
    """
    end = time.time() if now is None else now
    with reading(db_path) as db:
        if db is None:
            return {"history": str(db_path), "flagged": [], "last_run": None, "cleared": [],
                    "coverage_24h": {}, "last_sentinel": None}  # fmt: skip
        cleared = db.execute(
            "SELECT * FROM flags WHERE cleared_at IS NOT NULL ORDER BY cleared_at DESC LIMIT 10"
        ).fetchall()
        last = _runs(db, unit=None, limit=1)
        return {"history": str(db_path), "flagged": _flagged(db), "last_run": last[0] if last else None,
                "cleared": [_flag_row(r) for r in cleared],
                "coverage_24h": window_coverage(db, start=end - COVERAGE_WINDOW_S, end=end),
                "last_sentinel": last_scan(db, with_section=False)}  # fmt: skip


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # containers often run as a uid with no passwd entry
        return str(os.getuid())
