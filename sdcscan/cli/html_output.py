"""`--html FILE` of `report` and `compare`: the option, its checks before any work, and the write.

The page is refused and written like every other output: `check_file_path`, `check_distinct` and
`check_output_target` (exit 2 before any work: a directory, a device, a symlink, a missing directory, or
a file the command reads or writes besides), then `write_text_atomic` (exit 3 when that fails, with
`Error: cannot write PATH: why`). The rendering is imported only when a page is asked for.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import click

from sdcscan.errors import EXIT_FAIL, EXIT_INVALID, ReportError
from sdcscan.files import check_output_target
from sdcscan.outcomes import printable
from sdcscan.outputs.publish import Outputs, check_distinct, check_file_path

if TYPE_CHECKING:
    from sdcscan.fleet.summary import FleetSummary
    from sdcscan.report.document import Report

PathLike = str | os.PathLike[str]
MAX_SOURCES_NAMED = 3  # inputs the fleet page's footer names before "and N more"

html_option = click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    help="Also write a self-contained HTML page here (atomically; charts inline, opens offline).",
)


def check_html_target(
    path: PathLike | None, others: Iterable[tuple[str, PathLike | None]] = (), *, option: str = "--html"
) -> None:
    """Refuse an --html path (or `option`'s, compare's --csv) before any work, as every output path is refused.

    Args:
        path: the --html path, or None (nothing to check).
        others: (what, path) of every file the command reads or writes besides; None entries are skipped.
            The page may replace none of them. They are compared with the page only, not with each other.

    Raises:
        UsageError: one line naming --html and why (exit 2).
    """
    if path is None:
        return
    check_file_path(path, option=option)
    alone = Outputs(record_history=False, lock=False)  # no other output: only the pair is compared
    for what, other in others:
        if other is not None:
            check_distinct(alone, inputs=((what, other), (option, path)))
    check_output_target(path, option=option)


def fleet_inputs(
    paths: Sequence[str], from_dir: str | None, hosts: str | None, golden: str | None
) -> list[tuple[str, PathLike | None]]:
    """What `compare` reads, for `check_html_target`."""
    return [*(("PATH", p) for p in paths), ("--from", from_dir), ("--hosts", hosts), ("--golden", golden)]


def write_run_html(path: PathLike | None, report: Report, source: str) -> None:
    """Write the run page of `report` to `path` (nothing when None) and say so on stderr.

    Raises:
        ReportError: the page could not be written (exit 3).
    """
    if path is None:
        return
    from sdcscan.render.html import run_page, write_page

    write_page(path, run_page(report, source=source))
    _wrote(path)


def write_fleet_html(
    path: PathLike | None, summary: FleetSummary, paths: Sequence[str], from_dir: str | None
) -> None:
    """Write the fleet page of `summary` to `path` (nothing when None) and say so on stderr.

    Raises:
        ReportError: the page could not be written (exit 3).
    """
    if path is None:
        return
    from sdcscan.render.html import fleet_page, write_page

    if from_dir is not None:
        source = f"the dataset {from_dir}"
    else:
        named = ", ".join(paths[:MAX_SOURCES_NAMED])
        source = named + (
            f" and {len(paths) - MAX_SOURCES_NAMED} more" if len(paths) > MAX_SOURCES_NAMED else ""
        )
    write_page(path, fleet_page(summary, source=source))
    _wrote(path)


def write_findings_csv(path: PathLike | None, summary: FleetSummary) -> None:
    """Write every finding of `summary` as CSV to `path` (nothing when None) and say so on stderr.

    Raises:
        ReportError: the file could not be written (exit 3).
    """
    if path is None:
        return
    from sdcscan.files import write_text_atomic
    from sdcscan.render.fleet import findings_csv

    write_text_atomic(path, findings_csv(summary))
    _wrote(path)


def write_or_exit(judged_exit: int, *writes: Callable[[], None]) -> None:
    """Run each write of an already judged command (`report`, `compare`); when one fails (a full disk),
    say so and exit 1 if the judgement was 1, else 3: a write error never hides a failing unit."""
    try:
        for write in writes:
            write()
    except ReportError as err:
        click.echo(f"Error: {err}", err=True)
        code = EXIT_FAIL if judged_exit == EXIT_FAIL else EXIT_INVALID
        click.echo(
            "exit: fail" if code == EXIT_FAIL else "exit: invalid (an output could not be written)", err=True
        )
        sys.exit(code)


def _wrote(path: PathLike) -> None:
    click.echo(f"Wrote {printable(os.fspath(path))}", err=True)
