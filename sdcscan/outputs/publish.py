"""Publish a judged report: the report file, JUnit XML, the Prometheus textfile, the run history.

Used by `sdcscan run` (through `sdcscan.scan`) and `sdcscan export`. `check_targets` runs before any
work, so a path that could never be written (a device, a directory, a symlink, a missing directory)
or a damaged history is exit 2 at once, not exit 3 after the whole budget. The report file comes
first, so a failure later loses nothing; every other output is attempted even if an earlier one fails.
The history comes before the Prometheus file, whose coverage families are read back from it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from typing_extensions import TypeVarTuple, Unpack

from sdcscan.errors import ReportError, RunError, SdcscanError
from sdcscan.files import check_output_target
from sdcscan.outputs import history
from sdcscan.report.document import Report

_Args = TypeVarTuple("_Args")


@dataclass(frozen=True)
class Outputs:
    """Where a run's results go, beside the report on stdout/stderr."""

    report: Path | None = None  # --out
    junit: str | os.PathLike[str] | None = None
    prom: str | os.PathLike[str] | None = None
    history: str | os.PathLike[str] | None = None  # the database; None: the default in the state directory
    record_history: bool = True  # False: --no-history
    lock: bool = True  # False: a distributed rank (its launcher holds the host's lock for all its ranks)


def history_path(path: str | os.PathLike[str] | None) -> Path:
    """The history database: the given path, else the default in the user's state directory."""
    return Path(path) if path else history.default_history_path()


def check_targets(outputs: Outputs) -> None:
    """Refuse, before any work, outputs that could not or must not be written.

    Raises:
        UsageError: one line naming the option and the path: empty or a directory, an existing
            device, FIFO, socket or symlink, a missing or unwritable directory (`--out`, `--junit`,
            `--prom`); or, when the run is to be recorded, a history database that is unreadable,
            empty, foreign or damaged (`history.check_health`).
    """
    for option, path in (("--out", outputs.report), ("--junit", outputs.junit), ("--prom", outputs.prom)):
        if path is not None:
            check_output_target(path, option=option)
    if outputs.record_history:
        history.check_health(history_path(outputs.history))


@contextlib.contextmanager
def run_lock(outputs: Outputs) -> Iterator[str | None]:
    """Hold the host's run lock (beside the history database) around a run.

    Yields:
        None, or with --no-history when the state directory is not writable (a read-only container),
        a note saying the run goes on unlocked.

    Raises:
        RunActiveError: another run is active on this host (exit 3).
        RunError: the lock could not be created and history is on.
    """
    with contextlib.ExitStack() as stack:
        note = None
        if not outputs.lock:
            yield None
            return
        try:
            stack.enter_context(history.run_lock(history_path(outputs.history).parent))
        except history.RunActiveError:
            raise
        except RunError as err:
            if outputs.record_history:
                raise
            note = f"running without the run lock: {err}"
        yield note


def publish(report: Report, outputs: Outputs) -> None:
    """Write the report file, then JUnit, the history and Prometheus, as `outputs` asks.

    The history is recorded before the Prometheus file is written, so the file's 24 h coverage
    families (`history.coverage`) include this run; without a recorded history it has none.

    Raises:
        ReportError: an output could not be written; the message names each (and, when the report
            file itself failed, where the journal still holds every finished case).
    """
    from sdcscan.files import write_json_atomic  # imported here: `sdcscan --help` stays fast
    from sdcscan.outputs.junit import write_junit

    if outputs.report is not None:
        try:
            write_json_atomic(outputs.report, report)
        except ReportError as err:  # full disk, directory gone: say where the results still are
            journal = report["run"].get("journal")
            raise ReportError(
                f"{err}; every finished case is in {journal}: sdcscan report --from-journal {journal}"
            ) from None
    problems: list[str] = []
    if outputs.junit is not None:  # an empty path is refused by the writer, never skipped in silence
        _attempt(problems, write_junit, report, outputs.junit)
    recorded = None
    if outputs.record_history:
        db, path = history_path(outputs.history), str(outputs.report) if outputs.report else None
        recorded = db if _attempt(problems, history.record_run, db, report, path) else None
    if outputs.prom is not None:
        _attempt(problems, _write_prom, report, outputs.prom, recorded)
    if problems:
        raise ReportError("; ".join(problems))


def _attempt(problems: list[str], write: Callable[[Unpack[_Args]], None], *args: Unpack[_Args]) -> bool:
    """Call `write(*args)`; on an sdcscan error add its message to `problems`. True when it succeeded."""
    try:
        write(*args)
    except SdcscanError as err:
        problems.append(str(err))
        return False
    return True


def _write_prom(report: Report, path: str | os.PathLike[str], db: Path | None) -> None:
    """The Prometheus file, with the 24 h coverage of the history `db` this run was just recorded in.

    A history that cannot be read back leaves the coverage families out rather than the whole file.
    """
    from sdcscan.outputs.prom import write_prom

    cover = None
    if db is not None:
        with contextlib.suppress(SdcscanError):
            cover = history.coverage(db)
    write_prom(report, path, coverage=cover)
