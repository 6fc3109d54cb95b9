"""The run lock: one `sdcscan run` at a time on a host (two cron entries, a slow run, a background run).

flock works on any descriptor, read-only ones included, so whoever can open the file can hold the
lock and stop every run: the file is 0600, owned by the user who runs sdcscan, never a symlink. The
holder writes its pid, start time and command into the file, so a refused run can name it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shlex
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from sdcscan.errors import RunError
from sdcscan.files import make_state_dir
from sdcscan.timefmt import iso_utc

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
    line = f"{os.getpid()} {iso_utc(time.time())} {_command_line()}\n"
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
