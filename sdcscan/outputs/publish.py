"""Publish a judged report: the report file, JUnit XML, the Prometheus textfile, the run history.

Used by `sdcscan run` (through `sdcscan.scan`) and `sdcscan export`. `check_targets` runs before any
work, so a path that could never be written (a device, a directory, a symlink, a missing directory)
or a damaged history is exit 2 at once, not exit 3 after the whole budget; so are two outputs that
name one file (`-o x.json --junit x.json` wrote the XML over the report). The report file comes
first, so a failure later loses nothing; every other output is attempted even if an earlier one fails.
The history comes before the Prometheus file, whose coverage families are read back from it.

The report file, JUnit and Prometheus are what a run hands over: one that cannot be written is an
error (exit 3). The history is a record for later, not the judgement: when another process holds it
locked past the bounded wait (`history.HISTORY_WAIT_S`), or a signal ends that wait, the run keeps
its verdict and the history not being updated is a note (`Outputs.on_note`), never exit 3.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from typing_extensions import TypeVarTuple, Unpack

from sdcscan.errors import ReportError, RunError, SdcscanError, UsageError
from sdcscan.files import check_output_target
from sdcscan.outputs import history
from sdcscan.report.document import Report

_Args = TypeVarTuple("_Args")
KEPT_REPORTS = 20  # reports of runs without --out kept in the state directory, newest first


@dataclass(frozen=True)
class Outputs:
    """Where a run's results go, beside the report on stdout/stderr."""

    report: Path | None = None  # --out
    junit: str | os.PathLike[str] | None = None
    prom: str | os.PathLike[str] | None = None
    history: str | os.PathLike[str] | None = None  # the database; None: the default in the state directory
    record_history: bool = True  # False: --no-history
    lock: bool = True  # False: a distributed rank (its launcher holds the host's lock for all its ranks)
    on_note: Callable[[str], None] | None = None  # told what `publish` could not do but the run survives
    keep_report: bool = True  # without --out, keep it beside the history (not with record_history False)


def history_path(path: str | os.PathLike[str] | None) -> Path:
    """The history database: the given path, else the default in the user's state directory."""
    return Path(path) if path else history.default_history_path()


def check_targets(outputs: Outputs) -> None:
    """Refuse, before any work, outputs that could not or must not be written.

    Raises:
        UsageError: one line naming the option and the path: empty or a directory (a path that ends
            in a separator included), an existing device, FIFO, socket or symlink, a missing or
            unwritable directory (`--out`, `--junit`, `--prom`); two outputs that name the same
            file (`check_distinct`); or, when the run is to be recorded, a history database that is
            unreadable, empty, foreign or damaged (`history.check_health`).
    """
    given = [(o, p) for o, p in _files(outputs) if p is not None]
    for option, path in given:
        check_file_path(path, option=option)
    if outputs.record_history and outputs.history:
        check_file_path(outputs.history, option="--history")
    check_distinct(outputs)
    for option, path in given:
        check_output_target(path, option=option)
    if outputs.record_history:
        history.check_health(history_path(outputs.history))


def _files(outputs: Outputs) -> tuple[tuple[str, str | os.PathLike[str] | None], ...]:
    """The files a run writes whole (atomically), by the option that names each."""
    return (("--out", outputs.report), ("--junit", outputs.junit), ("--prom", outputs.prom))


def check_file_path(path: str | os.PathLike[str], *, option: str) -> None:
    """Refuse a path that ends in a separator: it names a directory (`Path("new/")` is `new`, so
    `--junit new/` wrote a file named `new`).

    Raises:
        UsageError: `OPTION PATH: ends in "/", so it names a directory; give a file path`.
    """
    text = os.fspath(path)
    seps = tuple(s for s in (os.sep, os.altsep) if s)
    if text and text.endswith(seps):
        raise UsageError(f"{option} {text}: ends in {text[-1]!r}, so it names a directory; give a file path")


def check_distinct(outputs: Outputs, inputs: tuple[tuple[str, str | os.PathLike[str]], ...] = ()) -> None:
    """Refuse two outputs that name one file, however spelt: `x.json` and `./x.json`, a symbolic link
    to the other, a path through a link to the other's directory, the history's default path. One
    would overwrite the other (`-o x.json --junit x.json` left the XML where the report should be).

    Compared by where each path resolves to (`os.path.realpath`; a file that does not exist yet by its
    resolved directory and name). The history counts only when the run records into it, with its
    SQLite journal beside it; the run lock beside it whenever the run takes the lock. `inputs` are
    files the command reads, `(what, path)`, which no output may replace either.

    Raises:
        UsageError: one line naming both options and the file.
    """
    claimed: dict[str, str] = {}

    def claim(option: str, path: str | os.PathLike[str]) -> None:
        if Path(path).name in ("", ".", ".."):  # names no file: `check_output_target` says so
            return
        where = os.path.realpath(path)
        if where in claimed:
            raise UsageError(
                f"{claimed[where]} and {option} name the same file {os.fspath(path)}; give each its own path"
            )
        claimed[where] = option

    for what, path in inputs:
        claim(what, path)
    for option, out in _files(outputs):
        if out is not None:
            claim(option, out)
    db = history_path(outputs.history)
    named = "--history" if outputs.history else "the history database"
    if outputs.record_history:
        claim(named, db)
        claim(f"the journal of {named}", f"{db}-journal")
    if outputs.lock:
        claim(f"the run lock beside {named}", db.parent / history.LOCK_NAME)


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


class ReportOnlyPrinted(ReportError):
    """The report file could not be written and nothing else holds every finished case: the command
    must print the report on stdout (with or without `--json`), or the run's results are lost."""


def _kept_elsewhere(report: Report) -> tuple[str, bool]:
    """Where a run's results are when its report file could not be written, in words that are true, and
    whether nothing but this command's stdout can hold them.

    The report goes to the state directory instead (`fallback-reports/RUN_ID.json`). Failing that, the
    journal is named only when it holds every finished case: the run marks one that stopped on a
    write error or was removed (`run.journal_lost`), and it must still be a file now. Else the report
    this command prints on stdout is the only copy (`ReportOnlyPrinted`), and the message says so.
    """
    from sdcscan.files import default_state_dir, make_state_dir, write_json_atomic

    fallback = default_state_dir() / "fallback-reports" / f"{report['run']['id']}.json"
    try:
        make_state_dir(fallback.parent)
        write_json_atomic(fallback, report)
        return f"the report was written to {fallback} instead", False
    except (OSError, SdcscanError) as err:
        why_not = getattr(err, "strerror", None) or str(err)
    journal = report["run"].get("journal")
    if journal and os.path.isfile(journal):
        return f"every finished case is in {journal}: sdcscan report --from-journal {journal}", False
    lost = report["run"].get("journal_lost") or f"{journal or 'the journal'}: removed"
    return (
        f"nor in the state directory ({why_not}), and the journal does not hold every finished case "
        f"({lost}): the report this command prints on stdout is the only copy"
    ), True


def publish(report: Report, outputs: Outputs) -> list[str]:
    """Write the report file, then JUnit, the history and Prometheus, as `outputs` asks.

    The history is recorded before the Prometheus file is written, so the file's 24 h coverage
    families (`history.coverage`) include this run; without a recorded history it has none.

    Returns:
        Notes on what was left undone without failing the run: the history not updated because
        another process held it locked past `history.HISTORY_WAIT_S`, or a signal ended that wait.
        Each is also passed to `outputs.on_note` as it happens (before any error is raised).

    Raises:
        ReportError: the report file, JUnit or Prometheus could not be written, or the history could
            not be (for any reason but another process's lock); the message names each (and, when
            the report file itself failed, where the results still are: `_kept_elsewhere`).
    """
    from sdcscan.files import write_json_atomic  # imported here: `sdcscan --help` stays fast
    from sdcscan.outputs.junit import write_junit

    problems: list[str] = []
    notes: list[str] = []

    def note(text: str) -> None:
        notes.append(text)
        if outputs.on_note is not None:
            outputs.on_note(text)

    report_path = outputs.report
    if report_path is not None:
        try:
            write_json_atomic(report_path, report)
        except ReportError as err:  # full disk, directory gone: say where the results still are
            where, only_printed = _kept_elsewhere(report)
            raise (ReportOnlyPrinted if only_printed else ReportError)(f"{err}; {where}") from None
    elif outputs.keep_report and outputs.record_history:  # --no-history: no state kept at all
        report_path = _keep(report, kept_reports_dir(history_path(outputs.history)), note)
    if outputs.junit is not None:  # an empty path is refused by the writer, never skipped in silence
        _attempt(problems, write_junit, report, outputs.junit)
    recorded = None
    if outputs.record_history:
        db = history_path(outputs.history)
        try:
            history.record_run(db, report, str(report_path) if report_path else None)
            recorded = db
        except history.HistoryBusyError as err:
            note(
                f"the history was not updated: {err}; this run and any unit it failed are not recorded there"
            )
        except SdcscanError as err:
            problems.append(str(err))
    if outputs.prom is not None:
        _attempt(problems, _write_prom, report, outputs.prom, recorded)
    if problems:
        raise ReportError("; ".join(problems))
    return notes


def kept_reports_dir(history_db: Path) -> Path:
    """Where runs without --out keep their reports: `reports/` beside the history database."""
    return history_db.parent / "reports"


def _keep(report: Report, folder: Path, note: Callable[[str], None]) -> Path | None:
    """Without --out, the report goes to `folder` (`reports/` beside the history, in the state directory:
    RUN_ID.json, the newest KEPT_REPORTS kept), so a first run leaves something to open; its path is a
    note. A copy nobody asked for never fails the run: when it cannot be written, a note says so."""
    from sdcscan.files import make_state_dir, write_json_atomic

    path = folder / f"{report['run']['id']}.json"
    try:
        make_state_dir(folder)
        write_json_atomic(path, report)
    except (OSError, SdcscanError) as err:
        note(
            f"the report was not kept ({getattr(err, 'strerror', None) or err}); give --out FILE to keep one"
        )
        return None
    for old in sorted(folder.glob("*.json"))[:-KEPT_REPORTS]:  # run ids begin with their UTC start time
        old.unlink(missing_ok=True)
    note(f"report: {path} (no --out was given; sdcscan report {path})")
    return path


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
