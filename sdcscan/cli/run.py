"""`sdcscan run`: parse the options, run the scan, show the summary, exit with the verdict's code."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

import click

from sdcscan.cli.common import emit_json, reports_errors
from sdcscan.cli.ops import output_options
from sdcscan.errors import EXIT_INTERRUPTED


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
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report JSON here (atomically).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report JSON on stdout.")
@click.option("--hostname", help="Host label in the report (containers, tests).")
@click.option(
    "--inject",
    multiple=True,
    metavar="UNIT:KIND[@RATE]",
    help="Fault injection: bitflip, nan, hang, crash, raise.",
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
@output_options
@reports_errors
def run_cmd(**kw: Any) -> None:
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
    """
    started = time.time()
    from sdcscan.runner import warm_up_workers

    warm_up_workers()
    opts = _scan_options(kw)
    golden_data = _load_golden(kw["golden_path"])
    from sdcscan.cli.ops import run_guard
    from sdcscan.render.run import stderr_console

    console = stderr_console()
    try:
        with run_guard(kw["history"], kw["no_history"]) as note:
            if note:
                console.print(note)
            report = _scan_with_telemetry(opts, console, started)
            if golden_data is not None:
                from sdcscan.fleet.golden import apply_golden

                report = apply_golden(report, golden_data)
            _write_outputs(report, opts, kw, console)
    except KeyboardInterrupt:
        console.print("interrupted before any case ran\nexit: interrupted")
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(report["exit_code"])


def _load_golden(path: str | None) -> Any:
    """Read the golden before any work, so a bad path fails in a second, not after the budget."""
    if path is None:
        return None
    from sdcscan.fleet.golden import load_golden

    return load_golden(path)


def _scan_with_telemetry(opts: Any, console: Any, started: float) -> dict[str, Any]:
    from sdcscan.render.run import Progress
    from sdcscan.scan import prepare, scan
    from sdcscan.telemetry.sampler import Sampler, telemetry_findings

    setup = prepare(opts)
    signal.signal(signal.SIGTERM, _raise_terminated)
    with Sampler(setup["units"], interval_s=5.0) as sampler, Progress(console) as progress:
        report = scan(opts, setup, progress, started)
    report["telemetry"] = sampler.summary()
    report["findings"] += telemetry_findings(report["telemetry"])
    return report


def _write_outputs(report: dict[str, Any], opts: Any, kw: dict[str, Any], console: Any) -> None:
    """Report file first (nothing lost), then JUnit/Prometheus/history; the summary is shown in any case."""
    from sdcscan.cli.ops import after_run
    from sdcscan.render.run import render_summary

    try:
        if opts.out is not None:
            _write_report(opts.out, report)
        after_run(
            report,
            str(opts.out) if opts.out else None,
            junit=kw["junit"],
            prom=kw["prom"],
            history=kw["history"],
            no_history=kw["no_history"],
        )
    finally:
        render_summary(report, console)
        if kw["as_json"]:
            emit_json(report)


def _scan_options(kw: dict[str, Any]) -> Any:
    from sdcscan.faults import parse_inject
    from sdcscan.profile import load_profile, parse_duration
    from sdcscan.scan import ScanOptions

    budget_s = parse_duration(kw["budget"]) if kw["budget"] is not None else None
    injections = [parse_inject(s) for s in kw["inject"]]
    profile = load_profile(kw["profile"])
    if kw["workloads"]:
        profile = profile.select([w.strip() for w in kw["workloads"].split(",") if w.strip()])
    overrides = {"gemm_fp": {"calibration": kw["calibration"]}} if kw["calibration"] else {}
    return ScanOptions(
        profile=profile,
        seed=kw["seed"],
        budget_s=budget_s,
        units=kw["units_spec"],
        injections=injections,
        hostname=kw["hostname"],
        out=kw["out"],
        argv=sys.argv[1:],
        param_overrides=overrides,
        retest=kw["retest"],
    )


def _write_report(out: Path, report: dict[str, Any]) -> None:
    from sdcscan.errors import ReportError
    from sdcscan.report import write_json_atomic

    try:
        write_json_atomic(out, report)
    except ReportError as err:  # full disk, directory gone: say where the results still are
        journal = report["run"].get("journal")
        raise ReportError(
            f"{err}; every finished case is in {journal}: sdcscan report --from-journal {journal}"
        ) from None


def _raise_terminated(signum: int, frame: Any) -> None:
    from sdcscan.runner import Terminated

    raise Terminated()
