"""Human output of `sdcscan info --peaks`: per unit, each workload's plain ops and their measured rates."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from sdcscan.render.console import cell

_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def rate(value: float | None, unit: str) -> str:
    """`157.3 Gflop/s`: a rate with an SI prefix; `—` when unknown."""
    if value is None:
        return "—"
    scale, prefix = next(((s, p) for s, p in _PREFIXES if value >= s), (1.0, ""))
    return f"{value / scale:.1f} {prefix}{unit}/s"


_UNITS = {"matmul": "flop", "int_mm": "op", "embedding_bag": "lookup"}


def print_peaks(data: dict[str, Any], console: Console) -> None:
    """One table per unit: workload, op, dtype, shape, rate, source; the workload's combined peak."""
    for unit in data["units"]:
        title = f"{unit['unit']} ({unit['model']}, {unit['threads']} thread(s)), profile {data['profile']}"
        table = Table(title=cell(title), title_justify="left", box=None)
        for col in ("workload", "op", "dtype", "shape", "peak", "source"):
            table.add_column(col)
        for name, found in unit["workloads"].items():
            ops_unit = "flop"
            for op in found["ops"]:
                ops_unit = _UNITS.get(op["op"], "op")
                table.add_row(
                    cell(name),
                    cell(op["op"]),
                    cell(op["dtype"]),
                    cell("x".join(map(str, op["shape"]))),
                    rate(op["ops_per_s"], ops_unit),
                    cell(op["source"]),
                )
            table.add_row(
                cell(name), "[bold]combined[/bold]", "", "", rate(found["peak_ops_per_s"], ops_unit), ""
            )
        console.print(table)
        for note in unit["notes"]:
            console.print(cell(note))
