"""`sdcscan run`: parse the options, run the scan, show the summary, exit with the verdict's code."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from sdcscan.cli.common import emit_json, reports_errors
from sdcscan.cli.ops import output_options
from sdcscan.cli.run_args import RunArgs, typed_args
from sdcscan.cli.run_distributed import distributed_options
from sdcscan.errors import EXIT_FAIL, EXIT_INVALID

if TYPE_CHECKING:  # for the types only: `sdcscan --help` imports neither the run core nor rich
    from sdcscan.render.console import Console
    from sdcscan.report.document import Report
    from sdcscan.scan import OutputError, ScanOptions


@click.command("run")
@click.option(
    "-p", "--profile", default="quick", show_default=True, help="Built-in profile name or a YAML path."
)
@click.option("-b", "--budget", help="Time budget, e.g. 90s, 15m, 2h (default: the profile's).")
@click.option("--units", "units_spec", help="all, cpu, cuda, or a list such as cpu:0,cpu:3 (default: all).")
@click.option(
    "-w", "--workloads", help="Comma-separated workloads of the profile to run (default: all of them)."
)
@click.option(
    "--seed",
    type=click.IntRange(0, 2**63 - 1),
    help="Replay a plan exactly (default: from profile and ISO week).",
)
# report_options' -o and --json, but -o kept as typed: a Path would drop the "/" of `-o newdir/` and
# write a file named newdir; `_options` refuses it (one line, exit 2) and makes the Path.
@click.option("-o", "--out", type=click.Path(dir_okay=False), help="Write the report JSON here (atomically).")
@click.option("--json", "as_json", is_flag=True, help="Print the report JSON on stdout.")
@click.option("--hostname", help="Host label in the report (containers, tests).")
@click.option(
    "--inject",
    multiple=True,
    metavar="UNIT:KIND[@RATE]",
    help="Fault injection: bitflip, nan; as hardware fails (docs/fault_models.md): burst (2-8 adjacent "
    "bits of a word), run32 (a warp's 32 results in a row), stride32 (every 32nd of a row or column), "
    "tile8, tile16, stuck0, stuck1 (a bit forced across 32 columns), wrong_rows (rows fetched from a "
    "wrong address); hang, crash, raise. Distributed: RANK:KIND with link, update, hang, crash.",
)
@click.option(
    "--cases",
    type=click.IntRange(1, 10**9),
    metavar="N",
    help="Stop each unit after cases 0 to N-1 of the plan (sooner if the budget ends first): two runs "
    "with the same seed and --cases run the same cases, however fast the host (default: as many as "
    "the budget holds).",
)
@click.option(
    "--retest",
    type=click.IntRange(0, 128),
    help="Re-runs of each failing case on its unit (default: the profile's, 3; 0: off).",
)
@click.option(
    "--calibration",
    type=click.Path(dir_okay=False),
    help="gemm_fp calibration file from `sdcscan calibrate`.",
)
@click.option(
    "--golden",
    "golden_path",
    type=click.Path(dir_okay=False),
    help="Judge digests against a golden file (`sdcscan golden record`).",
)
@click.option(
    "--background/--foreground",
    default=None,
    help="Ripple mode: idle priority, start when the host is quiet, cases only in each core's "
    "idle gaps (default: the profile's; on in `ripple`).",
)
@click.option(
    "--max-unscreened",
    metavar="DURATION",
    help="Background: screen whatever the load once this long has passed since the last "
    "judged run (default: 24h).",
)
@click.option(
    "--telemetry-interval",
    type=click.FloatRange(0.05, 3600.0),
    metavar="SECONDS",
    help="Seconds between telemetry samples (default: 5, or 1 with a GPU among the units).",
)
@output_options
@distributed_options
@reports_errors
@typed_args
def run_cmd(args: RunArgs) -> None:
    """Run the profile's workloads on every unit of this host for the time budget.

    Every logical CPU is a unit (one pinned worker, one thread); every GPU torch sees is
    one too. All units run the same deterministic plan concurrently; a unit fails when an
    invariant check fires or its digests disagree with its cohort. Each failing case (at most 3
    per unit) is re-run on its unit and once on a peer, and classified transient, persistent, or
    case (fails everywhere: a software problem, not the unit).

    The run ends within the budget plus a bounded shutdown: at most 10 s for the last cases (a unit
    still busy then is stopped as hung), then re-runs for 5% of the budget (5 to 30 s), then 3 s to
    stop the workers. A unit that hangs or dies is invalid; the others go on.
    Precedence: built-in default < profile < command-line flag.

    \b
    Example:
        sdcscan run                              # quick profile, 60 s, all units
        sdcscan run -p burnin --budget 2h -o /var/lib/sdcscan/report.json --junit junit.xml
        sdcscan run --budget 10s --inject cpu:1:bitflip@0.3   # prove the pipeline catches a bad unit
        sdcscan run -p ripple --budget 24h       # beside production: idle priority, paced
        sdcscan run --distributed --standalone --nproc-per-node 4 --budget 60s -o cluster.json
    """
    started = time.time()
    from sdcscan import interrupts

    interrupts.take_over()  # before the run core's imports: from here on Ctrl-C and SIGTERM end in 130/143
    from sdcscan import scan as library
    from sdcscan.render import run as render
    from sdcscan.render.console import stderr_console

    console = stderr_console()
    notes: list[str] = []  # what publishing left undone without failing the run (a locked history)
    try:
        opts = _options(args, started, on_note=notes.append)  # refused options exit 2 before anything starts
        if args.distributed:
            from sdcscan.cli.run_distributed import run_distributed

            run_distributed(args, opts, console)
        with render.Progress(console) as progress:
            report = library.scan(opts, on_event=progress)
    except library.OutputError as err:
        _show_notes(notes, console)
        sys.exit(_output_failed(err, args.as_json, console))
    except interrupts.Interrupted as stop:
        console.print("interrupted before any case ran\nexit: interrupted")
        sys.exit(stop.exit_code)
    _show_notes(notes, console)
    late = _late_signal(report)
    _show(report, args.as_json, console, exit_line=late is None)  # one exit line: the verdict's, or
    if late is not None:  # the signal's that came while the report was judged and written
        console.print(
            f"{interrupts.signal_name(late)} arrived while the report was being written; the report is "
            "complete\nexit: interrupted"
        )
        sys.exit(interrupts.exit_code(late))
    sys.exit(int(report["exit_code"]))


def _show_notes(notes: list[str], console: Console) -> None:
    """What publishing left undone without failing the run, one unwrapped line each (logs grep them)."""
    from sdcscan.render.console import cell

    for note in notes:
        console.print(cell(f"note: {note}"), soft_wrap=True)


def _late_signal(report: Report) -> int | None:
    """SIGINT or SIGTERM that came while the report was judged and written (it then sets the exit
    code, 130/143), or None; one that stopped the run is in the report's own verdict already."""
    from sdcscan import interrupts

    signum = interrupts.received()
    return None if signum is None or report["run"].get("interrupted_by") else signum


def _output_failed(err: OutputError, as_json: bool, console: Console) -> int:
    """Judged, but an output could not be written: show the report, say what failed, and exit 1 if a
    unit was judged to miscompute (that must not be hidden by a full disk), else 3; but 130/143 when
    SIGINT or SIGTERM stopped the run or came while its outputs were written, as without the failure."""
    from sdcscan import interrupts

    # The report on stdout also without --json when nothing else holds it; one exit line, said below.
    _show(err.report, as_json or err.only_printed, console, exit_line=False)
    click.echo(f"Error: {err}", err=True)
    signum = interrupts.received()
    if signum is not None:
        console.print("exit: interrupted")
        return (
            int(err.report["exit_code"])
            if err.report["run"].get("interrupted_by")
            else interrupts.exit_code(signum)
        )
    code = EXIT_FAIL if err.report["exit_code"] == EXIT_FAIL else EXIT_INVALID
    console.print("exit: fail" if code == EXIT_FAIL else "exit: invalid (an output could not be written)")
    return code


def _show(report: Report, as_json: bool, console: Console, *, exit_line: bool = True) -> None:
    from sdcscan.render.run import render_summary

    render_summary(report, console, exit_line=exit_line)
    if as_json:
        emit_json(report)


def _options(args: RunArgs, started: float, *, on_note: Callable[[str], None] | None = None) -> ScanOptions:
    """The scan's options from the command line, every one checked here, before any worker starts.

    A given but blank `--units` or `--workloads` is an error, not "all"; `--calibration` is read and
    checked as a calibration table now, not by each worker after the run started. `on_note` hears
    what publishing the outputs left undone without failing the run (`Outputs.on_note`).

    Raises:
        UsageError, ProfileError: exit 2, naming the option or the file and key.
    """
    from pathlib import Path

    from sdcscan.errors import UsageError
    from sdcscan.faults import parse_inject
    from sdcscan.outputs.publish import Outputs, check_file_path
    from sdcscan.profile import check_overrides, load_profile, parse_budget
    from sdcscan.scan import ScanOptions, background_mode
    from sdcscan.units import parse_units_spec

    budget_s = parse_budget(args.budget) if args.budget is not None else None
    max_unscreened = _max_unscreened(args.max_unscreened)
    if not args.distributed:
        from sdcscan.cli.run_distributed import check_not_distributed

        check_not_distributed(args)
    # A distributed run's injections name ranks (RANK:KIND), parsed with its other options.
    injections = [] if args.distributed else [parse_inject(s) for s in args.inject]
    if args.distributed and args.cases is not None:
        # Ranks agree on every distributed case; one that stopped at its count would strand its peers.
        raise UsageError("--cases does not combine with --distributed: the ranks run until the budget ends")
    if args.units_spec is not None:
        parse_units_spec(args.units_spec)
    profile = load_profile(args.profile)
    background_mode(profile, args.background, distributed=args.distributed)  # refused before any rank starts
    if args.distributed:  # every distributed run checks the wire too, unless --workloads says otherwise
        from sdcscan.launch.rank import DISTRIBUTED_WORKLOADS

        profile = profile.adding(DISTRIBUTED_WORKLOADS)
    if args.workloads is not None:
        profile = profile.select([w.strip() for w in args.workloads.split(",") if w.strip()])
    overrides: dict[str, dict[str, Any]] = {}
    if args.calibration is not None:
        if not args.calibration:
            raise UsageError("--calibration '' names no file (leave it out for the shipped table)")
        overrides = {"gemm_fp": {"calibration": args.calibration}}
    check_overrides(profile, overrides, source="--calibration")
    if args.out is not None:
        check_file_path(args.out, option="--out")
    outputs = Outputs(
        Path(args.out) if args.out is not None else None,
        args.junit,
        args.prom,
        args.history,
        record_history=not args.no_history,
        on_note=on_note,
    )
    return ScanOptions(
        profile=profile,
        seed=args.seed,
        budget_s=budget_s,
        units=args.units_spec,
        injections=injections,
        hostname=args.hostname,
        outputs=outputs,
        argv=sys.argv[1:],
        param_overrides=overrides,
        retest=args.retest,
        cases=args.cases,
        golden=args.golden_path,
        started=started,
        background=args.background,
        max_unscreened_s=max_unscreened,
        telemetry_interval_s=args.telemetry_interval,
    )


def _max_unscreened(text: str | None) -> float:
    """--max-unscreened in seconds (default 24 h); it only means something with --background."""
    from sdcscan.background.host_pacing import MAX_UNSCREENED_S
    from sdcscan.errors import UsageError
    from sdcscan.timefmt import parse_duration

    if text is None:
        return MAX_UNSCREENED_S
    try:
        return parse_duration(text, max_s=365 * 86400.0)
    except UsageError as err:
        raise UsageError(f"--max-unscreened: {err}") from None
