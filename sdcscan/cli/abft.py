"""ABFT commands: `sdcscan calibrate` and `sdcscan selftest` (click only; no torch at import).

Register them on the main group with `cli.add_command(calibrate)` and `cli.add_command(selftest)`.
"""

from __future__ import annotations

import json
import sys

import click

from sdcscan.calibration.table import DEFAULT_MARGIN
from sdcscan.cli.common import reports_errors
from sdcscan.errors import EXIT_FAIL, EXIT_PASS, UsageError


def _split(values: tuple[str, ...]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


@click.command()
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda:N.")
@click.option("--dtypes", default="float32,float64,bfloat16,float16", show_default=True, help="GEMM dtypes.")
@click.option("--rows", default=10_000, show_default=True, help="Clean rows per dtype (at least).")
@click.option("--k", "k_values", default="256,1024,4096", show_default=True, help="Inner dimensions K.")
@click.option(
    "--margin", default=DEFAULT_MARGIN, show_default=True, help="Safety factor on the largest needed e_max."
)
@click.option("--seed", default=0, show_default=True, help="Input seed.")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="Write (merge into) this calibration file."
)
@click.option("--json", "as_json", is_flag=True, help="Print the calibration table as JSON on stdout.")
@reports_errors
def calibrate(
    device: str,
    dtypes: str,
    rows: int,
    k_values: str,
    margin: float,
    seed: int,
    output: str | None,
    as_json: bool,
) -> None:
    """Measure gemm_fp's V-ABFT e_max on a device and write a calibration table.

    Runs many clean GEMMs per inner dimension K over the calibration's input distributions (heavy tails,
    outlier channels, scales over decades, activations against weights), takes the largest
    |D|/T(e_max=1) over all rows and columns, and multiplies it by a safety margin. CPU measurements use one
    thread, as per-core units do. Entries in an existing output file for other devices are kept.

    \b
    Example:
        sdcscan calibrate --device cpu -o calibration.json
        sdcscan run --calibration calibration.json
    """
    from sdcscan.calibration import measure as lib
    from sdcscan.files import check_output_target
    from sdcscan.render.console import stderr_console
    from sdcscan.render.selftest import render_calibration

    if output is not None:
        check_output_target(output, option="--output")  # exit 2 before minutes of measuring
    try:
        ks = tuple(int(k) for k in k_values.split(","))
    except ValueError:
        raise UsageError(f"--k {k_values!r}: expected integers such as 256,1024,4096") from None
    table = lib.measure_on(device, dtypes=_split((dtypes,)), rows=rows, k_values=ks, margin=margin, seed=seed)
    if output:
        lib.save_table(output, table)
    render_calibration(table, stderr_console())
    if as_json:
        click.echo(json.dumps(table, indent=2))


@click.command()
@click.option(
    "--workloads", "-w", multiple=True, help="Workloads to test (comma-separated; default: all ABFT)."
)
@click.option("--trials", default=100, show_default=True, help="Trials per clean run and per (site, bit).")
@click.option("--seed", default=0, show_default=True, help="Run seed; every trial seed derives from it.")
@click.option("--json", "as_json", is_flag=True, help="Print the result object on stdout.")
@click.option(
    "--calibration", type=click.Path(dir_okay=False), help="gemm_fp calibration file (`sdcscan calibrate`)."
)
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    help="cpu, cpu:N (pinned to logical CPU N) or cuda:N; set up as a run's worker sets its unit up.",
)
@click.option(
    "--budget",
    help="Time for the whole sweep, e.g. 30s: each variant stops starting trials at its share "
    "(after at least 3). Default: no limit, --trials each.",
)
@reports_errors
def selftest(
    workloads: tuple[str, ...],
    trials: int,
    seed: int,
    as_json: bool,
    calibration: str | None,
    device: str,
    budget: str | None,
) -> None:
    """Inject bit flips and fault models through each checking workload's fault sites; report detection.

    Per workload and variant: clean trials (must never fire), trials per fault site and bit position or
    fault model (bursts, warp runs and strides, tiles, stuck bits, wrong rows: docs/fault_models.md;
    detection must not fall below the workload's floor beyond chance: at a floor of 1.0 no miss, below
    it a one-sided binomial test at 0.01), and a negative-control site the check cannot see by
    design (must stay silent). Exit 0 when all hold, 1 otherwise, 2 on bad options. Floors assume a
    calibrated device: on an uncalibrated one gemm_fp uses a conservative bound and says so.

    \b
    Example:
        sdcscan selftest --workloads gemm_fp --trials 200 --json > selftest.json
    """
    from sdcscan.profile import parse_budget
    from sdcscan.render.console import stderr_console
    from sdcscan.render.selftest import render_selftest

    budget_s = parse_budget(budget) if budget is not None else None
    _configure_device(device)
    from sdcscan.selftest.sweep import run_selftest

    console = stderr_console()
    result = run_selftest(
        _split(workloads) or None,
        trials=trials,
        seed=seed,
        on_variant=lambda w, v: console.print(f"selftest {w} {v} …") if sys.stderr.isatty() else None,
        calibration=calibration,
        device=device,
        budget_s=budget_s,
    )
    render_selftest(result, console)
    for note in result["notes"]:
        console.print(f"note: {note}")
    if as_json:
        click.echo(json.dumps(result, indent=2))
    sys.exit(EXIT_PASS if result["passed"] else EXIT_FAIL)


def _configure_device(device: str) -> None:
    """Check `--device`; set a unit up as a run's worker does (pinned, deterministic, no TF32).

    Raises:
        UsageError: not `cpu`, `cpu:N` or `cuda:N`, or no such unit here.
    """
    if device == "cpu":
        return
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or not index.isdigit():
        raise UsageError(f"--device {device!r}: expected cpu, cpu:N or cuda:N")
    from sdcscan.units import discover_units

    found = discover_units()
    unit = next((u for u in found if u.id == device), None)
    if unit is None:
        known = ", ".join(u.id for u in found[:8]) + (", …" if len(found) > 8 else "")
        raise UsageError(f"--device {device}: no such unit on this host (it has: {known})")
    from sdcscan.torch_setup import configure_torch

    configure_torch(unit, threads=1)
