"""A lock that keeps two `sdcscan run`s on one host from overlapping (two cron entries, a slow run).

`fcntl.flock` on a lock file in the state directory: the kernel drops the lock when the holder
exits, even on SIGKILL, so a crashed run never leaves a stale lock behind. The file holds the
holder's pid and start time only so the refusal can say who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from sdcscan.errors import RunError

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
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
        os.pwrite(fd, f"{os.getpid()} {stamp}\n".encode(), 0)
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
