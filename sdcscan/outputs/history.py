"""Run history in a local SQLite database, with sticky failures and a lock against overlapping runs.

Every run is recorded with its per-unit verdicts. A unit that failed once stays flagged until an
operator clears it with a reason (recorded with the time and the user), even if later runs pass: a
part that miscomputed once is not trusted again by default (cf. gpud #1072, OpenDCDiag's service
query). Two overlapping cron runs must not corrupt the database or each other's reports: writers
take an immediate transaction with a busy timeout, and `run_lock` refuses a second concurrent run.

Writers and readers are kept apart. Readers (`runs`, `flagged`, `status`) open the database
read-only (`mode=ro`): they never create, migrate or write it, so a user who may only read the file
(a non-root `sdcscan status` on root's 0644 history) can. That is why the database uses SQLite's
rollback journal, not WAL: a WAL reader must write the `-shm` file beside the database, which a
read-only user cannot; a run writes the history for milliseconds, and readers wait that out.

A database is created complete under a temporary name and linked into place, so the history path
never holds a half-made one: a file there that is empty, foreign, of another version or damaged is
refused (`check_health`, before a run starts) instead of being silently re-created, which would
drop every sticky flag. The state directory sdcscan creates is 0700 and the lock file 0600 (see
`run_lock`); the database itself is FILE_MODE (0644) like every file sdcscan writes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import os
import shlex
import sqlite3
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sdcscan.errors import RunError, UsageError
from sdcscan.files import FILE_MODE, default_state_dir, make_state_dir
from sdcscan.timefmt import iso_utc

__all__ = [
    "RunActiveError", "check_health", "clear", "default_history_path", "default_state_dir", "flagged",
    "record_run", "run_lock", "runs", "status",
]  # fmt: skip

BUSY_TIMEOUT_S = 30.0  # an overlapping writer holds the database for milliseconds; wait rather than fail
DB_VERSION = 1
_TABLES = frozenset({"runs", "unit_results", "flags"})
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


def default_history_path() -> Path:
    """Where the history database lives unless `--history PATH` says otherwise."""
    return default_state_dir() / "history.sqlite3"


def check_health(db_path: str | os.PathLike[str]) -> None:
    """Refuse, before a run starts, a history database the run could not record into, or would mislead.

    Opens the database read-only, if it exists, and checks it is an sdcscan history of DB_VERSION
    that passes SQLite's `quick_check`. A missing database is fine: the first run creates it.

    Raises:
        UsageError: one line naming the file: not a regular file, empty (0 bytes), unreadable, not an
            SQLite database, not an sdcscan history, another version, or damaged.
    """
    with _reading(db_path) as db:
        if db is not None:
            _quick_check(db, Path(db_path))


@contextlib.contextmanager
def _reading(path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection | None]:
    """A read-only connection to a checked history database; None when there is no database yet.

    Raises:
        UsageError: see `check_health` (everything but the quick check).
    """
    p = Path(path)
    if not _present(p):
        yield None
        return
    try:
        conn = sqlite3.connect(p.absolute().as_uri() + "?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error as err:
        raise UsageError(f"cannot read history {p}: {err}") from None
    try:
        conn.row_factory = sqlite3.Row
        _check_schema(conn, p)
        yield conn
    except sqlite3.Error as err:
        raise UsageError(f"cannot read history {p}: {err}{_foreign_hint(err)}") from None
    finally:
        conn.close()


def _present(path: Path) -> bool:
    """Whether a history database exists at `path`; False when there is nothing there yet.

    Raises:
        UsageError: the path cannot be examined, is not a regular file, or is an empty file.
    """
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as err:
        raise UsageError(f"cannot read history {path}: {err.strerror or err}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"history {path} is not a regular file")
    if st.st_size == 0:
        # sdcscan never leaves an empty database (it links a complete one into place): this one was
        # emptied, and re-creating it would silently drop every sticky flag.
        raise UsageError(
            f"history {path} is empty (0 bytes): its runs and sticky flags are gone; "
            "to start a new history on purpose, delete the file first"
        )
    return True


def _check_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Raises UsageError unless `conn` holds an sdcscan history of DB_VERSION (sqlite3.Error if unreadable)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if version == 0 or not _TABLES.issubset(tables):
        raise UsageError(f"history {path} is an SQLite database but not an sdcscan history")
    if version != DB_VERSION:
        raise UsageError(f"history {path} has version {version}; this sdcscan reads version {DB_VERSION}")


def _quick_check(conn: sqlite3.Connection, path: Path) -> None:
    problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check(3)")]
    if problems != ["ok"]:
        found = " ".join(" ".join(problems).split())  # one line: SQLite's own report spans several
        raise UsageError(f"history {path} is damaged (SQLite quick_check: {found[:200]})")


def _foreign_hint(err: sqlite3.Error) -> str:
    """A hint for errors that mean the file is not ours; none for a full disk, a lock or permissions."""
    return " (is it an sdcscan history database?)" if type(err) is sqlite3.DatabaseError else ""


@contextlib.contextmanager
def _writing(path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """A connection for writing (the database is created if missing); one transaction committed on
    success, rolled back on error.

    Raises:
        RunError: the database could not be created, opened or written, or is not an sdcscan
            history of DB_VERSION (an empty file included: it is never re-created in place).
    """
    p = Path(path)
    _create_if_missing(p)
    try:
        _present(p)  # an emptied file, say, is refused here too, with the same words as before a run
    except UsageError as err:
        raise RunError(str(err)) from None
    try:
        conn = sqlite3.connect(p, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as err:
        raise RunError(f"cannot open history {p}: {err}") from None
    try:
        conn.row_factory = sqlite3.Row
        with contextlib.suppress(sqlite3.OperationalError):
            # Histories written by an older sdcscan are in WAL mode, which read-only users cannot read
            # (see the module docstring); this converts them. Busy (a reader is on it): next time.
            conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("BEGIN IMMEDIATE")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != DB_VERSION:
            raise sqlite3.DatabaseError(f"history version {version}; this sdcscan writes {DB_VERSION}")
        yield conn
        conn.execute("COMMIT")
    except sqlite3.Error as err:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise RunError(f"history {p}: {err}{_foreign_hint(err)}") from None
    finally:
        conn.close()


def _create_if_missing(path: Path) -> None:
    """Create a complete, empty history at `path` (schema, version, FILE_MODE) unless one is there.

    Built under a temporary name and hard-linked into place: the path never holds a half-made
    database, and of two first runs racing, the second finds the first's and keeps it.

    Raises:
        RunError: the directory or the database could not be created (read-only or full disk).
    """
    if os.path.lexists(path):
        return
    try:
        make_state_dir(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise RunError(f"cannot create history {path}: {err.strerror or err}") from None
    try:
        try:
            os.fchmod(fd, FILE_MODE)
        finally:
            os.close(fd)
        _build_schema(tmp)
        _link_into_place(tmp, path)
    except (OSError, sqlite3.Error) as err:
        raise RunError(f"cannot create history {path}: {getattr(err, 'strerror', None) or err}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _build_schema(db_file: str) -> None:
    conn = sqlite3.connect(db_file, isolation_level=None)
    try:
        conn.execute("BEGIN")
        for statement in filter(str.strip, _SCHEMA.split(";")):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version={DB_VERSION}")
        conn.execute("COMMIT")
    finally:
        conn.close()


def _link_into_place(tmp: str, path: Path) -> None:
    """Hard-link `tmp` to `path` unless `path` exists by now (then the other run's database is kept)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    except OSError as err:
        if err.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP):
            raise
        # A filesystem without hard links: a rename, which could replace a database created in the
        # last milliseconds by a racing first run (it would lose that one run, never a flag of before).
        if not os.path.lexists(path):
            os.replace(tmp, path)


def record_run(db_path: str | os.PathLike[str], report: dict[str, Any], report_path: str | None) -> None:
    """Record a run and its unit verdicts; flag every failed unit that is not flagged already.

    Recording the same run twice (same run id) changes nothing.

    Raises:
        RunError: the database could not be created, opened or written (a full disk included).
    """
    run, host = report["run"], report["host"]["hostname"]
    now = _now()
    with _writing(db_path) as db:
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

    Read-only. A database that does not exist yet holds no runs.

    Raises:
        UsageError: the database is unreadable, empty, foreign or of another version.
    """
    with _reading(db_path) as db:
        return [] if db is None else _runs(db, unit=unit, limit=limit)


def _runs(db: sqlite3.Connection, *, unit: str | None, limit: int | None) -> list[dict[str, Any]]:
    where, args = ("WHERE id IN (SELECT run FROM unit_results WHERE unit = ?)", [unit]) if unit else ("", [])
    rows = db.execute(f"SELECT * FROM runs {where} ORDER BY id DESC LIMIT ?", [*args, limit or -1]).fetchall()
    out = []
    for r in rows:
        units = db.execute(_UNIT_ROWS, (r["id"],)).fetchall()
        out.append({**_row(r), "units": [dict(u) for u in units if not unit or u["unit"] == unit]})
    return out


def flagged(db_path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Units flagged by a failure and not cleared yet, oldest flag first. Read-only; no database: none.

    Raises:
        UsageError: the database is unreadable, empty, foreign or of another version.
    """
    with _reading(db_path) as db:
        return [] if db is None else _flagged(db)


def _flagged(db: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = db.execute("SELECT * FROM flags WHERE cleared_at IS NULL ORDER BY id").fetchall()
    return [_row(r) for r in rows]


def clear(db_path: str | os.PathLike[str], unit: str, reason: str) -> list[dict[str, Any]]:
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
    with _writing(db_path) as db:
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
    """What `sdcscan status` shows: flagged units, the last run, and the most recent clears. Read-only.

    Raises:
        UsageError: the database is unreadable, empty, foreign or of another version.
    """
    with _reading(db_path) as db:
        if db is None:
            return {"history": str(db_path), "flagged": [], "last_run": None, "cleared": []}
        cleared = db.execute(
            "SELECT * FROM flags WHERE cleared_at IS NOT NULL ORDER BY cleared_at DESC LIMIT 10"
        ).fetchall()
        last = _runs(db, unit=None, limit=1)
        return {"history": str(db_path), "flagged": _flagged(db), "last_run": last[0] if last else None,
                "cleared": [_row(r) for r in cleared]}  # fmt: skip


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
# flock works on any descriptor, read-only ones included, so whoever can open the file can hold the
# lock and stop every run: the file is 0600, owned by the user who runs sdcscan, never a symlink.
LOCK_NAME = "run.lock"
LOCK_MODE = 0o600
_MAX_COMMAND_CHARS = 200  # of the holder's command line, in the contention message


class RunActiveError(RunError):
    """Another sdcscan run holds the run lock."""


@contextlib.contextmanager
def run_lock(state_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the run lock of `state_dir` for the duration of the block; never wait for it.

    Args:
        state_dir: directory of the lock file (created 0700 if missing), normally the history's directory.

    Yields:
        The lock file's path.

    Raises:
        RunActiveError: another run holds the lock; the message names its pid, command and start time.
        RunError: the lock file could not be created or written (a full disk included), or is refused:
            a symlink, not a regular file, owned by another user, or open to other users.
    """
    path = Path(state_dir) / LOCK_NAME
    fd = _open_lock(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunActiveError(_holder_message(fd, path)) from None
        except OSError as err:  # e.g. ENOLCK on a network filesystem without locks
            raise RunError(f"cannot take the run lock {path}: {err.strerror or err}") from None
        _write_holder(fd, path)
        try:
            yield path
        finally:
            # Empty the file before unlocking so a reader never names a finished run as the holder.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)  # also releases the lock when writing the holder failed


def _open_lock(path: Path) -> int:
    """The lock file's descriptor, created 0600 if missing, after checking nobody else can hold it.

    Raises:
        RunError: see `run_lock`.
    """
    try:
        make_state_dir(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC, LOCK_MODE)
    except OSError as err:
        why = (
            "it is a symbolic link, never followed" if err.errno == errno.ELOOP else err.strerror or str(err)
        )
        raise RunError(f"cannot create the run lock {path}: {why}") from None
    try:
        st = os.fstat(fd)
        problem = _lock_problem(st)
        if problem is None and st.st_mode & 0o077:
            # Ours, but open to others: made 0644 by sdcscan before 0.2, on every host that ran it.
            # Tightening it in place keeps those hosts screening after an upgrade.
            os.fchmod(fd, LOCK_MODE)
    except OSError as err:
        problem = err.strerror or str(err)
    if problem:
        os.close(fd)
        raise RunError(f"refusing the run lock {path}: {problem}")
    return fd


def _lock_problem(st: os.stat_result) -> str | None:
    """Why a lock file could let someone else hold the lock (and stop every run), or None."""
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if st.st_uid != os.geteuid():
        return f"it belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}); delete it"
    return None


def _write_holder(fd: int, path: Path) -> None:
    """Record this process in the lock file: `PID START COMMAND`, for the message another run gives.

    Raises:
        RunError: the file could not be written (a full disk).
    """
    line = f"{os.getpid()} {_now()} {_command_line()}\n"
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, line.encode("utf-8", "replace"), 0)
    except OSError as err:
        raise RunError(f"cannot write the run lock {path}: {err.strerror or err}") from None


def _command_line() -> str:
    """This process's command line as a person would type it, e.g. `sdcscan run -p burnin`."""
    args = list(sys.argv) or ["sdcscan"]
    name = os.path.basename(args[0])
    if name == "__main__.py":  # python -m sdcscan
        name = "sdcscan"
    return _one_line(shlex.join([name, *args[1:]]))


def _holder_message(fd: int, path: Path) -> str:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
    except OSError:
        text = ""
    pid, _, rest = text.strip().partition(" ")
    since, _, command = rest.partition(" ")
    if not pid.isdigit():
        who = "pid unknown"
    else:
        command = command or _proc_command(pid)
        who = (
            f"pid {pid}"
            + (f" '{_one_line(command)}'" if command else "")
            + (f", since {since}" if since else "")
        )
    return f"another sdcscan run is active ({who}; lock {path}); wait for it to finish or stop it first"


def _proc_command(pid: str) -> str:
    """The command line of process `pid` from /proc (Linux), for a lock written without one; '' if unknown."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return shlex.join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)


def _one_line(text: str) -> str:
    """Printable characters only, at most _MAX_COMMAND_CHARS: the message stays one readable line."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return clean if len(clean) <= _MAX_COMMAND_CHARS else clean[: _MAX_COMMAND_CHARS - 3] + "..."
