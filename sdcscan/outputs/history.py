"""Run history in a local SQLite database, with sticky failures and a lock against overlapping runs.

Every run is recorded with its per-unit verdicts. A unit that failed once stays flagged until an
operator clears it with a reason (recorded with the time and the user), even if later runs pass: a
part that miscomputed once is not trusted again by default (cf. gpud #1072, OpenDCDiag's service
query). Two overlapping cron runs must not corrupt the database or each other's reports: SQLite
runs in WAL mode with a busy timeout, and `run_lock` refuses a second concurrent run.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sdcscan.errors import RunError, UsageError
from sdcscan.timefmt import iso_utc

__all__ = [
    "RunActiveError", "clear", "default_history_path", "default_state_dir", "flagged", "record_run",
    "run_lock", "runs", "status",
]  # fmt: skip

BUSY_TIMEOUT_S = 30.0  # an overlapping writer holds the database for milliseconds; wait rather than fail
DB_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL UNIQUE, recorded_at TEXT NOT NULL,
    started_at TEXT, ended_at TEXT, host TEXT, profile TEXT, seed INTEGER, verdict TEXT NOT NULL,
    exit_code INTEGER, report_path TEXT);
CREATE TABLE IF NOT EXISTS unit_results (
    run INTEGER NOT NULL REFERENCES runs(id), unit TEXT NOT NULL, verdict TEXT NOT NULL, reason TEXT,
    cases_run INTEGER, mismatches INTEGER, PRIMARY KEY (run, unit));
CREATE TABLE IF NOT EXISTS flags (
    id INTEGER PRIMARY KEY AUTOINCREMENT, unit TEXT NOT NULL, host TEXT, run_id TEXT NOT NULL,
    flagged_at TEXT NOT NULL, reason TEXT, failures INTEGER NOT NULL DEFAULT 1, last_run_id TEXT,
    cleared_at TEXT, clear_reason TEXT, cleared_by TEXT);
CREATE INDEX IF NOT EXISTS flags_open ON flags(unit) WHERE cleared_at IS NULL;
"""
_INSERT_RUN = (
    "INSERT OR IGNORE INTO runs (run_id, recorded_at, started_at, ended_at, host, profile, seed, verdict, "
    "exit_code, report_path) VALUES (?,?,?,?,?,?,?,?,?,?)"
)
_UNIT_ROWS = (
    "SELECT unit, verdict, reason, cases_run, mismatches FROM unit_results WHERE run = ? ORDER BY rowid"
)


def default_state_dir() -> Path:
    """`$XDG_STATE_HOME/sdcscan`, else `~/.local/state/sdcscan` (the XDG base-directory default)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "sdcscan"


def default_history_path() -> Path:
    """Where the history database lives unless `--history PATH` says otherwise."""
    return default_state_dir() / "history.sqlite3"


@contextlib.contextmanager
def _db(path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """An open, migrated connection; one transaction committed on success, rolled back on error."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(p, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except (OSError, sqlite3.Error) as err:
        raise RunError(f"cannot open history {p}: {err}") from None
    try:
        with contextlib.suppress(sqlite3.OperationalError):
            # WAL lets `status` read while a run writes; it fails on some network filesystems, where
            # the default rollback journal (still safe, with the busy timeout) is kept.
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("BEGIN IMMEDIATE")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            # DDL inside the immediate transaction: two first runs racing create the schema once.
            for statement in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version={DB_VERSION}")
        elif version != DB_VERSION:
            raise sqlite3.DatabaseError(f"history version {version}; this sdcscan reads {DB_VERSION}")
        yield conn
        conn.execute("COMMIT")
    except sqlite3.Error as err:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise RunError(f"history {p}: {err} (is it an sdcscan history database?)") from None
    finally:
        conn.close()


def record_run(db_path: str | os.PathLike[str], report: dict[str, Any], report_path: str | None) -> None:
    """Record a run and its unit verdicts; flag every failed unit that is not flagged already.

    Recording the same run twice (same run id) changes nothing.

    Raises:
        RunError: the database could not be opened or written.
    """
    run, host = report["run"], report["host"]["hostname"]
    now = _now()
    with _db(db_path) as db:
        row = (run["id"], now, run.get("started_at"), run.get("ended_at"), host, run["profile"]["name"],
               run.get("seed"), report["verdict"], report.get("exit_code"), report_path)  # fmt: skip
        cur = db.execute(_INSERT_RUN, row)
        if cur.rowcount == 0:
            return
        for u in report["units"]:
            db.execute(
                "INSERT INTO unit_results VALUES (?,?,?,?,?,?)",
                (
                    cur.lastrowid,
                    u["id"],
                    u["verdict"],
                    u.get("reason"),
                    u.get("cases_run"),
                    u.get("mismatches"),
                ),
            )
            if u["verdict"] == "fail":
                _flag(db, u, host, run["id"], now)


def _flag(db: sqlite3.Connection, unit: dict[str, Any], host: str, run_id: str, now: str) -> None:
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
) -> list[dict[str, Any]]:
    """Recorded runs, newest first, each with its per-unit verdicts (only `unit`'s, when given).

    A database that does not exist yet holds no runs.
    """
    if not Path(db_path).exists():
        return []
    where, args = ("WHERE id IN (SELECT run FROM unit_results WHERE unit = ?)", [unit]) if unit else ("", [])
    with _db(db_path) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute(
            f"SELECT * FROM runs {where} ORDER BY id DESC LIMIT ?", [*args, limit or -1]
        ).fetchall()
        out = []
        for r in rows:
            units = db.execute(_UNIT_ROWS, (r["id"],)).fetchall()
            out.append({**_row(r), "units": [dict(u) for u in units if not unit or u["unit"] == unit]})
        return out


def flagged(db_path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Units flagged by a failure and not cleared yet, oldest flag first. No database: none."""
    if not Path(db_path).exists():
        return []
    with _db(db_path) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute("SELECT * FROM flags WHERE cleared_at IS NULL ORDER BY id").fetchall()
        return [_row(r) for r in rows]


def clear(db_path: str | os.PathLike[str], unit: str, reason: str) -> list[dict[str, Any]]:
    """Clear the flag of `unit`, recording the time, the reason and the user. Returns the cleared flags.

    Raises:
        UsageError: the reason is empty, or the unit is not flagged (the message lists those that are).
    """
    if not reason.strip():
        raise UsageError("clear needs a reason, e.g. --reason 'replaced DIMM B2'")
    open_flags = flagged(db_path)
    if unit not in {f["unit"] for f in open_flags}:
        names = ", ".join(sorted({f["unit"] for f in open_flags})) or "none"
        raise UsageError(f"{unit} is not flagged (flagged units: {names})")
    with _db(db_path) as db:
        db.row_factory = sqlite3.Row
        # No UPDATE ... RETURNING: it needs SQLite 3.35, newer than some long-term-support distributions ship.
        ids = [
            r[0] for r in db.execute("SELECT id FROM flags WHERE unit = ? AND cleared_at IS NULL", (unit,))
        ]
        marks = ",".join("?" * len(ids))
        db.execute(
            f"UPDATE flags SET cleared_at = ?, clear_reason = ?, cleared_by = ? WHERE id IN ({marks})",
            (_now(), reason.strip(), _user(), *ids),
        )
        return [_row(r) for r in db.execute(f"SELECT * FROM flags WHERE id IN ({marks})", ids).fetchall()]


def status(db_path: str | os.PathLike[str]) -> dict[str, Any]:
    """What `sdcscan status` shows: flagged units, the last run, and the most recent clears."""
    if not Path(db_path).exists():
        return {"history": str(db_path), "flagged": [], "last_run": None, "cleared": []}
    with _db(db_path) as db:
        db.row_factory = sqlite3.Row
        cleared = db.execute(
            "SELECT * FROM flags WHERE cleared_at IS NOT NULL ORDER BY cleared_at DESC LIMIT 10"
        )
        cleared_list = [_row(r) for r in cleared.fetchall()]
    last = runs(db_path, limit=1)
    return {"history": str(db_path), "flagged": flagged(db_path), "last_run": last[0] if last else None,
            "cleared": cleared_list}  # fmt: skip


def _row(row: sqlite3.Row) -> dict[str, Any]:
    """A row as a dict without its internal rowid."""
    return {k: v for k, v in dict(row).items() if k != "id"}


def _now() -> str:
    return iso_utc(time.time())


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # containers often run as a uid with no passwd entry
        return str(os.getuid())


# The run lock: one `sdcscan run` at a time on a host (two cron entries, a slow run).
LOCK_NAME = "run.lock"


class RunActiveError(RunError):
    """Another sdcscan run holds the run lock."""


@contextlib.contextmanager
def run_lock(state_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the run lock of `state_dir` for the duration of the block; never wait for it.

    Args:
        state_dir: directory of the lock file (created if missing), normally the history's directory.

    Yields:
        The lock file's path.

    Raises:
        RunActiveError: another run holds the lock; the message names its pid and start time.
        RunError: the lock file could not be created.
    """
    path = Path(state_dir) / LOCK_NAME
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise RunError(f"cannot create the run lock {path}: {err.strerror or err}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunActiveError(_holder_message(fd, path)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {_now()}\n".encode(), 0)
        try:
            yield path
        finally:
            # Empty the file before unlocking so a reader never names a finished run as the holder.
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _holder_message(fd: int, path: Path) -> str:
    try:
        pid, _, since = os.pread(fd, 200, 0).decode("utf-8", "replace").strip().partition(" ")
    except OSError:
        pid, since = "", ""
    who = f"pid {pid}, since {since}" if pid else "pid unknown"
    return f"another sdcscan run is active ({who}; lock {path}); wait for it to finish or stop it first"
