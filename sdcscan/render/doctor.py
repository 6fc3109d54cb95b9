"""Rich rendering of `sdcscan doctor`'s summary, for people, on stderr."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sdcscan.render.console import cell

_STYLE = {"ok": "green", "finding": "red", "untrusted": "red", "skipped": "yellow", "interrupted": "yellow"}


def render_doctor(summary: dict[str, Any], console: Console) -> None:
    """The steps, what each showed, the speed table, the reasons, and the last line `exit: …`."""
    steps = Table(title=f"sdcscan doctor on {summary['host']} ({', '.join(summary['units'])})")
    for col in ("step", "status", "seconds", "shown"):
        steps.add_column(col, justify="right" if col == "seconds" else "left")
    for step in summary["steps"]:
        style = _STYLE.get(step["status"], "")
        steps.add_row(
            step["name"], Text(step["status"], style=style), f"{step['seconds']:g}", cell(_shown(step))
        )
    for name in summary["not_run"]:
        steps.add_row(name, Text("not run", style="yellow"), "", "")
    console.print(steps)
    speed: dict[str, Any] = next((s["details"] for s in summary["steps"] if s["name"] == "speed"), {})
    if speed.get("workloads"):
        console.print(_speed_table(speed))
    for gpu, t in speed.get("gpus", {}).items():
        console.print(cell(f"{gpu}: {t['line']}"))
    for finding in summary["findings"]:
        console.print(Text("finding: ", style="red"), cell(finding), sep="")
    for reason in summary["reasons"]:
        console.print(Text("reason: ", style="red"), cell(reason), sep="")
    if summary.get("output_error"):
        console.print(Text("Error: ", style="red"), cell(summary["output_error"]), sep="")
    elif summary.get("files"):
        console.print(f"files: {', '.join(summary['files'])}")
    console.print(f"exit: {summary['verdict']}")


def _shown(step: dict[str, Any]) -> str:
    """One line of what a step showed."""
    d = step["details"]
    if step["name"] == "environment":
        v, isa = d.get("versions", {}), d.get("isa", {})
        readable = [n for n, s in d.get("sources", {}).items() if s["readable"]]
        return (
            f"torch {v.get('torch')}, CUDA {v.get('cuda') or 'none'}, ISA {isa.get('torch_cpu_capability')}; "
            f"readable: {', '.join(readable) or 'none'}"
        )
    if step["name"] == "detectors":
        return "; ".join(
            f"{unit}: {x['variants']} variants, {x['trials']} trials, {x['false_positives']} false positives"
            for unit, x in d.items()
        )
    if step["name"] == "determinism":
        return f"{d.get('cases_compared', 0)} cases compared across runs"
    if step["name"] == "injection":
        return "; ".join(f"{kind} {x['seconds']:g}/{x['bound_s']:g} s" for kind, x in d.items())
    if step["name"] == "speed":
        return f"plan {d.get('profile')}: {len(d.get('workloads', []))} workloads measured"
    return ""


def _speed_table(speed: dict[str, Any]) -> Table:
    table = Table(title="speed (the determinism runs' cases)")
    for col in ("kind", "workload", "rate", "peak", "efficiency", "compute share"):
        table.add_column(col, justify="left" if col in ("kind", "workload") else "right")
    for r in speed["workloads"]:
        unit = r.get("ops_unit") or "op"
        table.add_row(
            r["kind"], r["workload"], _rate(r["ops_per_s"], unit), _rate(r["peak_ops_per_s"], unit),
            _num(r["efficiency"]), _num(r["compute_share"]),
        )  # fmt: skip
    return table


def _rate(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{value / 1e9:.1f} G{unit}/s"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"
