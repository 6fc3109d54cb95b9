"""`sdcscan doctor`: parse the options, run the checkup, show the summary, exit with its code."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sdcscan.cli.common import emit_json, reports_errors


@click.command("doctor")
@click.option("--units", "units_spec", help="Units to use (default: the first two CPUs and GPUs).")
@click.option(
    "-b",
    "--budget",
    help="Time for every step together.  [default: 5m; 8m when a GPU is among the units]",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for doctor.json, doctor.md and tar.gz bundles of reports, journals and logs.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary JSON on stdout.")
@reports_errors
def doctor(units_spec: str | None, budget: str | None, out: Path | None, as_json: bool) -> None:
    """Prove sdcscan works on this host's hardware and software stack, in one bounded command.

    Run it on new hardware, a new driver or a new torch build before trusting a fleet's exit codes.
    Five steps, each inside the budget: the environment (versions, ISA, units, which optional
    sources can be read), the detectors (`sdcscan selftest` on one unit of each kind), determinism
    (one plan run twice: every digest must reproduce), an injection drill (bitflip, nan, hang and
    crash on one unit of each kind: the struck unit named, its peers pass, each run within its bound,
    no process left behind) and speed (rate, plain-op peak, efficiency, compute share; GPU
    utilisation, clock, power and temperature).

    Exit 0: every step holds. 1: a unit miscomputed outside the injections (a real finding).
    3: sdcscan cannot be trusted here (each reason is listed). 2: bad options, before any work.
    130/143: interrupted, with a summary of what ran.

    \b
    Example:
        sdcscan doctor --budget 90s
        sdcscan doctor --budget 6m --out doctor/ --json > doctor.json
    """
    from sdcscan import interrupts
    from sdcscan.doctor.checkup import checkup, prepare
    from sdcscan.doctor.schedule import short_for_gpus
    from sdcscan.profile import parse_budget
    from sdcscan.render.console import stderr_console
    from sdcscan.render.doctor import render_doctor

    console = stderr_console()
    interrupts.take_over()  # from here on, Ctrl-C and SIGTERM end in 130/143 and a partial summary
    try:
        setup = prepare(None if budget is None else parse_budget(budget), units_spec, out, sys.argv[1:])
    except interrupts.Interrupted as stop:
        console.print("interrupted before any step ran\nexit: interrupted")
        sys.exit(stop.exit_code)
    console.print(
        f"sdcscan doctor: budget {setup.budget_s:g} s, units {', '.join(u.id for u in setup.units)}"
    )
    warning = short_for_gpus(setup.budget_s, setup.units)
    if warning:
        console.print(f"  note: {warning}", markup=False, highlight=False)
    summary = checkup(setup, lambda line: console.print(f"  {line}", markup=False, highlight=False))
    render_doctor(summary, console)
    if as_json:
        emit_json(summary)
    sys.exit(summary["exit_code"])
