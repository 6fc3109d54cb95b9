"""`sdcscan report`: show a saved report, or rebuild one from a run's journal after the run was killed."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sdcscan.cli.common import emit_json, report_options, reports_errors
from sdcscan.cli.html_output import check_html_target, html_option, write_or_exit, write_run_html
from sdcscan.errors import UsageError


@click.command("report")
@click.argument(
    "report_path", required=False, metavar="[REPORT]", type=click.Path(dir_okay=False, path_type=Path)
)
@click.option(
    "--from-journal",
    "journal",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Rebuild the report from this journal (printed when the run started; beside --out as <stem>.<run id>.journal.jsonl).",
)
@report_options
@html_option
@reports_errors
def report_cmd(
    report_path: Path | None, journal: Path | None, out: Path | None, as_json: bool, html_path: str | None
) -> None:
    """Show a saved report (without REPORT, the newest a run without --out kept in the state directory),
    or rebuild one from the journal of a run that was killed.

    A rebuilt report holds every case the journal recorded; its verdict is `interrupted`. With
    --html FILE, also a self-contained page of the report (charts inline; it opens offline).
    Exits with the code of the report's verdict (0 pass, 1 fail, 3 invalid, 130 interrupted,
    143 stopped by SIGTERM), never with the exit_code the file claims (a mismatch is a warning),
    or 3 when the file cannot be read or is not a valid report, or when -o or --html cannot be written
    (but 1 for a failing report: a write error never hides a failing unit).

    \b
    Example:
        sdcscan report                  # the last run's, when it had no --out
        sdcscan report report.json
        sdcscan report burnin.json --html burnin.html
        sdcscan report --from-journal report.20261123T080000Z-1a2b3c4d.journal.jsonl -o report.json
    """
    from sdcscan.files import check_output_target, write_json_atomic
    from sdcscan.judgement.rebuild import report_from_journal
    from sdcscan.outcomes import printable
    from sdcscan.render.console import stderr_console
    from sdcscan.render.run import render_header, render_summary
    from sdcscan.report import (
        exit_code_disagreement,
        load_report,
        validate_report,
        verdict_exit_code,
    )

    if report_path is None and journal is None:
        report_path = _newest_kept()
    if out is not None:
        check_output_target(out, option="--out")  # exit 2 before reading anything
    check_html_target(html_path, [("REPORT", report_path), ("--from-journal", journal), ("--out", out)])
    if report_path is not None and journal is None:
        label, doc = printable(str(report_path)), load_report(report_path)
    elif journal is not None and report_path is None:
        # A journal is a file from the run's host like any report: its rebuilt report is checked the same way.
        label = printable(str(journal))
        doc = validate_report(report_from_journal(journal), label=label)
    else:
        raise UsageError("give either a REPORT file or --from-journal PATH")
    write_or_exit(
        verdict_exit_code(doc),
        lambda: write_json_atomic(out, doc) if out is not None else None,
        lambda: write_run_html(html_path, doc, label),
    )
    disagreement = exit_code_disagreement(doc)
    if disagreement:  # before the summary: its `exit:` line stays the last line on stderr
        click.echo(f"warning: {label}: {disagreement}", err=True)
    console = stderr_console()
    render_header(doc, console)
    render_summary(doc, console)
    if as_json:
        emit_json(doc)
    sys.exit(verdict_exit_code(doc))


def _newest_kept() -> Path:
    """The newest report a run without --out kept (`publish.kept_reports_dir`).

    Raises:
        UsageError: none is kept there (exit 2), naming the folder.
    """
    from sdcscan.outputs.publish import history_path, kept_reports_dir

    folder = kept_reports_dir(history_path(None))
    kept = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not kept:
        raise UsageError(
            f"give a REPORT file or --from-journal PATH (no run has kept a report in {folder} yet)"
        )
    return kept[-1]  # run ids begin with their UTC start time
