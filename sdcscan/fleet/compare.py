"""Compare many host reports: divergent units, partitions, undecided hosts, invariant failures, slow
units, coverage.

`summarize` is pure (no I/O, no clock: "now" comes in through `Options`) and deterministic: the same
reports in any order give the same `FleetSummary`, so `compare --json` is byte-identical run to run.

Before anything is judged the inputs are put in order: repeated files are dropped (`dedupe`), machines
that share a hostname are kept apart (`separate_machines`), and only the newest report of each host and
plan is used (`newest_per_plan`); older ones are listed as `superseded` and add no finding and no vote.
Digests are then compared within each (plan, cohort) by hierarchical consensus (`fleet.consensus`):
units vote within their host, each host casts one vote, a golden overrules both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from typing_extensions import TypedDict

from sdcscan.fleet.calibration import calibration_findings
from sdcscan.fleet.consensus import (
    HOST,
    MIN_HOSTS,
    MIN_LEAD,
    SUPERMAJORITY_DEN,
    SUPERMAJORITY_NUM,
    CohortConsensus,
    Side,
    UnitJudgement,
    comparison_groups,
    partition_components,
    signature,
    why_undecided,
)
from sdcscan.fleet.defaults import DEFAULT_SLOW_DROP, DEFAULT_SLOW_Z, DEFAULT_STALE_S
from sdcscan.fleet.findings import KINDS, Collector, FleetFinding
from sdcscan.fleet.golden import GoldenIndex
from sdcscan.fleet.host_coverage import coverage_findings, future_findings
from sdcscan.fleet.kernel_evidence import fleet_findings, host_findings
from sdcscan.fleet.model import (
    Collision,
    HostReport,
    Skipped,
    Superseded,
    UnitRecord,
    dedupe,
    newest_per_plan,
    separate_machines,
)
from sdcscan.fleet.perf import slow_findings
from sdcscan.outcomes import unit_order
from sdcscan.timefmt import iso_utc

COMPARE_VERSION = 2  # 2: one vote per host, `undecided` per host, `superseded`, `collision`, basis
FAILING_KINDS = frozenset({"divergent", "invariant", "slow"})  # these make `compare` exit 1
UNDECIDED_EXIT = 3  # with fail_on_undecided: a judgement could not be made (never 1: nobody miscomputed)
OWN_RUN_CONSENSUS = frozenset(
    {"divergent", "not_reproducible"}
)  # own-run blame `compare` reports as divergent


class Where(TypedDict):
    """The comparison group (plan and cohort) a divergent unit or a partition group belongs to."""

    profile_sha256: str
    seed: int
    cohort: str


class PartitionMember(TypedDict):
    host: str
    unit: str
    run: str


class PartitionGroup(Where):
    """Units (two or more) wrong in the same way: they share a wrong digest of a case."""

    id: str
    units: int
    hosts: int
    shared_cases: int
    first_shared_case: int | None
    members: list[PartitionMember]


class ReplacingReport(TypedDict):
    """The newer report that replaces a superseded one."""

    path: str
    run: str
    ended_at: str
    verdict: str


class SupersededReport(TypedDict):
    """An older report of a host and plan: it neither votes nor adds a finding."""

    host: str
    path: str
    run: str
    ended_at: str
    verdict: str
    profile_sha256: str
    seed: int
    superseded_by: ReplacingReport


@dataclass(frozen=True)
class Options:
    """What `summarize` needs besides the reports.

    Attributes:
        slow_z: robust z-score (against the healthy peers' median and MAD) a unit must be below to be
            slow, for cohorts of up to 40 units; larger cohorts raise it (Bonferroni, `fleet.perf`).
        slow_drop: fraction below the healthy peers' median a unit must also be (both must hold).
        slow_min_units: fewest samples of a (profile, cohort, workload) needed to judge speed.
        hosts: the hosts that should have reported (enables `missing` and `stale`), or None.
        stale_s: a host whose newest report is older than this is `stale`.
        now: POSIX seconds to measure staleness against; required with `hosts`.
        golden: an index of a golden file (`golden.index_golden`) to judge units against, or None.
        fail_on_undecided: exit UNDECIDED_EXIT (3) when a host is undecided and nothing fails
            (`compare --fail-on undecided`).
    """

    slow_z: float = DEFAULT_SLOW_Z
    slow_drop: float = DEFAULT_SLOW_DROP
    slow_min_units: int = 5
    hosts: tuple[str, ...] | None = None
    stale_s: float = DEFAULT_STALE_S
    now: float | None = None
    golden: GoldenIndex | None = field(default=None, repr=False)
    fail_on_undecided: bool = False


@dataclass(frozen=True)
class FleetSummary:
    """The result of comparing a fleet's reports."""

    findings: tuple[FleetFinding, ...]
    groups: tuple[PartitionGroup, ...]  # units (>= 2) that are wrong in the same way
    skipped: tuple[Skipped, ...]
    counts: dict[str, int]
    options: dict[str, object]  # echoed in the JSON only
    superseded: tuple[SupersededReport, ...] = ()  # older reports of a host and plan: no vote, no finding
    fail_on_undecided: bool = False

    @property
    def exit_code(self) -> int:
        """`exit_code_with(self.fail_on_undecided)`."""
        return self.exit_code_with(self.fail_on_undecided)

    def exit_code_with(self, fail_on_undecided: bool) -> int:
        """The exit code of `compare`.

        1 when any unit is divergent, invariant or slow (judged to miscompute or to be slow); else, with
        `fail_on_undecided` (`--fail-on undecided`), 3 when any host is `undecided`: the fleet could not
        judge a case it ran, which is "could not judge", never "miscomputes"; else 0.
        """
        kinds = {f.kind for f in self.findings}
        if kinds & FAILING_KINDS:
            return 1
        if fail_on_undecided and "undecided" in kinds:
            return UNDECIDED_EXIT
        return 0

    def to_dict(self) -> dict[str, object]:
        """The `compare --json` document."""
        return {
            "compare_version": COMPARE_VERSION,
            "exit_code": self.exit_code,
            "counts": self.counts,
            "options": self.options,
            "findings": [f.to_dict() for f in self.findings],
            "groups": list(self.groups),
            "superseded": list(self.superseded),
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
        }


def summarize(
    reports: Sequence[HostReport], *, options: Options | None = None, skipped: Iterable[Skipped] = ()
) -> FleetSummary:
    """Compare the units of many reports and name what is wrong.

    Args:
        reports: extracted reports (`fleet.reading.read_reports` or `fleet.model.Extractor`), any order.
        options: thresholds, hosts list, reference time, golden, fail_on_undecided.
        skipped: inputs already refused by the reader, listed in the summary.

    Returns:
        Findings sorted by kind, host, unit; partition groups; superseded reports; skipped inputs; counts.

    Raises:
        ValueError: `options.hosts` is given without `options.now`.
    """
    opts = options or Options()
    if opts.hosts is not None and opts.now is None:
        raise ValueError("options.now is required with options.hosts")
    kept, dups = dedupe(list(reports))
    kept, collisions = separate_machines(kept)
    current, superseded = newest_per_plan(kept)
    col = Collector()
    counts = {
        "reports": len(current),
        "superseded": len(superseded),
        "skipped": 0,
        "hosts": len({r.key for r in current}),
        "units": sum(len(r.units) for r in current),
        "plans": len({r.plan for r in current}),
    }
    _collision_findings(collisions, col)
    groups = _all_consensus(current, opts.golden, col, counts)
    _invariants(current, col)
    _invalid(current, col)
    calibration_findings(current, col)
    _sentinel(current, col)
    slow_findings(current, col, z=opts.slow_z, drop=opts.slow_drop, min_units=opts.slow_min_units)
    # Coverage looks at every report of a host, superseded ones too: an older report of the same plan
    # still covers a host whose newest one is dated in the future or tested nothing.
    if opts.hosts is not None and opts.now is not None:
        counts["unlisted_hosts"] = coverage_findings(
            kept, col, opts.hosts, now=opts.now, stale_s=opts.stale_s
        )
    elif opts.now is not None:
        future_findings(kept, col, now=opts.now)
    all_skipped = tuple(sorted([*skipped, *dups], key=lambda s: (s.path, s.reason)))
    counts["skipped"] = len(all_skipped)
    counts["partition_groups"] = len(groups)
    findings = col.findings()
    counts.update({k: sum(1 for f in findings if f.kind == k) for k in KINDS})
    return FleetSummary(
        findings,
        tuple(groups),
        all_skipped,
        counts,
        _options_record(opts),
        tuple(_superseded_record(s) for s in superseded),
        opts.fail_on_undecided,
    )


def _options_record(opts: Options) -> dict[str, object]:
    """The options that shaped the result, echoed in the JSON (never the clock: output stays stable)."""
    return {
        "slow_z": opts.slow_z,
        "slow_drop": opts.slow_drop,
        "slow_min_units": opts.slow_min_units,
        "hosts_listed": None if opts.hosts is None else len(set(opts.hosts)),
        "stale_days": round(opts.stale_s / 86400, 3),
        "golden": opts.golden is not None,
        "fail_on_undecided": opts.fail_on_undecided,
        "consensus": {
            "min_hosts": MIN_HOSTS,
            "winner_more_than": f"{SUPERMAJORITY_NUM}/{SUPERMAJORITY_DEN}",
            "min_lead_hosts": MIN_LEAD,
        },
    }


def _superseded_record(s: Superseded) -> SupersededReport:
    """An older report that does not vote, and the newer one that replaces it."""
    old, new = s.report, s.by
    return {
        "host": old.key,
        "path": old.source,
        "run": old.run_id,
        "ended_at": iso_utc(old.ended_at),
        "verdict": old.verdict,
        "profile_sha256": old.plan[0],
        "seed": old.plan[1],
        "superseded_by": {
            "path": new.source,
            "run": new.run_id,
            "ended_at": iso_utc(new.ended_at),
            "verdict": new.verdict,
        },
    }


def _collision_findings(collisions: list[Collision], col: Collector) -> None:
    """One `collision` finding per hostname that several machines use (they are kept apart)."""
    for c in collisions:
        col.add_host(
            c.hostname,
            None,
            "collision",
            {"hostname": c.hostname, "machines": list(c.machines), "untagged_reports": c.untagged_reports},
        )


# --------------------------------------------------------------------------------------------------
# Consensus findings: divergent units, partition groups, undecided hosts.

Pending = dict[int, tuple[HostReport, list[tuple[CohortConsensus, int, UnitJudgement]]]]


def _all_consensus(
    reports: list[HostReport], golden: GoldenIndex | None, col: Collector, counts: dict[str, int]
) -> list[PartitionGroup]:
    """Run consensus in every (plan, cohort) group, in a fixed order; count; return partition groups."""
    groups: list[PartitionGroup] = []
    counts.update(comparison_groups=0, cases_compared=0, undecided_cases=0)
    if golden is not None:
        counts["golden_unjudged_units"] = 0
    pending: Pending = {}  # report -> its undecided units over all its cohorts: one finding per host
    for (plan, cohort), hosts in sorted(comparison_groups(reports).items()):
        cc = CohortConsensus(hosts, golden.get((plan, cohort)) if golden is not None else None)
        counts["comparison_groups"] += 1
        counts["cases_compared"] += cc.cases_compared()
        if golden is not None:
            counts["golden_unjudged_units"] += cc.golden_unjudged()
        judged = cc.judge()
        counts["undecided_cases"] += len({i for j in judged for i in j.undecided})
        where: Where = {"profile_sha256": plan[0], "seed": plan[1], "cohort": cohort}
        groups += _divergent(where, cc, [j for j in judged if j.disputes], col, first_id=len(groups) + 1)
        _own_run(where, cc, {(j.host, j.unit.unit) for j in judged if j.disputes}, col)
        for j in judged:
            if j.undecided:
                r = hosts[j.host][0]
                pending.setdefault(id(r), (r, []))[1].append((cc, j.host, j))
    for r, items in sorted(pending.values(), key=lambda p: (p[0].key, p[0].run_id)):
        col.add(r, None, "undecided", _undecided_evidence(r, items))
    return groups


def _divergent(
    where: Where, cc: CohortConsensus, judged: list[UnitJudgement], col: Collector, first_id: int
) -> list[PartitionGroup]:
    """Add a `divergent` finding per unit that disputes a reference; return the partition groups.

    A host whose every unit of the group is divergent with the same digests (they agree with each other,
    not with the fleet: a host-wide cause, or a host-wide fault) gets one finding, unit None, naming its
    units, instead of one row per unit.
    """
    groups, group_of = _partitions(where, cc, judged, first_id)
    by_host: dict[int, list[int]] = {}
    for k, j in enumerate(judged):
        by_host.setdefault(j.host, []).append(k)
    for h, ks in by_host.items():
        r, units = cc.hosts[h]
        evidence = [_divergent_evidence(where, cc, judged[k], group_of.get(k)) for k in ks]
        whole_host = len(ks) >= 2 and len(ks) == len(units)
        if (
            whole_host
            and len({signature(judged[k].unit) for k in ks}) == 1
            and not any("own_run" in e for e in evidence)
        ):
            col.add(r, None, "divergent", {**evidence[0], "units": [judged[k].unit.unit for k in ks]})
            continue
        for k, ev in zip(ks, evidence, strict=True):
            col.add(r, judged[k].unit.unit, "divergent", ev)
    return groups


def _divergent_evidence(
    where: Where, cc: CohortConsensus, j: UnitJudgement, group: str | None
) -> dict[str, object]:
    """What a divergent unit disputes, against what, and who stood on each side of its first case."""
    first = j.disputes[0]
    r, u = cc.hosts[j.host][0], j.unit
    if first.basis == HOST:
        # Only its own host settles this case: the sides are that host's units, its vote first (units
        # its own run convicted count here but did not vote, so the vote may hold fewer units).
        in_host = cc.host_sides(j.host, first.index)
        order = sorted(in_host, key=lambda d: (d != first.reference, -in_host[d], d))
        sides: list[Side] = [{"digest": d, "units": in_host[d]} for d in order]
    else:
        sides = cc.sides(first.index)
    hosts_voted, units_voted = cc.voters(first.index)
    ev: dict[str, object] = {
        **where,
        "basis": first.basis,
        "bases": sorted({d.basis for d in j.disputes}),
        "disputed_cases": len(j.disputes),
        "cases_compared": cc.compared(signature(u), len(j.undecided)),
        "first_disputed_case": first.index,
        "workload": _workload_of(u, first.index),
        "digest": first.digest,
        "reference_digest": first.reference,
        "hosts_voted": hosts_voted,
        "units_voted": units_voted,
        "sides": sides,
        "workloads": sorted({w for d in j.disputes if (w := _workload_of(u, d.index)) is not None}),
        "group": group,
    }
    own = r.own_blame(u)
    if own:
        ev["own_run"] = _own_run_record(r, u, own)
    return ev


def _own_run_record(r: HostReport, u: UnitRecord, kinds: tuple[str, ...]) -> dict[str, object]:
    """How the unit's own run named it failing: the run, its finding kinds, reason and re-test class."""
    return {"run": r.run_id, "findings": list(kinds), "reason": u.reason, "retest": u.retest}


def _own_run(where: Where, cc: CohortConsensus, reported: set[tuple[int, str]], col: Collector) -> None:
    """Units the host's own run named failing on consensus, with no dispute found here: still divergent.

    A golden clears such a unit only when it covers every case the unit produced a digest for and the
    unit matches it on all of them (the golden overrules; a host matching it is never divergent).
    """
    golden = cc.golden or {}
    for h, convicted in enumerate(cc.convicted):
        if not convicted:
            continue
        r, units = cc.hosts[h]
        for u in units:
            kinds = r.own_blame(u)
            if not (set(kinds) & OWN_RUN_CONSENSUS) or (h, u.unit) in reported:
                continue
            if golden and all(
                i in golden for i, d in zip(u.indices, u.digests, strict=True) if d is not None
            ):
                continue  # matched the golden on every case (a dispute would have been reported)
            ev = {
                **where,
                "basis": "own run",
                "bases": ["own run"],
                "disputed_cases": 0,
                "cases_compared": cc.compared(signature(u), 0),
                "group": None,
                "own_run": _own_run_record(r, u, kinds),
            }
            col.add(r, u.unit, "divergent", ev)


def _partitions(
    where: Where, cc: CohortConsensus, judged: list[UnitJudgement], first_id: int
) -> tuple[list[PartitionGroup], dict[int, str]]:
    """Units wrong in the same way (two or more sharing a wrong digest of a case), as groups; and the
    group id of each position in `judged` (already in a fixed order)."""
    minorities = {k: [(d.index, d.digest) for d in j.disputes] for k, j in enumerate(judged)}
    groups: list[PartitionGroup] = []
    group_of: dict[int, str] = {}
    for comp in partition_components(minorities, order=lambda k: k):
        if len(comp) < 2:
            continue
        gid = f"G{first_id + len(groups)}"
        members = [(cc.hosts[judged[k].host][0], judged[k].unit.unit) for k in comp]
        groups.append(partition_record(gid, where, [minorities[k] for k in comp], members))
        group_of.update(dict.fromkeys(comp, gid))
    return groups, group_of


def _undecided_evidence(
    r: HostReport, items: list[tuple[CohortConsensus, int, UnitJudgement]]
) -> dict[str, object]:
    """One host's undecided cases over all its cohorts: how many, its units, the first case's sides,
    why it is undecided, and what would decide it."""
    cases = {(id(cc), i) for cc, _, j in items for i in j.undecided}
    units = sorted({j.unit.unit for _, _, j in items}, key=unit_order)
    cc, h, j = min(items, key=lambda it: (it[2].undecided[0], it[2].unit.unit))
    first = j.undecided[0]
    vote = cc.host_vote(h, first)
    return undecided_record(
        r,
        j.unit.cohort,
        cases=len(cases),
        units=units,
        first=(first, _workload_of(j.unit, first), vote),
        voters=cc.voters(first),
        sides=cc.sides(first),
        host_counts=cc.host_counts.get(first, {}),
    )


def undecided_record(
    r: HostReport,
    cohort: str,
    *,
    cases: int,
    units: list[str],
    first: tuple[int, str | None, str | None],
    voters: tuple[int, int],
    sides: list[Side],
    host_counts: Mapping[str, int],
) -> dict[str, object]:
    """The evidence of an undecided host, from `summarize` or the Parquet path (`fleet.warehouse`).

    Args:
        first: (first undecided case, its workload, the host's vote on it or None).
        voters: (hosts, units) that voted on that case.  sides, host_counts: who stood where on it.
    """
    index, workload, vote = first
    return {
        "profile_sha256": r.plan[0],
        "seed": r.plan[1],
        "cohort": cohort,
        "undecided_cases": cases,
        "units": units,
        "first_undecided_case": index,
        "workload": workload,
        "host_digest": vote,
        "hosts_voted": voters[0],
        "units_voted": voters[1],
        "sides": sides,
        "why": why_undecided(host_counts, vote is None),
        "next": _undecided_next(r, units, cohort),
    }


def partition_record(
    gid: str,
    where: Where,
    minorities: list[list[tuple[int, str]]],
    members: list[tuple[HostReport, str]],
) -> PartitionGroup:
    """One partition group, from `summarize` or the Parquet path: its units' wrong (case, digest) pairs
    and who they are; a case is shared when two or more members hold the same wrong digest for it."""
    pairs: dict[tuple[int, str], int] = {}
    for wrong in minorities:
        for p in wrong:
            pairs[p] = pairs.get(p, 0) + 1
    shared = sorted({i for (i, _), n in pairs.items() if n >= 2})
    ordered = sorted(members, key=lambda m: (m[0].key, m[1]))
    return {
        "id": gid,
        **where,
        "units": len(members),
        "hosts": len({r.key for r, _ in ordered}),
        "shared_cases": len(shared),
        "first_shared_case": shared[0] if shared else None,
        "members": [{"host": r.key, "unit": unit, "run": r.run_id} for r, unit in ordered],
    }


def _undecided_next(r: HostReport, units: list[str], cohort: str) -> str:
    """What would decide an undecided host: a golden, more hosts, or a re-run of its units."""
    profile = r.profile or "PROFILE"
    return (
        f"compare with a golden (--golden GOLDEN, from `sdcscan golden record` of known-good hosts), add "
        f"reports of more hosts of cohort {cohort}, or re-run: sdcscan run --profile {profile} "
        f"--seed {r.plan[1]} --units {','.join(units)} (the newer report replaces this one)"
    )


def _workload_of(unit: UnitRecord, index: int) -> str | None:
    """The workload a unit ran as case `index`."""
    try:
        return unit.workloads[unit.indices.index(index)]
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------------
# Findings the reports carry: invariant failures and invalid runs.


def _invariants(reports: list[HostReport], col: Collector) -> None:
    """Add invariant findings carried by reports (ABFT, golden matmul, NaN/Inf, `run --golden`)."""
    for r in reports:
        for u in r.units:
            inv = u.invariant
            if inv is not None:
                ev = {
                    "mismatches": inv.mismatches,
                    "first_case": inv.first_case,
                    "workloads": list(inv.workloads),
                    "checks": list(inv.checks),
                }
                col.add(r, u.unit, "invariant", ev)


def _sentinel(reports: list[HostReport], col: Collector) -> None:
    """Add `sentinel` findings: outlier cores the reports' kernel-log sections name, per host and per CPU
    model (`fleet.sentinel`). Evidence to screen, not a judgement: they do not change the exit code."""
    for r, unit, evidence in host_findings(reports):
        col.add(r, unit, "sentinel", evidence)
    for label, unit, evidence in fleet_findings(reports):
        col.add_host(label, unit, "sentinel", evidence)


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
