"""Human output of the operations commands (history, status, clear, export) on stderr, with rich.

Only the `sdcscan.render` package imports rich; everything here takes plain dicts from `sdcscan.outputs.history`.
The history holds what reports said (host names, reasons, run ids) and paths people typed: all of it is
shown literally (`render.console.cell`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.table import Table

from sdcscan.render.console import cell, stderr_console

MAX_NAMED_UNITS = 6  # a 128-core host lists "cpu:3, cpu:17, … (+4)" instead of 128 names


def units_summary(units: list[dict[str, Any]]) -> str:
    """`8 units: 7 pass, 1 fail (cpu:1)`: counts by verdict, naming the units that did not pass."""
    counts = Counter(u["verdict"] for u in units)
    parts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: kv[0] != "pass"))
    bad = [u["unit"] for u in units if u["verdict"] != "pass"]
    named = ", ".join(bad[:MAX_NAMED_UNITS]) + (
        f", … (+{len(bad) - MAX_NAMED_UNITS})" if len(bad) > 6 else ""
    )
    return f"{len(units)} unit{'s' * (len(units) != 1)}: {parts}" + (f" ({named})" if bad else "")


def print_history(runs: list[dict[str, Any]], history: str) -> None:
    """A table of runs, newest first."""
    console = stderr_console()
    if not runs:
        console.print(cell(f"No runs recorded in {history}."))
        return
    table = Table(title=cell(f"sdcscan history ({history})"), title_justify="left")
    for col in ("ended", "run", "host", "profile", "verdict", "exit", "units"):
        table.add_column(col)
    for r in runs:
        verdict = cell(r["verdict"], "" if r["verdict"] == "pass" else "bold red")
        table.add_row(
            cell(r["ended_at"] or ""), cell(r["run_id"]), cell(r["host"] or ""), cell(r["profile"] or ""),
            verdict, cell(r["exit_code"]), cell(units_summary(r["units"])),
        )  # fmt: skip
    console.print(table)


def print_status(status: dict[str, Any]) -> None:
    """Flagged units with what to do about them, then the last run."""
    console = stderr_console()
    last = status["last_run"]
    if last:
        console.print(cell(f"Last run {last['run_id']} ended {last['ended_at']}: {last['verdict']} "
                           f"({units_summary(last['units'])})."))  # fmt: skip
    else:
        console.print(cell(f"No runs recorded in {status['history']}."))
    if not status["flagged"]:
        console.print("No unit is flagged.")
        return
    table = Table(
        title="Flagged units (a unit that failed stays flagged until cleared)", title_justify="left"
    )
    for col in ("unit", "host", "since", "first failing run", "failures", "reason"):
        table.add_column(col)
    for f in status["flagged"]:
        table.add_row(
            cell(f["unit"]),
            cell(f["host"] or ""),
            cell(f["flagged_at"]),
            cell(f["run_id"]),
            cell(f["failures"]),
            cell(f["reason"] or ""),
        )
    console.print(table)
    names = ", ".join(f["unit"] for f in status["flagged"])
    console.print(cell(f"flagged: {names}"))
    console.print("After repair or replacement: sdcscan clear UNIT --reason TEXT")


def print_cleared(cleared: list[dict[str, Any]]) -> None:
    """One line per cleared flag."""
    console = stderr_console()
    for f in cleared:
        console.print(cell(f"Cleared {f['unit']} (flagged {f['flagged_at']} by run {f['run_id']}, "
                           f"{f['failures']} failing run(s)): {f['clear_reason']}"))  # fmt: skip


def print_written(paths: list[str]) -> None:
    """Which files export wrote."""
    console = stderr_console()
    for p in paths:
        console.print(cell(f"Wrote {p}"))
