"""Human output of the operations commands (history, status, clear, export) on stderr, with rich.

Only the `sdcscan.render` package imports rich; everything here takes plain dicts from `sdcscan.outputs.history`.
The history holds what reports said (host names, reasons, run ids) and paths people typed: all of it is
shown literally (`render.console.cell`).
"""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from sdcscan.outputs.coverage import UnitCoverage
from sdcscan.outputs.history import Flag, RecordedRun, Status, UnitResult
from sdcscan.outputs.sentinel_history import SentinelScan
from sdcscan.render.console import cell, stderr_console

MAX_NAMED_UNITS = 6  # a 128-core host lists "cpu:3, cpu:17, … (+4)" instead of 128 names
MAX_COVERAGE_ROWS = 32  # beyond this many units, status sums coverage up and names the least screened


def units_summary(units: list[UnitResult]) -> str:
    """`8 units: 7 pass, 1 fail (cpu:1)`: counts by verdict, naming the units that did not pass."""
    counts = Counter(u["verdict"] for u in units)
    parts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: kv[0] != "pass"))
    bad = [u["unit"] for u in units if u["verdict"] != "pass"]
    named = ", ".join(bad[:MAX_NAMED_UNITS]) + (
        f", … (+{len(bad) - MAX_NAMED_UNITS})" if len(bad) > 6 else ""
    )
    return f"{len(units)} unit{'s' * (len(units) != 1)}: {parts}" + (f" ({named})" if bad else "")


def print_history(runs: list[RecordedRun], history: str) -> None:
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


def print_status(status: Status) -> None:
    """Flagged units with what to do about them, then the last run."""
    console = stderr_console()
    last = status["last_run"]
    if last:
        console.print(cell(f"Last run {last['run_id']} ended {last['ended_at']}: {last['verdict']} "
                           f"({units_summary(last['units'])})."))  # fmt: skip
    else:
        console.print(cell(f"No runs recorded in {status['history']}."))
    _print_coverage(console, status.get("coverage_24h") or {})
    _print_sentinel(console, status.get("last_sentinel"))
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


def _print_coverage(console: Console, coverage: dict[str, UnitCoverage]) -> None:
    """What each unit screened in the last 24 h: a table, or for a many-core host a summary naming the least."""
    if not coverage:
        console.print("No unit screened in the last 24 h.")
        return
    if len(coverage) > MAX_COVERAGE_ROWS:
        least = sorted(coverage.items(), key=lambda uc: uc[1]["seconds"])[:MAX_NAMED_UNITS]
        cases = sum(c["cases"] for c in coverage.values())
        seconds = sum(c["seconds"] for c in coverage.values())
        named = ", ".join(f"{u} ({duration(c['seconds'])})" for u, c in least)
        console.print(cell(f"Screened in the last 24 h: {len(coverage)} units, {cases} cases, "
                           f"{duration(seconds)} in all; least screened: {named}."))  # fmt: skip
        return
    table = Table(title="Screened in the last 24 h", title_justify="left")
    for col in ("unit", "runs", "cases", "screened"):
        table.add_column(col, justify="left" if col == "unit" else "right")
    for unit, c in coverage.items():
        table.add_row(cell(unit), cell(c["runs"]), cell(c["cases"]), cell(duration(c["seconds"])))
    console.print(table)


def _print_sentinel(console: Console, scan: SentinelScan | None) -> None:
    """The last kernel-log scan: its window, its events and the outlier cores it named."""
    if not scan:
        console.print("No kernel-log scan recorded (sdcscan sentinel).")
        return
    events = "?" if scan.get("events") is None else scan["events"]
    window = f"{scan.get('since') or '?'} to {scan.get('until') or '?'}"
    outliers = scan.get("outliers") or []
    found = f"outlier cores: {', '.join(outliers)}" if outliers else "no outlier core"
    console.print(cell(f"Last kernel-log scan, {window}: {events} kernel event(s), {found}."),
                  style="bold red" if outliers else "")  # fmt: skip
    if outliers:  # suspects, not proven: a directed screen of those cores decides
        console.print(cell(f"Screen them: sdcscan run -p burnin --units {','.join(outliers)}"))


def duration(seconds: float) -> str:
    """Seconds for people: `42.0 s`, `12m 03s`, `3h 05m`."""
    s = float(seconds)
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)}m {int(s % 60):02d}s"
    return f"{int(s // 3600)}h {int(s % 3600 // 60):02d}m"


def print_cleared(cleared: list[Flag]) -> None:
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
