"""Human output of `compare` and `golden record`: counts, then findings, on stderr (rich lives here only).

Host names, unit ids, reasons, workloads and paths come from report files of other hosts: every one
is shown literally (`render.console.cell`), never read as markup or sent to the terminal raw.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from sdcscan.fleet.compare import FleetSummary
from sdcscan.fleet.findings import FleetFinding
from sdcscan.fleet.model import Skipped
from sdcscan.render.console import cell, stderr_console

MAX_ROWS = 200  # beyond this a table is not read by people; --json has everything
MAX_SKIPPED_SHOWN = 10
STYLE = {
    "divergent": "bold red",
    "invariant": "bold red",
    "slow": "yellow",
    "undecided": "magenta",
    "invalid": "red",
    "stale": "cyan",
    "missing": "cyan",
}


def describe(f: FleetFinding) -> str:
    """One sentence of evidence for a finding."""
    e = f.evidence
    if f.kind == "divergent":
        group = f"; wrong like the other units of group {e['group']}" if e.get("group") else ""
        return (
            f"{e['disputed_cases']} of {e['cases_compared']} case(s) disagree with the majority, first case "
            f"{e['first_disputed_case']} ({e['workload']}, {e['voters']} units voted); "
            f"workloads {', '.join(e['workloads'])}{group}"
        )
    if f.kind == "invariant":
        first = "" if e["first_case"] is None else f", first case {e['first_case']}"
        checks = ", ".join(e["checks"]) or "invariant"
        return f"{e['mismatches']} invariant failure(s) ({checks}){first}"
    if f.kind == "slow":
        z = "MAD 0" if e["z"] is None else f"z {e['z']}"
        return (
            f"{e['workload']}: {e['ops_per_s']:.4g} {e['ops_unit']}, {e['drop'] or 0:.0%} below the median "
            f"{e['median_ops_per_s']:.4g} of {e['peers']} peers ({z})"
        )
    if f.kind == "undecided":
        return (
            f"{e['undecided_cases']} case(s) without a majority, first case {e['first_undecided_case']} "
            f"({e['voters']} units, {e['distinct_digests']} different digests): nobody accused"
        )
    if f.kind == "invalid":
        return f"run {e['run']} was invalid: {e['reason']}"
    if f.kind == "stale":
        return (
            f"newest report {e['newest_report_at']}, {e['age_days']} days old (limit {e['stale_after_days']})"
        )
    return str(e.get("reason", ""))


def render_compare(summary: FleetSummary, console: Console | None = None) -> None:
    """Counts, the findings table, skipped inputs and what to do next."""
    out = console or stderr_console()
    c = summary.counts
    out.print(
        f"Compared {c['reports']} report(s) from {c['hosts']} host(s), {c['units']} unit(s): "
        f"{c['comparison_groups']} comparison group(s), {c['cases_compared']} case(s) compared, "
        f"{c['undecided_cases']} undecided."
    )
    kinds = [
        k for k in ("divergent", "invariant", "slow", "undecided", "invalid", "stale", "missing") if c.get(k)
    ]
    out.print("Findings: " + (", ".join(f"{c[k]} {k}" for k in kinds) if kinds else "none."))
    if summary.findings:
        out.print(_table(summary.findings))
    for g in summary.groups:
        out.print(
            cell(
                f"Group {g['id']}: {g['units']} units of cohort {g['cohort']} agree with each other but not "
                f"the majority on {g['shared_cases']} case(s), first case {g['first_shared_case']}."
            )
        )
    _render_skipped(summary.skipped, out)
    out.print(_next_step(summary))


def _table(findings: tuple[FleetFinding, ...]) -> Table:
    """The findings, most severe first, at most MAX_ROWS rows."""
    table = Table(show_header=True, header_style="bold", expand=False)
    for name in ("host", "unit", "kind", "evidence"):
        table.add_column(name, overflow="fold")
    for f in findings[:MAX_ROWS]:
        table.add_row(
            cell(f.host), cell(f.unit or "-"), cell(f.kind, STYLE.get(f.kind, "")), cell(describe(f))
        )
    if len(findings) > MAX_ROWS:
        table.caption = f"… and {len(findings) - MAX_ROWS} more; use --json for all"
    return table


def _render_skipped(skipped: tuple[Skipped, ...], out: Console) -> None:
    if not skipped:
        return
    out.print(f"Skipped {len(skipped)} input(s):")
    for s in skipped[:MAX_SKIPPED_SHOWN]:
        out.print(cell(f"  {s.path}: {s.reason}"))
    if len(skipped) > MAX_SKIPPED_SHOWN:
        out.print(f"  … and {len(skipped) - MAX_SKIPPED_SHOWN} more (--json lists them all)")


def _next_step(summary: FleetSummary) -> str:
    """What a person should do with this result."""
    kinds = {f.kind for f in summary.findings}
    if kinds & {"divergent", "invariant"}:
        return (
            "Next: retest the named units on their hosts (sdcscan run --units UNIT --seed SEED) and take "
            "those that fail again out of service."
        )
    if "slow" in kinds:
        return "Next: check cooling, power caps and clocks of the slow units, then retest them."
    if kinds & {"missing", "stale", "invalid"}:
        return "Next: run sdcscan on the missing, stale or invalid hosts."
    return "No unit is divergent, failing an invariant or slow."


def render_golden_record(
    golden: dict[str, Any], skipped: list[Skipped], path: str, console: Console | None = None
) -> None:
    """What `golden record` wrote: entries, cases, refused cases, skipped inputs."""
    out = console or stderr_console()
    cases = sum(len(e["cases"]["index"]) for e in golden["entries"])
    out.print(
        cell(
            f"Wrote {path}: {cases} case(s) in {len(golden['entries'])} plan/cohort entr(ies) from "
            f"{golden['reports']} report(s); refused {len(golden['refused'])} case(s) without a clear majority."
        )
    )
    for r in golden["refused"][:MAX_SKIPPED_SHOWN]:
        out.print(
            cell(f"  refused case {r['index']} ({r['workload']}) of cohort {r['cohort']}: {r['reason']}")
        )
    _render_skipped(tuple(skipped), out)
