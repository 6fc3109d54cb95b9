"""ABFT commands: `sdcscan calibrate` and `sdcscan selftest` (click only; no torch at import).

Register them on the main group with `cli.add_command(calibrate)` and `cli.add_command(selftest)`.
"""

from __future__ import annotations

import json
import sys

import click

from sdcscan.cli.common import reports_errors
from sdcscan.errors import EXIT_FAIL, EXIT_PASS, UsageError


def _split(values: tuple[str, ...]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


@click.command()
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda:N.")
@click.option("--dtypes", default="float32,float64,bfloat16,float16", show_default=True, help="GEMM dtypes.")
@click.option("--rows", default=10_000, show_default=True, help="Clean rows per dtype (at least).")
@click.option("--k", "k_values", default="256,1024,4096", show_default=True, help="Inner dimensions K.")
@click.option("--margin", default=3.0, show_default=True, help="Safety factor on the largest needed e_max.")
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

    Runs many clean GEMMs per inner dimension K over six input distributions, takes the largest
    |D|/T(e_max=1) over all rows, and multiplies it by a safety margin. CPU measurements use one
    thread, as per-core units do. Entries in an existing output file for other devices are kept.

    \b
    Example:
        sdcscan calibrate --device cpu -o calibration.json
        sdcscan run --calibration calibration.json
    """
    from sdcscan.files import check_output_target
    from sdcscan.render.console import stderr_console
    from sdcscan.render.selftest import render_calibration
    from sdcscan.workloads import calibration as lib

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
@reports_errors
def selftest(
    workloads: tuple[str, ...],
    trials: int,
    seed: int,
    as_json: bool,
    calibration: str | None,
) -> None:
    """Inject single bit flips through each ABFT workload's fault sites and report detection.

    Per workload and variant: clean trials (must never fire), trials per fault site and bit position
    (detection must reach the workload's floor), and a negative-control site the check cannot see by
    design (must stay silent). Exit 0 when all hold, 1 otherwise, 2 on bad options. Floors assume a
    calibrated device: on an uncalibrated one gemm_fp uses a conservative bound and says so.

    \b
    Example:
        sdcscan selftest --workloads gemm_fp --trials 200 --json > selftest.json
    """
    from sdcscan.render.console import stderr_console
    from sdcscan.render.selftest import render_selftest
    from sdcscan.workloads.selftest import run_selftest

    console = stderr_console()
    result = run_selftest(
        _split(workloads) or None,
        trials=trials,
        seed=seed,
        on_variant=lambda w, v: console.print(f"selftest {w} {v} …") if sys.stderr.isatty() else None,
        calibration=calibration,
    )
    render_selftest(result, console)
    for note in result["notes"]:
        console.print(f"note: {note}")
    if as_json:
        click.echo(json.dumps(result, indent=2))
    sys.exit(EXIT_PASS if result["passed"] else EXIT_FAIL)
