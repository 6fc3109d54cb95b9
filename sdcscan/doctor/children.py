"""One child command of the doctor (`sdcscan selftest`, `sdcscan run`) in its own session.

Its own session, so that a Ctrl-C at the terminal reaches only the doctor, which passes it on (the
child then stops as a user's run would, writing its partial report); and so that every process the
child started can be found afterwards by session id: one still there after the child exited was
left behind, which the doctor reports and kills.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sdcscan import interrupts

PARENT_ENV = "SDCSCAN_DIE_WITH"  # a child `sdcscan` dies with the process whose pid this holds
POLL_S = 0.1
LEFTOVER_GRACE_S = 3.0  # a fork server exits when its parent's pipe closes: give it this long
STOP_GRACE_S = 10.0  # after a timeout's SIGTERM, before SIGKILL
INTERRUPT_GRACE_S = 45.0  # a signalled run stops its workers and writes its report within seconds


@dataclass
class ChildResult:
    """How one child ended: its exit code (None: killed at its time limit), time, leftovers."""

    argv: list[str]
    exit_code: int | None
    seconds: float
    timed_out: bool = False
    left_behind: list[str] = field(default_factory=list)  # "pid name" of processes found after it


def run_child(argv: Sequence[str], *, stdout: Path, stderr: Path, timeout_s: float) -> ChildResult:
    """Run `sdcscan ARGV` to its end or `timeout_s`, its output in the two files.

    A SIGINT or SIGTERM to the doctor meanwhile (`interrupts.Interrupted`) is passed on to the child,
    which gets INTERRUPT_GRACE_S to stop and write what it has; then the exception goes on up.
    """
    started = time.monotonic()
    with stdout.open("wb") as out, stderr.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sdcscan", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid())},
        )
        try:
            code = _wait(proc, timeout_s)
        except interrupts.Interrupted as stop:
            _signal_group(proc.pid, stop.signum)
            if _wait(proc, INTERRUPT_GRACE_S) is None:
                _stop(proc)
            _reap_session(proc.pid)
            raise
    timed_out = code is None
    if timed_out:
        _stop(proc)
    seconds = time.monotonic() - started
    return ChildResult(list(argv), None if timed_out else code, seconds, timed_out, _reap_session(proc.pid))


def die_with_parent() -> None:
    """In a child command the doctor started: SIGKILL this process when the doctor's ends, whatever ends
    it (a SIGKILL included), as a run's workers die with the run. Its own session keeps a Ctrl-C at the
    terminal from reaching it directly; without this, a killed doctor left its child running for 30-40 s.

    PR_SET_PDEATHSIG fires when the thread that started this process ends: the doctor starts its
    children from its main thread, whose end is the doctor's. A doctor gone before the setting took
    effect has left this process another parent: then it ends at once. Not Linux: nothing to do.
    """
    parent = os.environ.pop(PARENT_ENV, None)
    if parent is None or not parent.isdigit():
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):
        os.kill(os.getpid(), signal.SIGKILL)


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """The exit code, or None when `timeout_s` passed first. Polls: a signal must be able to cut in."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            return code
        time.sleep(POLL_S)
    return proc.poll()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the child's group, as systemd would, then SIGKILL whatever is left."""
    _signal_group(proc.pid, signal.SIGTERM)
    if _wait(proc, STOP_GRACE_S) is None:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone: nothing to stop
        os.killpg(pgid, signum)


def session_members(sid: int) -> list[tuple[int, str]]:
    """(pid, name) of every live process of session `sid`, zombies excluded."""
    import psutil

    members = []
    for proc in psutil.process_iter(["pid", "name", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(proc.info["pid"]) == sid:
                members.append((proc.info["pid"], str(proc.info["name"])))
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return members


def _reap_session(sid: int) -> list[str]:
    """Processes of the child's session still alive LEFTOVER_GRACE_S after it ended: killed, and named."""
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    members = session_members(sid)
    while members and time.monotonic() < deadline:
        time.sleep(POLL_S)
        members = session_members(sid)
    for pid, _ in members:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    return [f"{pid} {name}" for pid, name in members]
