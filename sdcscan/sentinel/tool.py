"""Run an external tool sdcscan does not trust (journalctl, dmesg) and read its output within bounds.

A kernel-log tool is someone else's program: it may print without end, print one line without end,
hang, or ignore SIGTERM. So each runs in a session of its own (its own process group), with stdin
from /dev/null, and its stdout is read as it arrives and handed over one line at a time: never more
than one line (at most `max_line_bytes`) of it is held, and a longer line is dropped as it streams
past. Reading stops when the output reaches `max_bytes`, when `timeout_s` has passed, or when
`stop()` says so (a signal the caller holds); the tool and everything it started are then killed
with SIGKILL to its process group. The group is killed after a tool that ended by itself too, before
its exit status is collected, so nothing it left running outlives the read and the group id cannot
have been reused. A child that left the group (`setsid`) is killed too: found as the tool's
descendant while the tool lives, and, once it has gone, as a process still holding its stdout or
stderr (the kernel hands an orphan to init, but its copy of the pipe stays).

Signals: the parent waits in `select` with a short timeout, never in a blocking read, so a SIGINT or
SIGTERM that raises (`sdcscan.interrupts.Interrupted`) ends the wait at once, and the group is killed
on the way out; starting the tool and killing it are sections a signal cannot cut in half.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from sdcscan import interrupts

POLL_S = 0.1  # how often a waiting read looks at the clock and asks stop()
CHUNK_BYTES = 1 << 16
MAX_STDERR_BYTES = 64 << 10  # what is kept of stderr (for its first line and permission messages)
REAP_S = 2.0  # how long a killed tool may take to be collected (one stuck in the kernel may take longer)

Ending = Literal["exited", "cut", "timed_out", "stopped"]


@dataclass(frozen=True, slots=True)
class ToolRun:
    """How a tool's run ended and what was kept of it (its stdout went to `on_line`, line by line)."""

    ending: Ending  # exited by itself, or killed: output cut at max_bytes, timed out, stopped
    returncode: int | None  # its exit status when it exited by itself (negative: the signal that ended it)
    stderr: bytes  # the first MAX_STDERR_BYTES
    stdout_bytes: int  # bytes of stdout read (at most max_bytes)
    printed: bool  # stdout held something other than whitespace
    over_long: int  # lines longer than max_line_bytes, dropped


class LineSplitter:
    """Bytes in, whole lines out (without their newline), holding at most `max_line` bytes at a time.

    A line longer than `max_line` is dropped (and counted) as it streams past, never held whole.
    """

    def __init__(self, on_line: Callable[[bytes], None], max_line: int) -> None:
        self._on_line = on_line
        self._max = max_line
        self._partial = bytearray()
        self._dropping = False
        self.over_long = 0
        self.printed = False

    def feed(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._hold(view[start:end])
            self._emit()
            start = end + 1
        self._hold(view[start:])

    def finish(self) -> None:
        """The output ended: hand over a last line that had no newline."""
        if self._partial:
            self._emit()

    def _hold(self, piece: memoryview) -> None:
        if self._dropping or not piece:
            return
        if len(self._partial) + len(piece) > self._max:
            self.over_long += 1
            self._dropping = True
            self._partial = bytearray()
            return
        self._partial += piece

    def _emit(self) -> None:
        if not self._dropping:
            line = bytes(self._partial)
            self.printed = self.printed or bool(line.strip())
            self._on_line(line)
        self._partial = bytearray()
        self._dropping = False


def run_tool(
    argv: list[str],
    *,
    on_line: Callable[[bytes], None],
    timeout_s: float,
    max_bytes: int,
    max_line_bytes: int,
    env: Mapping[str, str],
    stop: Callable[[], bool] = lambda: False,
) -> ToolRun:
    """Run `argv` and hand each line of its stdout to `on_line`, within the bounds the module names.

    Args:
        argv: the tool and its arguments.
        on_line: called with each complete line, without its newline (a last line without one too,
            unless the output was cut).
        timeout_s: wall time the tool may take, from its start to its exit.
        max_bytes: stdout read at most; reaching it kills the tool (`ending == "cut"`).
        max_line_bytes: longest line handed over; longer ones are dropped and counted.
        env: the tool's environment.
        stop: asked every POLL_S; True kills the tool (`ending == "stopped"`).

    Raises:
        OSError: the tool could not be started (FileNotFoundError: no such program).
        interrupts.Interrupted: a SIGINT or SIGTERM raised while the tool ran; it was killed first.
    """
    lines = LineSplitter(on_line, max_line_bytes)
    proc: subprocess.Popen[bytes] | None = None
    try:
        with interrupts.deferred():  # a signal between starting the tool and holding it would orphan it
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(env),
                start_new_session=True,  # its own process group: killed whole, and not by a terminal's ^C
            )
        ending, stderr, read = _read(proc, lines, time.monotonic() + timeout_s, max_bytes, stop)
    except BaseException:
        if proc is not None:
            with interrupts.deferred():
                _kill_and_reap(proc)
        raise
    with interrupts.deferred():
        returncode = _kill_and_reap(proc)
    return ToolRun(
        ending,
        returncode if ending == "exited" else None,
        bytes(stderr),
        read,
        lines.printed,
        lines.over_long,
    )


def _read(
    proc: subprocess.Popen[bytes],
    lines: LineSplitter,
    end: float,
    max_bytes: int,
    stop: Callable[[], bool],
) -> tuple[Ending, bytearray, int]:
    """Read stdout into `lines` and the start of stderr until both close and the tool exits, or a bound trips."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.fileno(), proc.stderr.fileno()
    stderr = bytearray()
    total = 0
    with selectors.DefaultSelector() as sel:
        sel.register(out, selectors.EVENT_READ)
        sel.register(err, selectors.EVENT_READ)
        while sel.get_map():
            left = end - time.monotonic()
            if stop():
                return "stopped", stderr, total
            if left <= 0:
                return "timed_out", stderr, total
            for key, _ in sel.select(min(left, POLL_S)):
                if key.fd == out:
                    chunk = os.read(out, min(CHUNK_BYTES, max_bytes + 1 - total))
                    if not chunk:
                        sel.unregister(out)
                        lines.finish()
                        continue
                    if total + len(chunk) > max_bytes:
                        lines.feed(chunk[: max_bytes - total])
                        return "cut", stderr, max_bytes
                    total += len(chunk)
                    lines.feed(chunk)
                else:
                    chunk = os.read(err, CHUNK_BYTES)
                    if not chunk:
                        sel.unregister(err)
                    elif len(stderr) < MAX_STDERR_BYTES:
                        stderr += chunk[: MAX_STDERR_BYTES - len(stderr)]
    while not _exited(proc.pid):  # both pipes closed: the tool itself may still be running
        if stop():
            return "stopped", stderr, total
        if time.monotonic() >= end:
            return "timed_out", stderr, total
        time.sleep(POLL_S)
    return "exited", stderr, total


def _exited(pid: int) -> bool:
    """Whether the child `pid` has ended, without collecting it (it stays a zombie, holding its ids)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _escaped(proc: subprocess.Popen[bytes]) -> set[int]:
    """Processes the tool started that its group's kill would miss: its descendants in other sessions,
    and any process but this one holding its stdout or stderr. Read from /proc; empty where there is
    none (no Linux), so the group's kill stays the rule."""
    pipes = set()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None and not pipe.closed:
            pipes.add(f"pipe:[{os.fstat(pipe.fileno()).st_ino}]")
    parents: dict[int, int] = {}
    holders = set()
    try:
        entries = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return set()
    for pid in entries:
        if pid == os.getpid():
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/stat", "rb") as f:
            parents[pid] = int(f.read().rsplit(b")", 1)[1].split()[1])
        if pipes:
            with contextlib.suppress(OSError):
                if any(os.readlink(f"/proc/{pid}/fd/{fd}") in pipes for fd in os.listdir(f"/proc/{pid}/fd")):
                    holders.add(pid)
    found: set[int] = set()
    frontier = {proc.pid}
    while frontier:  # the tool's descendants, through parents that are still alive
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return (found | holders) - {proc.pid}


def _kill_and_reap(proc: subprocess.Popen[bytes]) -> int | None:
    """SIGKILL the tool's process group (whatever it left running), close the pipes, collect the tool.

    Returns:
        Its exit status, or None if it could not be collected within REAP_S (stuck in the kernel).
    """
    escaped = _escaped(proc)
    if proc.returncode is None:  # not yet collected: its pid is still its group's id
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    for pid in escaped:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    try:
        return proc.wait(timeout=REAP_S)
    except subprocess.TimeoutExpired:
        return None
