"""Rich rendering of `sdcscan selftest` and `sdcscan calibrate` results, for people, on stderr."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sdcscan.render.console import cell


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def selftest_table(result: dict[str, Any]) -> Table:
    """One line per (workload, variant, site, bit); clean trials first within each variant."""
    table = Table(title=f"sdcscan selftest (seed {result['seed']}, {result['trials']} trials)")
    for col in ("workload", "variant", "site", "fault", "trials", "detected", "rate", "floor", ""):
        table.add_column(
            col, justify="right" if col in ("fault", "trials", "detected", "rate", "floor") else "left"
        )
    for r in result["rows"]:
        mark = Text("ok", style="green") if r["passed"] else Text("FAIL", style="red")
        if r["site"] == "clean":
            detected, rate = f"{r['false_positives']} FP", f"{r['rows_checked']} rows"
            floor = "0 FP"
        else:
            detected, rate = str(r["detected"]), _pct(r["rate"])
            floor = "silent" if r["negative_control"] else _pct(r["floor"])
        bit = "" if r["bit"] is None else str(r["bit"])
        table.add_row(
            cell(r["workload"]),
            cell(r["variant"]),
            cell(r["site"]),
            bit,
            str(r["trials"]),
            detected,
            rate,
            floor,
            mark,
        )
    return table


def render_selftest(result: dict[str, Any], console: Console) -> None:
    """The detection table, then one line naming every failed row and the verdict."""
    console.print(selftest_table(result))
    if result.get("blind_spots"):
        console.print("Not caught, by design (docs/abft.md):")
        for workload, spots in result["blind_spots"].items():
            for spot in spots:
                console.print(cell(f"  {workload}: {spot}"))
    for r in result["rows"]:
        if not r["passed"]:
            what = "clean trials fired" if r["site"] == "clean" else f"{r['site']} {_fault_label(r['bit'])}"
            console.print(
                Text("failed:", style="red").append(cell(f" {r['workload']}/{r['variant']}: {what}"))
            )
    console.print(f"selftest: {'pass' if result['passed'] else 'fail'}")


def render_calibration(table: dict[str, Any], console: Console) -> None:
    """The measured coefficients, one line per (device model, dtype, checker): e_max of the threshold's
    second-moment term and e_mean of its mean term, each the margin times what clean GEMMs needed."""
    t = Table(title="sdcscan calibrate: coefficients = margin × what clean rows and columns needed")
    for col in ("device model", "dtype", "checker", "rows", "K ≤", "needed", "e_max", "e_mean"):
        t.add_column(col)
    for e in table["entries"]:
        row = (cell(e["device_model"]), cell(e["dtype"]), cell(e["checker"]), str(e["rows"]), str(e["k_max"]))
        e_mean = e.get("e_mean")
        t.add_row(*row, f"{e['needed']:.3g}", f"{e['e_max']:.3g}", "" if e_mean is None else f"{e_mean:.3g}")
    console.print(t)


def _fault_label(label: object) -> str:
    """The label shown for a fault: "bit 14" for a bit, else the model's name ("swap_in_row")."""
    return f"bit {label}" if isinstance(label, int) else str(label)
