"""ABFT commands: `sdcscan calibrate` and `sdcscan selftest` (click only; no torch at import).

Register them on the main group with `cli.add_command(calibrate)` and `cli.add_command(selftest)`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from sdcscan.errors import EXIT_FAIL, EXIT_PASS, SdcscanError, UsageError


@contextmanager
def _errors(ctx: click.Context) -> Iterator[None]:
    """Library errors become `Error: ...` on stderr and their exit code, so the commands work standalone."""
    try:
        yield
    except SdcscanError as err:
        click.echo(f"Error: {err}", err=True)
        ctx.exit(err.exit_code)


def _console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


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
@click.pass_context
def calibrate(
    ctx: click.Context,
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

    Example:
        sdcscan calibrate --device cpu -o calibration.json
        sdcscan run --calibration calibration.json
    """
    with _errors(ctx):
        import torch

        from sdcscan.render.selftest import render_calibration
        from sdcscan.units import device_model
        from sdcscan.workloads import calibration as lib

        dev = _parse_device(device)
        try:
            ks = tuple(int(k) for k in k_values.split(","))
        except ValueError:
            raise UsageError(f"--k {k_values!r}: expected integers such as 256,1024,4096") from None
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # e_max depends on the blocking, which depends on the thread count
        try:
            table = lib.calibrate(
                device=dev, model=device_model(dev), dtypes=_split((dtypes,)), rows=rows, k_values=ks,
                margin=margin, seed=seed,
            )  # fmt: skip
        finally:
            torch.set_num_threads(threads)
        if output:
            _write_table(Path(output), table)
        render_calibration(table, _console())
        if as_json:
            click.echo(json.dumps(table, indent=2))


def _parse_device(text: str) -> Any:
    import torch

    if text != "cpu" and not (text.startswith("cuda:") and text[5:].isdigit()):
        raise UsageError(f"--device {text!r}: expected cpu or cuda:N")
    if text.startswith("cuda") and not (
        torch.cuda.is_available() and int(text[5:]) < torch.cuda.device_count()
    ):
        raise UsageError(f"--device {text}: no such CUDA device here")
    return torch.device(text)


def _write_table(path: Path, table: dict[str, Any]) -> None:
    """Merge into an existing table (other devices' entries are kept) and write atomically."""
    from sdcscan.workloads import calibration as lib

    old = lib.load_table(str(path)) if path.exists() else None
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(lib.merge(old, table), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


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
@click.pass_context
def selftest(
    ctx: click.Context,
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
    with _errors(ctx):
        from sdcscan.render.selftest import render_selftest
        from sdcscan.workloads.selftest import run_selftest

        console = _console()
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
        ctx.exit(EXIT_PASS if result["passed"] else EXIT_FAIL)
