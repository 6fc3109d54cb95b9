"""Human output of `compare` and `golden record`: counts, then findings, on stderr (rich lives here only).

Host names, unit ids, reasons, workloads and paths come from report files of other hosts: every one
is shown literally (`render.console.cell`), never read as markup or sent to the terminal raw.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from sdcscan.fleet.findings import KINDS, FleetFinding
from sdcscan.fleet.golden import Golden
from sdcscan.fleet.model import Skipped
from sdcscan.fleet.summary import FleetSummary, SupersededReport
from sdcscan.render.console import cell, stderr_console

MAX_ROWS = 200  # beyond this a table is not read by people; --json has everything
MAX_SKIPPED_SHOWN = 10
MAX_NEXT_SHOWN = 10  # "next" lines of undecided hosts
STYLE = {
    "divergent": "bold red",
    "invariant": "bold red",
    "slow": "yellow",
    "undecided": "magenta",
    "invalid": "red",
    "calibration": "yellow",
    "sentinel": "yellow",
    "collision": "yellow",
    "stale": "cyan",
    "missing": "cyan",
}


def describe(f: FleetFinding) -> str:
    """One sentence of evidence for a finding, ending with the physical part where the report named it."""
    part = f.evidence.get("part")
    text = _evidence(f)
    return f"{text}; the part: {part}" if part else text


def _evidence(f: FleetFinding) -> str:
    e = f.evidence
    if f.kind == "divergent":
        return _divergent(e)
    if f.kind == "invariant":
        first = "" if e["first_case"] is None else f", first case {e['first_case']}"
        checks = ", ".join(e["checks"]) or "invariant"
        return f"{e['mismatches']} invariant failure(s) ({checks}){first}"
    if f.kind == "slow":
        if f.unit is None:  # a host roll-up (sdcscan.fleet.perf): most of its units are slow
            share = "all" if e["units_slow"] == e["units_judged"] else f"{e['units_slow']} of"
            return (
                f"{share} {e['units_judged']} units are slow, typically {e['drop']:.0%} below their cohort's "
                f"healthy median ({e['drop_min']:.0%} to {e['drop_max']:.0%}): "
                + ", ".join(u["unit"] for u in e["units"])
            )
        c = e.get("combined")
        if c is not None and not e["slow_workloads"]:  # found by the combined score alone (fleet.slow)
            recent = f" ({c['recent_loss']:.0%} over them)" if c["reports"] > 1 and "recent_loss" in c else ""
            tail = f", {c['tail_cut']} by the cohort's own tail" if "tail_cut" in c else ""
            return (
                f"its workloads {c['loss']:.0%} below their healthy medians on average in its newest report; "
                f"over {c['reports']} report(s){recent} its combined z is {c['z']} (limit -{c['z_threshold']} "
                f"among {c['units']} units{tail}); {e['workload']}: {e['value']:.4g} {e['value_unit']}"
            )
        z = "healthy peers agree exactly" if e["z"] is None else f"z {e['z']}, limit -{e['z_threshold']}"
        worst = (e["workload"], e["measure"])
        others = [
            f"{w['workload']} {-w['drop']:+.0%}"
            for w in e["workloads"]
            if (w["workload"], w["measure"]) != worst
        ]
        return (
            f"slow on {len(e['slow_workloads'])} of {e['judged_workloads']} workload(s); {e['workload']}: "
            f"{e['value']:.4g} {e['value_unit']}, {e['drop']:.0%} below the healthy median "
            f"{e['healthy_median']:.4g} ({e['healthy_peers']} of {e['peers']} peers, {z})"
            + (f"; others {', '.join(others)}" if others else "")
        )
    if f.kind == "undecided":
        return _undecided(e)
    if f.kind == "collision":
        untagged = e["untagged_reports"]
        rest = f"; {untagged} report(s) without a machine id kept under the bare name" if untagged else ""
        return (
            f"{len(e['machines'])} machines use this hostname, kept apart: {', '.join(e['machines'])}{rest}"
        )
    if f.kind == "invalid":
        return f"run {e['run']} was invalid: {e['reason']}"
    if f.kind == "stale":
        return (
            f"newest report {e['newest_report_at']}, {e['age_days']} days old (limit {e['stale_after_days']})"
        )
    return str(e.get("reason", ""))


BASIS_WORDS = {"fleet": "the fleet's digest", "golden": "the golden", "host": "the other units of its host"}


def _divergent(e: dict[str, Any]) -> str:
    """A divergent unit: what it disputes and against what, who stood on each side, its own run."""
    own = e.get("own_run")
    own_text = ""
    if own is not None:
        retest = f", re-test {own['retest']}" if own.get("retest") else ""
        own_text = f"its own run {own['run']} named it failing ({', '.join(own['findings'])}{retest})"
    if e["basis"] == "own run":
        return own_text
    group = f"; wrong like the other units of group {e['group']}" if e.get("group") else ""
    if e.get("units"):  # a whole host, rolled up: its units agree with each other, not with the fleet
        group = ""
    text = (
        f"{e['disputed_cases']} of {e['cases_compared']} case(s) differ from {BASIS_WORDS[e['basis']]}, "
        f"first case {e['first_disputed_case']} ({e['workload']}): {_sides(e)}; "
        f"workloads {', '.join(e['workloads'])}{group}"
    )
    if e.get("units"):
        text = f"all {len(e['units'])} units ({', '.join(e['units'])}) agree with each other, not with the fleet: {text}"
    return f"{text}; {own_text}" if own_text else text


def _sides(e: dict[str, Any]) -> str:
    """Who held the reference digest and who held this one, in hosts and units."""
    by_digest = {s["digest"]: s for s in e["sides"]}
    ref, mine = by_digest.get(e["reference_digest"]), by_digest.get(e["digest"], {"hosts": 0, "units": 0})
    if e["basis"] == "host":
        return (
            f"{ref['units'] if ref else 0} unit(s) of its host hold the reference, {mine['units']} its digest"
        )
    against = f"{mine['hosts']} host(s), {mine['units']} unit(s) hold its digest"
    if ref is None:  # only the golden holds the reference
        return f"{against} ({e['hosts_voted']} host(s) voted)"
    return f"{ref['hosts']} host(s), {ref['units']} unit(s) hold the reference; {against}"


def _undecided(e: dict[str, Any]) -> str:
    """One host's undecided cases: how many, its units, the split of the first case, and why."""
    sides = " vs ".join(
        f"{s['hosts']} host(s)/{s['units']} unit(s){' (this host)' if s['digest'] == e['host_digest'] else ''}"
        for s in e["sides"]
    )
    more = e.get("sides_omitted")
    if more:
        sides += f" vs {more['digests']} other digest(s): {more['hosts']} host(s)/{more['units']} unit(s)"
    tie = "; its own units tie" if e["host_digest"] is None else ""
    return (
        f"{e['undecided_cases']} case(s) undecided on {', '.join(e['units'])}, first case "
        f"{e['first_undecided_case']} ({e['workload']}): {sides}{tie}; {e['why']}; nobody accused"
    )


def render_compare(summary: FleetSummary, console: Console | None = None) -> None:
    """Counts, the findings table, skipped inputs and what to do next."""
    out = console or stderr_console()
    c = summary.counts
    out.print(
        f"Compared {c['reports']} report(s) from {c['hosts']} host(s), {c['units']} unit(s): "
        f"{c['comparison_groups']} comparison group(s), {c['cases_compared']} case(s) compared, "
        f"{c['undecided_cases']} undecided."
    )
    kinds = [k for k in KINDS if c.get(k)]
    out.print("Findings: " + (", ".join(f"{c[k]} {k}" for k in kinds) if kinds else "none."))
    if summary.findings:
        out.print(_table(summary.findings))
    for g in summary.groups:
        out.print(
            cell(
                f"Group {g['id']}: {g['units']} units on {g['hosts']} host(s) of cohort {g['cohort']} agree "
                f"with each other but not the reference on {g['shared_cases']} case(s), first case "
                f"{g['first_shared_case']}."
            )
        )
    _render_superseded(summary.superseded, out)
    _render_skipped(summary.skipped, out)
    _render_undecided_next(summary.findings, out)
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


def _render_superseded(superseded: tuple[SupersededReport, ...], out: Console) -> None:
    """Older reports replaced by a newer one of the same host and plan: one line each."""
    if not superseded:
        return
    out.print(f"Superseded {len(superseded)} older report(s) (only a host's newest report of a plan votes):")
    for s in superseded[:MAX_SKIPPED_SHOWN]:
        by = s["superseded_by"]
        out.print(
            cell(
                f"  {s['host']}: {s['path']} (run {s['run']}, {s['verdict']}, {s['ended_at']}) replaced by "
                f"{by['path']} (run {by['run']}, {by['verdict']}, {by['ended_at']})"
            )
        )
    if len(superseded) > MAX_SKIPPED_SHOWN:
        out.print(f"  … and {len(superseded) - MAX_SKIPPED_SHOWN} more (--json lists them all)")


def _render_undecided_next(findings: tuple[FleetFinding, ...], out: Console) -> None:
    """What would decide each undecided host (a golden, more hosts, or a re-run with its seed)."""
    undecided = [f for f in findings if f.kind == "undecided"]
    if not undecided:
        return
    out.print(
        f"Undecided on {len(undecided)} host(s): nobody is accused until a golden or more hosts decide."
    )
    for f in undecided[:MAX_NEXT_SHOWN]:
        out.print(cell(f"  Next for {f.host}: {f.evidence['next']}"))
    if len(undecided) > MAX_NEXT_SHOWN:
        out.print(f"  … and {len(undecided) - MAX_NEXT_SHOWN} more (--json has each host's next step)")


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
    if "undecided" in kinds:
        return "Next: decide the undecided hosts as listed above; no unit is judged wrong until then."
    if "sentinel" in kinds:
        return (
            "Next: screen the cores the kernel logs point at (sdcscan run --units UNIT -p burnin on their "
            "hosts); a core named on many hosts of one model points at the model or at scheduling."
        )
    if kinds & {"missing", "stale", "invalid"}:
        return "Next: run sdcscan on the missing, stale or invalid hosts."
    return "No unit is divergent, failing an invariant or slow."


def render_golden_record(
    golden: Golden, skipped: list[Skipped], path: str, console: Console | None = None
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


CSV_COLUMNS = ("host", "unit", "kind", "evidence", "part", "rerun", "run")


def findings_csv(summary: FleetSummary) -> str:
    """Every finding as a CSV row (`compare --csv`): for a spreadsheet or a ticket system to sort and
    filter; the evidence in the words of compare's table."""
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for f in summary.findings:
        e = f.evidence
        writer.writerow([f.host, f.unit or "", f.kind, _evidence(f), e.get("part") or "", e.get("rerun") or "",
                         e.get("run") or ""])  # fmt: skip
    return out.getvalue()
