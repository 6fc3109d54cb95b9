"""Opening the history database: read-only readers, one-transaction writers, atomic creation.

Readers open the database read-only (`mode=ro`): they never create, migrate or write it, so a user
who may only read the file (a non-root `sdcscan status` on root's 0644 history) can. That is why the
database uses SQLite's rollback journal, not WAL: a WAL reader must write the `-shm` file beside the
database, which a read-only user cannot; a run writes the history for milliseconds, and readers
wait that out. Writers take an immediate transaction, so two overlapping cron runs serialise instead
of corrupting each other; the first writer after an upgrade migrates the file inside that
transaction (`history_schema.migrate`).

Every wait for another process's lock is bounded: at most HISTORY_WAIT_S, in slices of
_BUSY_SLICE_S, so a history held by someone else (an operator's `sqlite3` shell in `BEGIN
EXCLUSIVE`, a backup) costs a run a few seconds, not a minute. Between slices the wait stops at
once when SIGINT or SIGTERM has arrived (`interrupts.received`): Python runs signal handlers only
between SQLite calls, never inside one. Giving up is `HistoryBusyError`; a run then keeps its
verdict and says the history was not updated (`publish`).

A database is created complete under a temporary name and linked into place, so the history path
never holds a half-made one: a file there that is empty, foreign, of another version or damaged is
refused instead of being silently re-created, which would drop every sticky flag.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from sdcscan import interrupts
from sdcscan.errors import RunError, UsageError
from sdcscan.files import FILE_MODE, link_problem, make_state_dir
from sdcscan.outputs.history_schema import build_schema, check_schema, migrate
from sdcscan.timefmt import iso_utc

# An overlapping sdcscan writer holds the database for milliseconds; anything holding it longer is
# another program, and the run's verdict must not wait on it: at most this long, then go on without.
HISTORY_WAIT_S = 5.0
_BUSY_SLICE_S = 0.1  # SQLite's own busy wait per try: a signal is acted on within about this long
_BUSY_PAUSE_S = 0.02  # between tries, for the busy answers SQLite gives without waiting
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6  # SQLite's primary result codes (extended ones add high bits)
_T = TypeVar("_T")


class HistoryBusyError(RunError):
    """Another process held the history database locked for the whole bounded wait, or a signal
    ended the wait: exit 3 for a command that needed the history; a run only notes it (`publish`)."""


@contextlib.contextmanager
def reading(path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection | None]:
    """A read-only connection to a checked history database; None when there is no database yet.

    The connection holds one read transaction for the whole block (a consistent view, and no lock
    to wait for after the first read), taken within HISTORY_WAIT_S.

    Raises:
        UsageError: see `history.check_health` (everything but the quick check).
        HistoryBusyError: another process held the database locked for HISTORY_WAIT_S, or a signal
            came while waiting (exit 3: the history could not be read, nothing is wrong with it).
    """
    p = Path(path)
    if not present(p):
        yield None
        return
    started = time.monotonic()
    deadline = started + HISTORY_WAIT_S
    try:
        conn = sqlite3.connect(
            p.absolute().as_uri() + "?mode=ro", uri=True, timeout=_BUSY_SLICE_S, isolation_level=None
        )
    except sqlite3.Error as err:
        raise UsageError(f"cannot read history {p}: {err}") from None
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("BEGIN")
        _until_free(lambda: conn.execute("SELECT count(*) FROM sqlite_master").fetchone(), deadline)
        check_schema(conn, p)
        yield conn
    except sqlite3.Error as err:
        if is_busy(err):
            raise _busy_error(p, started) from None
        raise UsageError(f"cannot read history {p}: {err}{foreign_hint(err)}") from None
    finally:
        conn.close()  # ends the read transaction


def present(path: Path) -> bool:
    """Whether a history database exists at `path`; False when there is nothing there yet.

    Raises:
        UsageError: the path cannot be examined, is a symbolic link sdcscan must not open through
            (`files.link_problem`: its target does not exist, or another user planted it in /tmp),
            is not a regular file, or is an empty file.
    """
    problem = link_problem(path)
    if problem:
        raise UsageError(f"history {path} {problem}")
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as err:
        raise UsageError(f"cannot read history {path}: {err.strerror or err}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"history {path} is not a regular file")
    if st.st_size == 0:
        # sdcscan never leaves an empty database (it links a complete one into place): this file was
        # made by another program (`mktemp` for a new history) or emptied (a history's runs and flags
        # lost), which nothing here can tell apart; re-creating it in silence could drop every flag.
        raise UsageError(
            f"history {path} is an empty file (0 bytes), not an sdcscan history: if it held one, its runs "
            "and sticky flags are gone; to start a new history there, delete the file first (sdcscan "
            "creates it)"
        )
    return True


def quick_check(conn: sqlite3.Connection, path: Path) -> None:
    """Raises UsageError naming the file when SQLite's `quick_check` finds damage."""
    problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check(3)")]
    if problems != ["ok"]:
        found = " ".join(" ".join(problems).split())  # one line: SQLite's own report spans several
        raise UsageError(f"history {path} is damaged (SQLite quick_check: {found[:200]})")


def foreign_hint(err: sqlite3.Error) -> str:
    """A hint for errors that mean the file is not ours; none for a full disk, a lock or permissions."""
    return " (is it an sdcscan history database?)" if type(err) is sqlite3.DatabaseError else ""


def is_busy(err: sqlite3.Error) -> bool:
    """Whether SQLite refused because another connection holds a lock (SQLITE_BUSY or SQLITE_LOCKED)."""
    code = getattr(err, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)


def _until_free(step: Callable[[], _T], deadline: float) -> _T:
    """`step()`, tried again while SQLite answers busy, until `deadline` (time.monotonic) or a signal.

    A run that is judging and writing its outputs only records SIGINT and SIGTERM (`interrupts.hold`),
    so this is where the wait learns of one (`interrupts.received`); elsewhere the handler raises
    `Interrupted` from the pause itself.

    Raises:
        sqlite3.OperationalError: still busy at the deadline or after a signal (`is_busy` says so:
            the caller turns it into `_busy_error`), or any other refusal.
    """
    while True:
        try:
            return step()
        except sqlite3.OperationalError as err:
            if not is_busy(err) or interrupts.received() is not None or time.monotonic() >= deadline:
                raise
        time.sleep(_BUSY_PAUSE_S)


def _busy_error(path: Path, started: float) -> HistoryBusyError:
    """Why a wait for the history that began at `started` (time.monotonic) ended: a signal, or another
    process holding the file past HISTORY_WAIT_S."""
    waited = time.monotonic() - started
    signum = interrupts.received()
    if signum is not None and waited < HISTORY_WAIT_S:
        why = f"stopped waiting after {waited:.1f} s: {interrupts.signal_name(signum)} received"
    else:
        why = f"waited {waited:.1f} s; sdcscan waits at most {HISTORY_WAIT_S:g} s"
    return HistoryBusyError(f"history {path} is locked by another process ({why})")


@contextlib.contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """A connection for writing (the database is created if missing, an older version migrated); one
    transaction committed on success, rolled back on error.

    Taking the write lock and committing wait for other connections at most HISTORY_WAIT_S in all.

    Raises:
        RunError: the database could not be created, opened or written, or is not an sdcscan
            history this sdcscan can write (an empty file included: it is never re-created in place).
        HistoryBusyError: another process held the database locked for HISTORY_WAIT_S, or a signal
            came while waiting; nothing was written.
    """
    p = Path(path)
    _create_if_missing(p)
    try:
        present(p)  # an emptied file, say, is refused here too, with the same words as before a run
    except UsageError as err:
        raise RunError(str(err)) from None
    started = time.monotonic()
    deadline = started + HISTORY_WAIT_S
    try:
        conn = sqlite3.connect(p, timeout=_BUSY_SLICE_S, isolation_level=None)
    except sqlite3.Error as err:
        raise RunError(f"cannot open history {p}: {err}") from None
    try:
        conn.row_factory = sqlite3.Row
        with contextlib.suppress(sqlite3.OperationalError):
            # Histories written by an older sdcscan are in WAL mode, which read-only users cannot read
            # (see the module docstring); this converts them. Busy (a reader is on it): next time.
            conn.execute("PRAGMA journal_mode=DELETE")
        _until_free(lambda: conn.execute("BEGIN IMMEDIATE"), deadline)
        migrate(conn, int(conn.execute("PRAGMA user_version").fetchone()[0]))
        yield conn
        # A COMMIT refused as busy (a reader still on the file) leaves the transaction open to retry.
        _until_free(lambda: conn.execute("COMMIT"), deadline)
    except sqlite3.Error as err:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        if is_busy(err):
            raise _busy_error(p, started) from None
        raise RunError(f"history {p}: {err}{foreign_hint(err)}") from None
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
        build_schema(tmp)
        _link_into_place(tmp, path)
    except (OSError, sqlite3.Error) as err:
        raise RunError(f"cannot create history {path}: {getattr(err, 'strerror', None) or err}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


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


def now_iso() -> str:
    """The current time as sdcscan writes it (`2026-01-02T03:04:05Z`)."""
    return iso_utc(time.time())
