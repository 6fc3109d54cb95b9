"""`sdcscan report`: show a saved report, or rebuild one from a run's journal after the run was killed."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sdcscan.cli.common import emit_json, report_options, reports_errors
from sdcscan.errors import ReportError, UsageError


@click.command("report")
@click.argument(
    "report_path", required=False, metavar="[REPORT]", type=click.Path(dir_okay=False, path_type=Path)
)
@click.option(
    "--from-journal",
    "journal",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Rebuild the report from this journal (printed when the run started; beside --out as <stem>.journal.jsonl).",
)
@report_options
@reports_errors
def report_cmd(report_path: Path | None, journal: Path | None, out: Path | None, as_json: bool) -> None:
    """Show a saved report, or rebuild one from the journal of a run that was killed.

    A rebuilt report holds every case the journal recorded; its verdict is `interrupted`.
    Exits with the report's exit code (0 pass, 1 fail, 3 invalid, 130 interrupted),
    or 3 when the file cannot be read.

    \b
    Example:
        sdcscan report report.json
        sdcscan report --from-journal report.journal.jsonl -o report.json
    """
    from sdcscan.files import write_json_atomic
    from sdcscan.rebuild import report_from_journal
    from sdcscan.render.console import stderr_console
    from sdcscan.render.run import render_summary
    from sdcscan.report import load_report

    if report_path is not None and journal is None:
        doc = load_report(report_path)
    elif journal is not None and report_path is None:
        doc = report_from_journal(journal)
    else:
        raise UsageError("give either a REPORT file or --from-journal PATH")
    if out is not None:
        write_json_atomic(out, doc)
    try:
        render_summary(doc, stderr_console())
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        # load_report checks what readers rely on; a report valid to it may still lack what the summary shows.
        raise ReportError(f"{report_path}: malformed report: {type(err).__name__} {err}") from None
    if as_json:
        emit_json(doc)
    sys.exit(doc.get("exit_code", 3))
