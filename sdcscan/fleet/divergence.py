"""Consensus findings from the engine's outcome rows: divergent units, partition groups, units their own
run convicted, and undecided hosts.

The votes are decided in SQL (`fleet.sql_steps`); this module reads the few rows that name a dispute or an
undecided case, and writes the evidence a person reads: what the unit disputed, against which
reference, and who stood on each side of its first disputed case.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from typing_extensions import TypedDict

from sdcscan.fleet.consensus import HOST, Side, partition_components, why_undecided
from sdcscan.fleet.engine import Rows
from sdcscan.fleet.findings import Collector
from sdcscan.fleet.model import HostReport
from sdcscan.fleet.records import (
    UNIT_COLUMNS,
    Group,
    ReportBook,
    UnitRow,
    own_blame,
    own_run_record,
    where_of,
    with_part,
)
from sdcscan.fleet.sql_steps import (
    CASE_SIDES,
    CASE_TOTALS,
    GOLDEN_JUDGED_UNITS,
    GROUP_CASES_COMPARED,
    GROUP_UNITS,
    HOST_SIDES,
)
from sdcscan.fleet.summary import OWN_RUN_CONSENSUS, Options, PartitionGroup, Where
from sdcscan.outcomes import unit_order

# A finding lists at most this many digests of a case (the most hosts, then the most units first); the
# rest are counted in `sides_omitted`. A case of a million hosts can have a hundred thousand digests.
MAX_SIDES = 8
_UNIT_COLUMNS = ", ".join(f"u.{c.strip()}" for c in UNIT_COLUMNS.split(","))  # of `current_units u`


class Omitted(TypedDict):
    """The digests of a case a finding's `sides` leaves out, and the hosts and units behind them."""

    digests: int
    hosts: int
    units: int


@dataclass
class CaseOutcomes:
    """What the outcome rows say about one unit of one comparison group."""

    report: int
    unit: str
    # (case, digest, digest disputed, basis, workload), by case
    disputes: list[tuple[int, str, str, str, str]] = field(default_factory=list)
    # (case, its host's vote, workload), by case
    undecided: list[tuple[int, str | None, str]] = field(default_factory=list)
    lonely: int = 0  # digests on cases no other unit produced (not compared)
    golden_covered: int = 0  # digests on golden-covered cases, counted where all rows are here


class Divergence:
    """Adds the consensus findings of every comparison group to a collector.

    Args:
        db: the engine, its steps run.  opts: the comparison's options (the golden).
        col: where findings go.  reports: the report records.  groups: comparison group -> (plan, cohort).
    """

    def __init__(
        self, db: Rows, opts: Options, col: Collector, reports: ReportBook, groups: Mapping[int, Group]
    ) -> None:
        self.db, self.opts, self.col, self.reports, self.groups = db, opts, col, reports, groups
        self.units: dict[tuple[int, str], UnitRow] = {}  # (report, unit) -> row, of units findings cite

    def add_findings(self, counts: dict[str, int]) -> list[PartitionGroup]:
        """Divergent units, partition groups, own-run convictions and undecided hosts, group by group in
        (plan, cohort) order; counts of groups and cases. Returns the partition groups."""
        db = self.db
        group_units = dict(db.rows(GROUP_UNITS))
        compared = dict(db.rows(GROUP_CASES_COMPARED))
        counts.update(
            comparison_groups=len(group_units), cases_compared=sum(compared.values()), undecided_cases=0
        )
        if self.opts.golden is not None:
            judged = dict(db.rows(GOLDEN_JUDGED_UNITS))
            counts["golden_unjudged_units"] = sum(n - judged.get(g, 0) for g, n in group_units.items())
        outcomes = self._outcome_units()
        self.units = {(row.report, row.unit): row for row in self._unit_rows("u.convicted")}
        self._load_units({k for members in outcomes.values() for k in members} - set(self.units))
        self.reports.fetch({report for report, _ in self.units})
        sides = Sides(db)
        partitions: list[PartitionGroup] = []
        pending: dict[int, list[tuple[int, CaseOutcomes]]] = {}
        for key in sorted(group_units, key=lambda g: self.groups[g]):
            members = outcomes.get(key, {})
            counts["undecided_cases"] += len({c[0] for u in members.values() for c in u.undecided})
            divergent = sorted(
                (u for u in members.values() if u.disputes),
                key=lambda u: (self.reports[u.report].key, u.unit),
            )
            partitions += self._divergent(key, divergent, sides, first_id=len(partitions) + 1)
            self._own_run(key, members, {(u.report, u.unit) for u in divergent})
            for u in members.values():
                if u.undecided:
                    pending.setdefault(u.report, []).append((key, u))
        for report in sorted(pending, key=lambda i: (self.reports[i].key, self.reports[i].run_id)):
            r = self.reports[report]
            self.col.add(r, None, "undecided", self._undecided_evidence(r, pending[report], sides))
        return partitions

    def _outcome_units(self) -> dict[int, dict[tuple[int, str], CaseOutcomes]]:
        """The outcome rows, gathered per comparison group and unit, cases in order."""
        out: dict[int, dict[tuple[int, str], CaseOutcomes]] = {}
        rows = self.db.rows(
            "SELECT comparison_group, report, unit, case_index, workload, digest, lonely, golden_covered, "
            "host_vote, outcome, against FROM unit_case_outcomes ORDER BY comparison_group, report, unit, case_index"
        )
        for key, report, unit, case, workload, digest, lonely, covered, vote, outcome, against in rows:
            members = out.setdefault(key, {})
            u = members.get((report, unit))
            if u is None:
                u = members[(report, unit)] = CaseOutcomes(report, unit)
            u.lonely += bool(lonely)
            u.golden_covered += bool(covered)
            if outcome == "undecided":
                u.undecided.append((case, vote, workload))
            elif outcome is not None:
                u.disputes.append((case, digest, against, outcome, workload))
        return out

    def _unit_rows(self, where: str) -> list[UnitRow]:
        sql = f"SELECT {_UNIT_COLUMNS} FROM current_units u WHERE {where}"
        return [UnitRow(*row) for row in self.db.rows(sql)]

    def _load_units(self, keys: set[tuple[int, str]]) -> None:
        """The unit rows of (report, unit) pairs."""
        if not keys:
            return
        with self.db.wanted(report for report, _ in keys) as wanted:
            columns = ", ".join(f"u.{c.strip()}" for c in UNIT_COLUMNS.split(","))
            rows = self.db.rows(
                f"SELECT {columns} FROM current_units u JOIN {wanted} w ON u.report = w.report"
            )
        self.units.update(((row[0], row[1]), UnitRow(*row)) for row in rows if (row[0], row[1]) in keys)

    def _divergent(
        self, key: int, divergent: list[CaseOutcomes], sides: Sides, first_id: int
    ) -> list[PartitionGroup]:
        """A `divergent` finding per unit that disputes a reference, or one per host whose every unit of
        the group is divergent with the same digests (they agree with each other, not with the fleet: a
        host-wide cause or fault); returns the partition groups."""
        where = where_of(self.groups[key])
        partitions = self._partitions(key, divergent, first_id)
        group_of = {(m["host"], m["unit"]): g["id"] for g in partitions for m in g["members"]}
        evidence = {
            (u.report, u.unit): self._divergent_evidence(
                key, where, u, sides, group_of.get((self.reports[u.report].key, u.unit))
            )
            for u in divergent
        }
        by_host: dict[int, list[CaseOutcomes]] = {}
        for u in divergent:
            by_host.setdefault(u.report, []).append(u)
        eligible = {
            h: us for h, us in by_host.items() if not any("own_run" in evidence[(h, u.unit)] for u in us)
        }
        whole = self._whole_hosts(key, eligible)
        for report, us in by_host.items():
            r = self.reports[report]
            if report in whole:
                first = evidence[(report, us[0].unit)]
                self.col.add(r, None, "divergent", {**first, "units": [u.unit for u in us]})
                continue
            for u in us:
                self.col.add(r, u.unit, "divergent", evidence[(report, u.unit)])
        return partitions

    def _divergent_evidence(
        self, key: int, where: Where, u: CaseOutcomes, sides: Sides, gid: str | None
    ) -> dict[str, object]:
        """What a divergent unit disputes, against what, and who stood on each side of its first case."""
        case, digest, against, basis, workload = u.disputes[0]
        row = self.units[(u.report, u.unit)]
        hosts_voted, units_voted = sides.voters(key, case)
        # On a case only its own host settles, the sides are that host's units, its vote first.
        shown, omitted = (
            sides.in_host(u.report, key, case, against)
            if basis == HOST
            else sides.of(key, case, (digest, against))
        )
        ev: dict[str, object] = {
            **where,
            "basis": basis,
            "bases": sorted({d[3] for d in u.disputes}),
            "disputed_cases": len(u.disputes),
            "cases_compared": row.digests - u.lonely - len(u.undecided),
            "first_disputed_case": case,
            "workload": workload,
            "digest": digest,
            "reference_digest": against,
            "hosts_voted": hosts_voted,
            "units_voted": units_voted,
            "sides": shown,
            "workloads": sorted({d[4] for d in u.disputes}),
            "group": gid,
        }
        if omitted is not None:
            ev["sides_omitted"] = omitted
        kinds = own_blame(row)
        if kinds:
            ev["own_run"] = own_run_record(self.reports[u.report], row, kinds)
        return with_part(ev, row)

    def _whole_hosts(self, key: int, candidates: dict[int, list[CaseOutcomes]]) -> set[int]:
        """Hosts all of whose units of the group (at least 2) are divergent with the same digests."""
        candidates = {h: us for h, us in candidates.items() if len(us) >= 2}
        if not candidates:
            return set()
        with self.db.wanted(candidates) as wanted:
            held = dict(
                self.db.rows(
                    f"SELECT u.report, COUNT(*) FROM current_units u JOIN {wanted} w ON u.report = w.report "
                    "WHERE u.comparison_group = ? GROUP BY u.report",
                    [key],
                )
            )
        candidates = {h: us for h, us in candidates.items() if held.get(h) == len(us)}
        if not candidates:
            return set()
        sigs = self._signatures(key, [u for us in candidates.values() for u in us])
        return {h for h, us in candidates.items() if len({sigs[(h, u.unit)] for u in us}) == 1}

    def _partitions(self, key: int, divergent: list[CaseOutcomes], first_id: int) -> list[PartitionGroup]:
        """Units wrong in the same way (two or more sharing a wrong digest of a case), as groups numbered
        from `first_id` in the order of their first member (host, unit)."""
        minorities = {k: [(d[0], d[1]) for d in u.disputes] for k, u in enumerate(divergent)}
        comps = [c for c in partition_components(minorities, order=lambda k: k) if len(c) >= 2]
        out: list[PartitionGroup] = []
        for comp in comps:
            members = [(self.reports[divergent[k].report], divergent[k].unit) for k in comp]
            gid = f"G{first_id + len(out)}"
            out.append(
                partition_record(gid, where_of(self.groups[key]), [minorities[k] for k in comp], members)
            )
        return out

    def _signatures(
        self, key: int, units: list[CaseOutcomes]
    ) -> dict[tuple[int, str], tuple[tuple[int, str | None], ...]]:
        """The (case index, digest) pairs of some units of a group."""
        cols: dict[tuple[int, str], list[tuple[int, str | None]]] = {(u.report, u.unit): [] for u in units}
        with self.db.wanted(u.report for u in units) as wanted:
            rows = self.db.rows(
                f"SELECT c.report, c.unit, c.case_index, c.digest FROM cases c JOIN {wanted} w ON c.report = w.report "
                "WHERE c.comparison_group = ?",
                [key],
            )
        for report, unit, case, digest in rows:
            if (report, unit) in cols:
                cols[(report, unit)].append((case, digest))
        return {k: tuple(sorted(v, key=lambda p: (p[0], p[1] or ""))) for k, v in cols.items()}

    def _own_run(
        self, key: int, members: dict[tuple[int, str], CaseOutcomes], reported: set[tuple[int, str]]
    ) -> None:
        """Units the host's own run named failing on consensus, with no dispute found here: still divergent.

        A golden clears such a unit only when it covers every case the unit produced a digest for and the
        unit matches it on all of them (the golden overrules; a host matching it is never divergent).
        """
        entry = (self.opts.golden or {}).get(self.groups[key])
        rows = [
            row
            for k, row in self.units.items()
            if row.convicted and row.comparison_group == key and k not in reported
        ]
        rows.sort(key=lambda row: (self.reports[row.report].key, self.reports[row.report].run_id, row.unit))
        for row in rows:
            kinds = own_blame(row)
            if not set(kinds) & OWN_RUN_CONSENSUS:
                continue
            u = members.get((row.report, row.unit)) or CaseOutcomes(row.report, row.unit)
            if entry and u.golden_covered == row.digests:
                continue  # matched the golden on every case (a dispute would have been reported)
            r = self.reports[row.report]
            ev = {
                **where_of(self.groups[key]),
                "basis": "own run",
                "bases": ["own run"],
                "disputed_cases": 0,
                "cases_compared": row.digests - u.lonely,
                "group": None,
                "own_run": own_run_record(r, row, kinds),
            }
            self.col.add(r, row.unit, "divergent", ev)

    def _undecided_evidence(
        self, r: HostReport, items: list[tuple[int, CaseOutcomes]], sides: Sides
    ) -> dict[str, object]:
        """One host's undecided cases over all its cohorts: how many, its units, the first case's sides,
        why it is undecided, and what would decide it."""
        cases = {(key, c[0]) for key, u in items for c in u.undecided}
        units = sorted({u.unit for _, u in items}, key=unit_order)
        key, u = min(items, key=lambda it: (it[1].undecided[0][0], it[1].unit))
        first, vote, workload = u.undecided[0]
        hosts_voted, units_voted = sides.voters(key, first)
        shown, omitted = sides.of(key, first, (vote,))
        cohort = self.groups[key][1]
        ev: dict[str, object] = {
            **where_of(self.groups[key]),
            "undecided_cases": len(cases),
            "units": units,
            "first_undecided_case": first,
            "workload": workload,
            "host_digest": vote,
            "hosts_voted": hosts_voted,
            "units_voted": units_voted,
            "sides": shown,
            "why": why_undecided(sides.host_counts(key, first), host_abstained=vote is None),
            "next": _undecided_next(r, units, cohort),
        }
        if omitted is not None:
            ev["sides_omitted"] = omitted
        return ev


class Sides:
    """Who stood where on the cases findings cite (fetched once, for all of them)."""

    def __init__(self, db: Rows) -> None:
        self.digests: dict[tuple[int, int], list[tuple[str, int, int]]] = {}
        for key, case, digest, units, hosts in db.rows(CASE_SIDES):
            self.digests.setdefault((key, case), []).append((digest, units, hosts))
        self.totals = {(key, case): (hosts, units) for key, case, hosts, units in db.rows(CASE_TOTALS)}
        self._made: dict[tuple[int, int], tuple[list[Side], list[Side]]] = {}  # case -> (every side, top)
        self.host: dict[tuple[int, int, int], dict[str, int]] = {}
        for report, key, case, digest, units in db.rows(HOST_SIDES):
            self.host.setdefault((report, key, case), {})[digest] = units

    def of(self, key: int, case: int, keep: tuple[str | None, ...] = ()) -> tuple[list[Side], Omitted | None]:
        """Per digest of a case, its host votes and units, most hosts first: the MAX_SIDES largest and the
        digests `keep` names (the finding's own and its reference); and what was left out, or None.

        The sorted sides are made once per case (in a fleet of a million hosts a case may have thousands
        of digests, cited by thousands of findings); the shown list is shared when `keep` adds nothing.
        """
        made = self._made.get((key, case))
        if made is None:
            rows = sorted((-h, -n, d) for d, n, h in self.digests.get((key, case), []))
            every: list[Side] = [{"digest": d, "hosts": -h, "units": -n} for h, n, d in rows]
            made = self._made[(key, case)] = (every, every[:MAX_SIDES])
        every, top = made
        if len(every) <= MAX_SIDES:
            return top, None
        shown_digests = {s["digest"] for s in top}
        extra = [d for d in keep if d is not None and d not in shown_digests]
        shown = (
            top if not extra else [s for s in every if s["digest"] in shown_digests or s["digest"] in extra]
        )
        rest = [s for s in every if s["digest"] not in shown_digests and s["digest"] not in extra]
        omitted: Omitted = {
            "digests": len(rest),
            "hosts": sum(s.get("hosts", 0) for s in rest),
            "units": sum(s["units"] for s in rest),
        }
        return shown, omitted

    def host_counts(self, key: int, case: int) -> dict[str, int]:
        """digest -> hosts that voted for it (digests no host voted for are left out)."""
        return {d: h for d, _, h in self.digests.get((key, case), []) if h}

    def voters(self, key: int, case: int) -> tuple[int, int]:
        """(hosts that voted, units that produced a digest) on a case."""
        return self.totals.get((key, case), (0, 0))

    def in_host(self, report: int, key: int, case: int, vote: str) -> tuple[list[Side], Omitted | None]:
        """One host's units per digest on a case, its vote first (a host has few units: never capped)."""
        counts = self.host.get((report, key, case), {})
        order = sorted(counts, key=lambda d: (d != vote, -counts[d], d))
        return [{"digest": d, "units": counts[d]} for d in order], None


def partition_record(
    gid: str,
    where: Where,
    minorities: list[list[tuple[int, str]]],
    members: list[tuple[HostReport, str]],
) -> PartitionGroup:
    """One partition group: its units' wrong (case, digest) pairs and who they are; a case is shared
    when two or more members hold the same wrong digest for it."""
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
