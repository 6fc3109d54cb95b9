"""Opening the history database: read-only readers, one-transaction writers, atomic creation.

Readers open the database read-only (`mode=ro`): they never create, migrate or write it, so a user
who may only read the file (a non-root `sdcscan status` on root's 0644 history) can. That is why the
database uses SQLite's rollback journal, not WAL: a WAL reader must write the `-shm` file beside the
database, which a read-only user cannot; a run writes the history for milliseconds, and readers
wait that out. Writers take an immediate transaction with a busy timeout, so two overlapping cron
runs serialise instead of corrupting each other; the first writer after an upgrade migrates the
file inside that transaction (`history_schema.migrate`).

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
from collections.abc import Iterator
from pathlib import Path

from sdcscan.errors import RunError, UsageError
from sdcscan.files import FILE_MODE, make_state_dir
from sdcscan.outputs.history_schema import build_schema, check_schema, migrate
from sdcscan.timefmt import iso_utc

BUSY_TIMEOUT_S = 30.0  # an overlapping writer holds the database for milliseconds; wait rather than fail


@contextlib.contextmanager
def reading(path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection | None]:
    """A read-only connection to a checked history database; None when there is no database yet.

    Raises:
        UsageError: see `history.check_health` (everything but the quick check).
    """
    p = Path(path)
    if not present(p):
        yield None
        return
    try:
        conn = sqlite3.connect(p.absolute().as_uri() + "?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error as err:
        raise UsageError(f"cannot read history {p}: {err}") from None
    try:
        conn.row_factory = sqlite3.Row
        check_schema(conn, p)
        yield conn
    except sqlite3.Error as err:
        raise UsageError(f"cannot read history {p}: {err}{foreign_hint(err)}") from None
    finally:
        conn.close()


def present(path: Path) -> bool:
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


def quick_check(conn: sqlite3.Connection, path: Path) -> None:
    """Raises UsageError naming the file when SQLite's `quick_check` finds damage."""
    problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check(3)")]
    if problems != ["ok"]:
        found = " ".join(" ".join(problems).split())  # one line: SQLite's own report spans several
        raise UsageError(f"history {path} is damaged (SQLite quick_check: {found[:200]})")


def foreign_hint(err: sqlite3.Error) -> str:
    """A hint for errors that mean the file is not ours; none for a full disk, a lock or permissions."""
    return " (is it an sdcscan history database?)" if type(err) is sqlite3.DatabaseError else ""


@contextlib.contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """A connection for writing (the database is created if missing, an older version migrated); one
    transaction committed on success, rolled back on error.

    Raises:
        RunError: the database could not be created, opened or written, or is not an sdcscan
            history this sdcscan can write (an empty file included: it is never re-created in place).
    """
    p = Path(path)
    _create_if_missing(p)
    try:
        present(p)  # an emptied file, say, is refused here too, with the same words as before a run
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
        migrate(conn, int(conn.execute("PRAGMA user_version").fetchone()[0]))
        yield conn
        conn.execute("COMMIT")
    except sqlite3.Error as err:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
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
