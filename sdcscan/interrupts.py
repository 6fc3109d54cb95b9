"""SIGINT and SIGTERM in the parent of a run: the first one stops the run, later ones cannot cut it short.

Slurm, Kubernetes and systemd stop a job with SIGTERM (often twice, or SIGTERM then Ctrl-C from an
impatient operator). The contract is: the run stops, every finished case ends up in a report, and the
exit code is 130 (SIGINT) or 143 (SIGTERM) - never a traceback, never 1. So:

- The first signal raises `Interrupted` in the main thread, wherever it is (spawning workers, waiting on
  them), unless a `deferred()` section is running: then it is raised when the section ends. Sections
  that must not be cut in half (recording one worker message in the journal and the run state) are
  deferred.
- Once the runner begins to stop (`hold()`), and after the first `Interrupted`, signals are only
  recorded: stopping the workers, judging and writing the outputs take a few seconds at most and must
  finish, or the report would be lost.
- `received()` says which signal came first, so the command exits 130/143 even when the signal arrived
  while the outputs were being written.
- A signal that lands while Python runs a callback it cannot propagate from (a weakref callback of the
  import machinery, a finalizer) would have its `Interrupted` swallowed and printed with a traceback.
  The unraisable hook keeps it quiet and re-arms it: the next `raise_pending()` raises it.

State is per process (signals are). The command line calls `install()` once; `installed()` puts the
handlers in place for a block and restores the previous ones after it, so library callers and tests get
the same behaviour as the command line.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import NoReturn

from sdcscan.errors import EXIT_INTERRUPTED, EXIT_TERMINATED

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_NAMES: dict[int, str] = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}
_EXIT_CODES: dict[int, int] = {signal.SIGINT: EXIT_INTERRUPTED, signal.SIGTERM: EXIT_TERMINATED}


class Interrupted(BaseException):
    """Raised in the main thread by the first SIGINT or SIGTERM (a BaseException, like KeyboardInterrupt)."""

    def __init__(self, signum: int) -> None:
        super().__init__(_NAMES.get(signum, str(signum)))
        self.signum = signum

    @property
    def name(self) -> str:
        return signal_name(self.signum)

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


def signal_name(signum: int) -> str:
    return _NAMES.get(signum, f"signal {signum}")


def exit_code(signum: int) -> int:
    return _EXIT_CODES.get(signum, 128 + signum)


class _State:
    def __init__(self) -> None:
        self.first: int | None = None  # the first signal received
        self.raised = False  # Interrupted was raised once: never again
        self.holding = False  # the run is stopping: record signals, raise nothing
        self.deferring = 0  # depth of deferred() sections

    def may_raise(self) -> bool:
        return not (self.raised or self.holding or self.deferring)


_state = _State()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _state.first is None:
        _state.first = signum
    if _state.may_raise():
        _state.raised = True
        raise Interrupted(_state.first)


def _on_unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """Python's hook for an exception it had to swallow: our `Interrupted` is re-armed, not printed."""
    if isinstance(unraisable.exc_value, Interrupted):
        _state.raised = False
        return
    _previous_unraisable(unraisable)


_previous_unraisable = sys.__unraisablehook__  # the hook ours passes everything else to


def install() -> bool:
    """Handle SIGINT and SIGTERM as this module says from now on, with a fresh state (no signal yet).

    For a process that ends after its run (the command line): a signal that comes after the verdict was
    decided is recorded, not acted on. Returns False (and changes nothing) outside the main thread, where
    Python cannot set handlers.
    """
    global _state, _previous_unraisable
    if threading.current_thread() is not threading.main_thread():
        return False
    _state = _State()
    for s in SIGNALS:
        signal.signal(s, _on_signal)
    if sys.unraisablehook is not _on_unraisable:
        _previous_unraisable = sys.unraisablehook
        sys.unraisablehook = _on_unraisable
    return True


def take_over() -> None:
    """A command's own guard (run, doctor, a rank): the handlers in place, and a signal they took while
    the command line loaded raised now.

    The entry point installs the handlers before the command line loads, and nothing has acted on a
    signal they took by the time the command begins, or the process would have ended. A SIGTERM then
    could land in the compiler (a module compiled on import), which dropped the `Interrupted` its
    handler raised; the command's own `install()` then started a fresh state, the signal was lost and
    the run went on to exit 3 (CI; reproduced under load). So the state is kept and the signal raised.
    Outside the command line (handlers not ours) this is `install()`.

    Raises:
        Interrupted: a signal was taken before the command began.
    """
    if signal.getsignal(signal.SIGTERM) is not _on_signal:
        install()
        return
    _state.raised = _state.holding = False
    raise_pending()


def release() -> None:
    """Give SIGINT and SIGTERM back to Python's defaults, where `install()` had put them in place.

    For the commands that have no graceful stop (they read and write no run state): the entry point
    handles both signals while the command line loads, and such a command then ends at once on
    SIGTERM, as any process does, rather than when Python next runs a line of it.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not _on_signal:
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.unraisablehook is _on_unraisable:
        sys.unraisablehook = _previous_unraisable


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """`install()` for the block, then the previous handlers again (library callers, tests).

    Inside a block or after `install()` it changes nothing: the signals received so far still count.
    """
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    if previous[signal.SIGINT] is _on_signal or not install():
        yield
        return
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.unraisablehook = _previous_unraisable


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A section a signal must not cut in half: a signal during it is raised when it ends."""
    _state.deferring += 1
    try:
        yield
    finally:
        _state.deferring -= 1
    raise_pending()


def raise_pending() -> None:
    """Raise `Interrupted` for a signal that arrived while raising was deferred."""
    if _state.first is not None and _state.may_raise():
        _state.raised = True
        raise Interrupted(_state.first)


def hold() -> int | None:
    """From now on signals are only recorded. Returns the signal received before, if any."""
    _state.holding = True
    return _state.first


def received() -> int | None:
    """The first SIGINT or SIGTERM received since the handlers were installed, if any."""
    return _state.first


def exit_untouchable(code: int) -> NoReturn:
    """Exit with `code`, with SIGINT and SIGTERM ignored and blocked from here on.

    The verdict is decided and said: a signal now (a second Ctrl-C, a SIGTERM right after a SIGINT)
    would otherwise reach the interpreter while it shuts down, after it has put the default handlers
    back, and end the process by that signal instead of with `code`. Blocking covers the main thread
    only; a thread still running (torch's store threads in a distributed launcher) would take the
    signal, so it is ignored too: the interpreter leaves an ignored signal ignored when it shuts down.
    """
    if threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        for s in SIGNALS:
            signal.signal(s, signal.SIG_IGN)
    sys.exit(code)


@contextlib.contextmanager
def blocked_in_children() -> Iterator[None]:
    """Block SIGINT and SIGTERM in this thread for the block, so a process started in it has them blocked.

    For the fork server: a process inherits its parent thread's signal mask across fork and exec, and
    Python never unblocks, so the server and every worker it forks never receive either signal. A
    Ctrl-C or a systemd stop sent to the whole process group then reaches only the parent, which stops
    the workers itself, instead of killing half-started workers (or the server mid-import) with
    tracebacks; SIGKILL, which the parent and PR_SET_PDEATHSIG use, cannot be blocked.

    Nothing is lost in this process: the handlers stay as they are, and a signal that arrives
    meanwhile goes to another thread (whose handler sets the flag the main thread acts on) or waits,
    pending, until the block ends. (Setting SIG_IGN instead would discard one delivered to another
    thread: Python's telemetry and progress threads run by then.)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
