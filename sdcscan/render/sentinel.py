"""Human output of `sdcscan sentinel` on stderr: the window read, each unit's kernel-log events, findings.

Process names and notes come from the kernel's log, which any local program can fill with text of its
choosing: all of it is shown literally (`render.console.cell`).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from sdcscan.outcomes import unit_order
from sdcscan.render.console import cell, stderr_console
from sdcscan.report.document import Finding, Sentinel

MAX_ROWS = 32  # a 256-core host with events on many cores lists the busiest, then a count


def print_sentinel(section: Sentinel, findings: list[Finding], exit_word: str) -> None:
    """The scan's window and sources, a table of units with events, notes, findings, then `exit: …`."""
    console = stderr_console()
    sources = ", ".join(section["sources"]) or "none readable"
    stats = section["stats"]
    console.print(cell(f"sdcscan sentinel: kernel log {section['since']} .. {section['until']} ({sources}); "
                       f"{stats['lines']} lines, {stats['events']} events, {stats['skipped']} unreadable"))  # fmt: skip
    _units_table(console, section["units"])
    for note in section["notes"]:
        console.print(cell(f"note: {note}"))
    for f in findings:
        console.print(cell(f"- {f['message']}"))
        if f.get("next"):
            console.print(cell(f"  next: {f['next']}"))
    if section["sources"] and not findings:
        console.print("No core stands out, and no machine check or GPU hardware Xid was logged.")
    console.print(f"exit: {exit_word}")


def _units_table(console: Console, units: dict[str, dict[str, Any]]) -> None:
    if not units:
        return
    busiest = sorted(units.values(), key=lambda t: -sum(t["counts"].values()))
    table = Table(title="Kernel-log events per unit", title_justify="left")
    for col in (
        "unit",
        "segfaults",
        "traps",
        "machine checks",
        "Xids",
        "programs",
        "first seen",
        "last seen",
    ):
        table.add_column(col, justify="left" if col in ("unit", "first seen", "last seen") else "right")
    for t in sorted(busiest[:MAX_ROWS], key=lambda t: unit_order(t["unit"])):
        c = t["counts"]
        table.add_row(
            cell(t["unit"]), cell(c.get("segfault", 0)), cell(c.get("trap", 0)), cell(c.get("mce", 0)),
            cell(c.get("xid", 0)), cell(t["programs"]), cell(t["first_seen"] or ""), cell(t["last_seen"] or ""),
        )  # fmt: skip
    console.print(table)
    if len(units) > MAX_ROWS:
        console.print(f"… and {len(units) - MAX_ROWS} more units with fewer events (--json lists all)")
