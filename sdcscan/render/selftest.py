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
    """One line per (workload, variant, site): its faults taken together, the worst against its floor.

    Every (site, bit) row is in `--json`, and each failed one is named under the table: 1,281 rows in a
    terminal scroll away, and rich took 2.8 s to lay them out (2-vCPU Xeon), inside the doctor's budget.
    """
    table = Table(title=f"sdcscan selftest (seed {result['seed']}, {result['trials']} trials)")
    for col in ("workload", "variant", "site", "faults", "trials", "detected", "lowest", "floor", ""):
        table.add_column(col, justify="left" if col in ("workload", "variant", "site", "") else "right")
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in result["rows"]:
        groups.setdefault((r["workload"], r["variant"], r["site"]), []).append(r)
    for (workload, variant, site), rows in groups.items():
        passed = all(r["passed"] for r in rows)
        mark = Text("ok", style="green") if passed else Text("FAIL", style="red")
        trials = sum(r["trials"] for r in rows)
        if site == "clean":
            cells = ("", str(trials), f"{sum(r['false_positives'] for r in rows)} FP", "", "0 FP")
        else:
            worst = _worst(rows)
            floor = "silent" if worst["negative_control"] else _pct(worst["floor"])
            lowest = f"{_pct(worst['rate'])} ({_fault_label(worst['bit'])})"
            cells = (str(len(rows)), str(trials), str(sum(r["detected"] for r in rows)), lowest, floor)
        table.add_row(cell(workload), cell(variant), cell(site), *cells, mark)
    return table


def _worst(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The row to show for a site: a failed one if any, else the one nearest its limit (the lowest
    detection, or on a negative control, which must stay silent, the highest)."""
    failed = [r for r in rows if not r["passed"]]
    if failed:
        return failed[0]
    rated = [r for r in rows if r["rate"] is not None] or rows
    if rows[0]["negative_control"]:
        return max(rated, key=lambda r: r["rate"] or 0.0)
    return min(rated, key=lambda r: r["rate"] if r["rate"] is not None else 1.0)


def render_selftest(result: dict[str, Any], console: Console) -> None:
    """The detection table, then one line naming every failed row and the verdict."""
    console.print(selftest_table(result))
    if result.get("blind_spots"):
        console.print("Not caught, by design (docs/abft.md):")
        for workload, spots in result["blind_spots"].items():
            for spot in spots:
                console.print(cell(f"  {workload}: {spot}"))
    for r in result["rows"]:
        # a row with a floor whose every draw changed no value: nothing judged (one without a floor, such
        # as a relative error below bf16's resolution, is there to show that)
        if r["site"] != "clean" and r["floor"] is not None and not r.get("exercised", True):
            console.print(
                cell(
                    f"not exercised: {r['workload']}/{r['variant']}: {r['site']} {_fault_label(r['bit'])}: "
                    f"all {r['unchanged']} draws left every value equal"
                )
            )
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
