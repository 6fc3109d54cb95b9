"""Compare many host reports: divergent units, partitions, invariant failures, slow units, coverage.

`summarize` is pure (no I/O, no clock: "now" comes in through `Options`) and deterministic: the same
reports in any order give the same `FleetSummary`, so `compare --json` is byte-identical run to run.
Digests are compared only among units of the same plan (profile sha256, seed) and cohort.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdcscan.fleet.consensus import (
    Signature,
    Tally,
    compared_cases,
    disputes,
    partition_components,
    signature,
    tally,
    undecided_cases,
)
from sdcscan.fleet.coverage import coverage_findings
from sdcscan.fleet.findings import KINDS, Collector, FleetFinding
from sdcscan.fleet.golden import GoldenIndex, check_unit
from sdcscan.fleet.model import HostReport, Invariant, PlanKey, Skipped, UnitRecord, dedupe
from sdcscan.fleet.perf import slow_findings

COMPARE_VERSION = 1
FAILING_KINDS = frozenset({"divergent", "invariant", "slow"})  # these make `compare` exit 1
DEFAULT_SLOW_Z = 3.5
DEFAULT_SLOW_DROP = 0.10
DEFAULT_STALE_S = 60 * 86400.0  # Fleetscanner covers a fleet every 45-60 days


@dataclass(frozen=True)
class Options:
    """What `summarize` needs besides the reports.

    Attributes:
        slow_z: robust z-score (from median and MAD) below which a unit may be slow.
        slow_drop: fraction below the median a unit must also be to be slow (both must hold).
        slow_min_units: fewest samples of a (profile, cohort, workload) needed to judge speed.
        hosts: the hosts that should have reported (enables `missing` and `stale`), or None.
        stale_s: a host whose newest report is older than this is `stale`.
        now: POSIX seconds to measure staleness against; required with `hosts`.
        golden: an index of a golden file (`golden.index_golden`) to judge units against, or None.
    """

    slow_z: float = DEFAULT_SLOW_Z
    slow_drop: float = DEFAULT_SLOW_DROP
    slow_min_units: int = 5
    hosts: tuple[str, ...] | None = None
    stale_s: float = DEFAULT_STALE_S
    now: float | None = None
    golden: GoldenIndex | None = field(default=None, repr=False)


@dataclass(frozen=True)
class FleetSummary:
    """The result of comparing a fleet's reports."""

    findings: tuple[FleetFinding, ...]
    groups: tuple[dict[str, Any], ...]  # minorities of >= 2 units that agree with each other
    skipped: tuple[Skipped, ...]
    counts: dict[str, int]
    options: dict[str, Any]

    @property
    def exit_code(self) -> int:
        """1 when any unit is divergent, invariant or slow; else 0."""
        return 1 if any(f.kind in FAILING_KINDS for f in self.findings) else 0

    def to_dict(self) -> dict[str, Any]:
        """The `compare --json` document."""
        return {
            "compare_version": COMPARE_VERSION,
            "exit_code": self.exit_code,
            "counts": self.counts,
            "options": self.options,
            "findings": [f.to_dict() for f in self.findings],
            "groups": list(self.groups),
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
        }


def summarize(
    reports: Sequence[HostReport], *, options: Options | None = None, skipped: Iterable[Skipped] = ()
) -> FleetSummary:
    """Compare the units of many reports and name what is wrong.

    Args:
        reports: extracted reports (`fleet.reading.read_reports` or `fleet.model.Extractor`), any order.
        options: thresholds, hosts list, reference time, golden.
        skipped: inputs already refused by the reader, listed in the summary.

    Returns:
        Findings sorted by kind, host, unit; partition groups; skipped inputs; counts.

    Raises:
        ValueError: `options.hosts` is given without `options.now`.
    """
    opts = options or Options()
    kept, dups = dedupe(list(reports))
    col = Collector()
    counts = {
        "reports": len(kept),
        "skipped": 0,
        "hosts": len({r.host for r in kept}),
        "units": sum(len(r.units) for r in kept),
        "plans": len({r.plan for r in kept}),
    }
    groups = _all_consensus(kept, col, counts)
    unjudged = _invariants(kept, opts.golden, col)
    _invalid(kept, col)
    slow_findings(kept, col, z=opts.slow_z, drop=opts.slow_drop, min_units=opts.slow_min_units)
    if opts.hosts is not None:
        if opts.now is None:
            raise ValueError("options.now is required with options.hosts")
        counts["unlisted_hosts"] = coverage_findings(
            kept, col, opts.hosts, now=opts.now, stale_s=opts.stale_s
        )
    all_skipped = tuple(sorted([*skipped, *dups], key=lambda s: (s.path, s.reason)))
    counts["skipped"] = len(all_skipped)
    counts["partition_groups"] = len(groups)
    if opts.golden is not None:
        counts["golden_unjudged_units"] = unjudged
    findings = col.findings()
    counts.update({k: sum(1 for f in findings if f.kind == k) for k in KINDS})
    return FleetSummary(findings, tuple(groups), all_skipped, counts, _options_record(opts))


def _all_consensus(kept: list[HostReport], col: Collector, counts: dict[str, int]) -> list[dict[str, Any]]:
    """Run consensus in every (plan, cohort) group, in a fixed order; count; return partition groups."""
    groups: list[dict[str, Any]] = []
    counts.update(comparison_groups=0, cases_compared=0, undecided_cases=0)
    for (plan, cohort), members in sorted(_comparison_groups(kept).items()):
        t = tally((s, len(m)) for s, m in members.items())
        counts["comparison_groups"] += 1
        counts["cases_compared"] += sum(1 for n in t.voters.values() if n >= 2)
        counts["undecided_cases"] += len(t.undecided)
        groups += _consensus(plan, cohort, members, t, col, first_id=len(groups) + 1)
    return groups


def _options_record(opts: Options) -> dict[str, Any]:
    """The options that shaped the result, echoed in the JSON (never the clock: output stays stable)."""
    return {
        "slow_z": opts.slow_z,
        "slow_drop": opts.slow_drop,
        "slow_min_units": opts.slow_min_units,
        "hosts_listed": None if opts.hosts is None else len(set(opts.hosts)),
        "stale_days": round(opts.stale_s / 86400, 3),
        "golden": opts.golden is not None,
    }


Members = dict[Signature, list[tuple[HostReport, UnitRecord]]]


def _comparison_groups(reports: list[HostReport]) -> dict[tuple[PlanKey, str], Members]:
    """(plan, cohort) -> signature -> the (report, unit) pairs that produced it."""
    out: dict[tuple[PlanKey, str], Members] = {}
    for r in reports:
        for u in r.units:
            out.setdefault((r.plan, u.cohort), {}).setdefault(signature(u), []).append((r, u))
    return out


def _consensus(
    plan: PlanKey, cohort: str, members: Members, t: Tally, col: Collector, first_id: int
) -> list[dict[str, Any]]:
    """Add divergent and undecided findings of one comparison group; return its partition groups."""
    where = {"profile_sha256": plan[0], "seed": plan[1], "cohort": cohort}
    minorities: dict[Signature, list[tuple[int, str]]] = {}
    for sig, holders in members.items():
        bad = disputes(sig, t)
        if bad:
            minorities[sig] = bad
        und = undecided_cases(sig, t)
        if und:
            first = min(und)
            ev = {
                **where,
                "undecided_cases": len(und),
                "first_undecided_case": first,
                "workload": _workload_of(holders[0][1], first),
                "voters": t.undecided[first][0],
                "distinct_digests": t.undecided[first][1],
            }
            for r, u in holders:
                col.add(r, u.unit, "undecided", ev)
    groups, group_of = _partitions(where, members, minorities, first_id)
    for sig, bad in minorities.items():
        holders = members[sig]
        i, d = min(bad)
        u0 = holders[0][1]
        ev = {
            **where,
            "disputed_cases": len(bad),
            "cases_compared": compared_cases(sig, t),
            "first_disputed_case": i,
            "workload": _workload_of(u0, i),
            "digest": d,
            "majority_digest": t.majority[i],
            "voters": t.voters[i],
            "workloads": sorted({w for j, _ in bad if (w := _workload_of(u0, j)) is not None}),
            "group": group_of.get(sig),
        }
        for r, u in holders:
            col.add(r, u.unit, "divergent", ev)
    return groups


def _partitions(
    where: dict[str, Any], members: Members, minorities: dict[Signature, list[tuple[int, str]]], first_id: int
) -> tuple[list[dict[str, Any]], dict[Signature, str]]:
    """Minorities of two or more units wrong in the same way, as groups; and each signature's group id."""
    groups: list[dict[str, Any]] = []
    group_of: dict[Signature, str] = {}
    for comp in partition_components(minorities):
        holders = sorted((r.host, u.unit, r.run_id) for sig in comp for r, u in members[sig])
        if len(holders) < 2:
            continue
        gid = f"G{first_id + len(groups)}"
        pairs: dict[tuple[int, str], int] = {}
        for sig in comp:
            for p in minorities[sig]:
                pairs[p] = pairs.get(p, 0) + len(members[sig])
        shared = sorted({i for (i, _), n in pairs.items() if n >= 2})
        groups.append(
            {
                "id": gid,
                **where,
                "units": len(holders),
                "shared_cases": len(shared),
                "first_shared_case": shared[0] if shared else None,
                "members": [{"host": h, "unit": u, "run": run} for h, u, run in holders],
            }
        )
        group_of.update(dict.fromkeys(comp, gid))
    return groups, group_of


def _workload_of(unit: UnitRecord, index: int) -> str | None:
    """The workload a unit ran as case `index`."""
    try:
        return unit.workloads[unit.indices.index(index)]
    except ValueError:
        return None


def _invariants(reports: list[HostReport], golden: GoldenIndex | None, col: Collector) -> int:
    """Add invariant findings (carried by reports, plus golden disagreements); return units the golden
    could not judge."""
    unjudged = 0
    cache: dict[tuple[Any, ...], tuple[int, Invariant | None]] = {}
    for r in reports:
        for u in r.units:
            inv = u.invariant
            if golden is not None:
                key = (r.plan, u.cohort, u.indices, u.digests)
                if key not in cache:  # healthy units share signatures: judge each one once
                    cache[key] = _golden_invariant(u, golden.get((r.plan, u.cohort)))
                judged, bad = cache[key]
                unjudged += not judged
                inv = _merge(inv, bad)
            if inv is not None:
                ev = {
                    "mismatches": inv.mismatches,
                    "first_case": inv.first_case,
                    "workloads": list(inv.workloads),
                    "checks": list(inv.checks),
                }
                col.add(r, u.unit, "invariant", ev)
    return unjudged


def _golden_invariant(unit: UnitRecord, entry: Any) -> tuple[int, Invariant | None]:
    """(cases judged, disagreements as an invariant failure of check `golden`) of one unit."""
    if entry is None:
        return 0, None
    check = check_unit(unit, entry)
    judged, bad = check.cases_judged, check.disagreements
    if not bad:
        return judged, None
    return judged, Invariant(len(bad), bad[0].index, tuple(sorted({d.workload for d in bad})), ("golden",))


def _merge(a: Invariant | None, b: Invariant | None) -> Invariant | None:
    """Combine the invariant failures a report carries with those a golden adds."""
    if a is None or b is None:
        return a or b
    firsts = [x for x in (a.first_case, b.first_case) if x is not None]
    return Invariant(
        a.mismatches + b.mismatches,
        min(firsts) if firsts else None,
        tuple(sorted({*a.workloads, *b.workloads})),
        tuple(sorted({*a.checks, *b.checks})),
    )


def _invalid(reports: list[HostReport], col: Collector) -> None:
    """Add `invalid` findings: per invalid unit of an invalid run, or for the host when none is named."""
    for r in reports:
        if r.verdict != "invalid":
            continue
        bad = [u for u in r.units if u.verdict == "invalid"]
        for u in bad:
            col.add(r, u.unit, "invalid", {"reason": u.reason})
        if not bad:
            col.add(r, None, "invalid", {"reason": "the run was invalid"})
