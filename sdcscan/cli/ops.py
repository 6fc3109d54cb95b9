"""Commands for sdcscan in production (export, history, status, clear) and the output options of `run`.

`run` gets `@output_options` (--junit, --prom, --history, --no-history); the library writes them
(`sdcscan.outputs.publish`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

import click

from sdcscan.cli.common import emit_json, reports_errors
from sdcscan.errors import EXIT_FAIL, UsageError
from sdcscan.outputs import history as hist
from sdcscan.outputs.publish import Outputs, check_distinct, check_file_path, history_path, publish

F = TypeVar("F", bound=Callable[..., object])
UNIT_ID = re.compile(r"^(cpu|cuda):[0-9]+$")
HISTORY_ENV = "SDCSCAN_HISTORY"
_HISTORY_HELP = f"History database [env {HISTORY_ENV}; default $XDG_STATE_HOME/sdcscan/history.sqlite3]."
history_option = click.option(
    "--history", "history", type=click.Path(dir_okay=False), envvar=HISTORY_ENV, help=_HISTORY_HELP
)


def output_options(func: F) -> F:
    """Add --junit PATH, --prom PATH, --history PATH and --no-history to a command (for `run`)."""
    func = click.option("--no-history", is_flag=True, help="Do not record this run in the history database.")(
        func
    )
    func = history_option(func)
    func = click.option(
        "--prom",
        type=click.Path(dir_okay=False),
        help="Also write Prometheus metrics (node_exporter textfile).",
    )(func)
    return click.option("--junit", type=click.Path(dir_okay=False), help="Also write a JUnit XML file.")(func)


@click.command("export")
@click.argument("report", type=click.Path(dir_okay=False))
@click.option("--junit", type=click.Path(dir_okay=False), help="Write JUnit XML here.")
@click.option("--prom", type=click.Path(dir_okay=False), help="Write Prometheus textfile metrics here.")
@reports_errors
def export_cmd(report: str, junit: str | None, prom: str | None) -> None:
    """Write JUnit XML and/or Prometheus metrics from an existing report.

    \b
    Example:
        sdcscan export report.json --junit sdcscan.xml
        sdcscan export report.json --prom /var/lib/node_exporter/textfile/sdcscan.prom
    """
    from sdcscan.files import check_output_target
    from sdcscan.render.ops import print_written
    from sdcscan.report import load_report

    if junit is None and prom is None:
        raise UsageError("export needs --junit PATH and/or --prom PATH")
    outputs = Outputs(junit=junit, prom=prom, record_history=False, lock=False, keep_report=False)
    given = [(option, path) for option, path in (("--junit", junit), ("--prom", prom)) if path is not None]
    for option, path in given:
        check_file_path(path, option=option)
    check_distinct(outputs, inputs=(("REPORT", report),))  # neither may replace the other, nor the report
    for option, path in given:
        check_output_target(path, option=option)  # exit 2 before reading anything
    data = load_report(report)
    publish(data, outputs)
    print_written([p for p in (junit, prom) if p])


@click.command("history")
@click.option("--unit", help="Only runs that included this unit (e.g. cpu:3), with its verdict.")
@click.option(
    "--limit", type=click.IntRange(min=0), default=20, show_default=True, help="Newest N runs; 0 = all."
)
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON on stdout.")
@history_option
@reports_errors
def history_cmd(unit: str | None, limit: int, as_json: bool, history: str | None) -> None:
    """List recorded runs and their per-unit verdicts, newest first.

    \b
    Example:
        sdcscan history
        sdcscan history --unit cpu:3 --json
    """
    from sdcscan.render.ops import print_history

    if unit:
        _check_unit(unit)
    path = history_path(history)
    found = hist.runs(path, unit=unit, limit=limit or None)
    if as_json:
        emit_json(found)
    else:
        print_history(found, str(path))


@click.command("status", short_help="Flagged units, 24 h coverage and the last kernel-log scan.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON on stdout.")
@history_option
@reports_errors
def status_cmd(as_json: bool, history: str | None) -> None:
    """Show units flagged by a failure, each unit's screening of the last 24 h and the last kernel-log
    scan; exit 1 while any unit is flagged.

    A unit that failed once stays flagged, even if later runs pass, until an operator clears it
    with `sdcscan clear UNIT --reason TEXT`. Outlier cores of a kernel-log scan (`sdcscan sentinel`)
    are shown, not flagged: they are suspects to screen, not proven miscomputation.

    \b
    Example:
        sdcscan status || echo "some unit miscomputed; see above"
        sdcscan status --json
    """
    from sdcscan.render.ops import print_status

    path = history_path(history)
    state = hist.status(path)
    if as_json:  # with the last 7 UTC days per unit: what a background screen covered day by day
        emit_json(
            {**state, "coverage_by_day": hist.coverage_by_day(path, days=7), "ok": not state["flagged"]}
        )
    else:
        print_status(state)
    if state["flagged"]:
        click.get_current_context().exit(EXIT_FAIL)


@click.command("clear")
@click.argument("unit")
@click.option("--reason", help="Required: why the unit is trusted again (recorded), e.g. 'replaced'.")
@history_option
@reports_errors
def clear_cmd(unit: str, reason: str | None, history: str | None) -> None:
    """Clear a flagged unit after repair or replacement; the reason is recorded.

    \b
    Example:
        sdcscan clear cpu:1 --reason "replaced CPU, RMA 1234"
    """
    from sdcscan.render.ops import print_cleared

    _check_unit(unit)
    if reason is None:  # checked here, not by click, so the error is one line like every other
        raise UsageError("clear needs --reason TEXT (recorded with the time and your user name)")
    print_cleared(hist.clear(history_path(history), unit, reason))


COMMANDS = (export_cmd, history_cmd, status_cmd, clear_cmd)


def _check_unit(unit: str) -> None:
    if not UNIT_ID.match(unit):
        raise UsageError(f"{unit!r} is not a unit id (expected cpu:N or cuda:N)")
