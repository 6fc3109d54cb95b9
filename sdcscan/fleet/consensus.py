"""Hierarchical consensus inside one comparison group (one plan, one cohort): units vote within their
host, hosts vote across the fleet, a golden overrules both. Pure: no I/O.

Within a host, units vote as `sdcscan run` does: a case's digest is the strict majority of the host's
units, and a host whose units tie abstains on that case. Units the host's own run named failing
(`HostReport.own_blame`) do not vote. Across hosts each host casts ONE vote per case, whatever its
number of units, so an 8-unit host cannot outvote two 2-unit hosts, and re-runs of one host (only its
newest report is here) cannot stuff the ballot.

Each case gets a reference digest, in this order:
  1. the golden's digest, wherever the golden covers the case (it overrules every vote);
  2. the only digest, when every unit that ran the case agrees (nothing to judge);
  3. the hosts' decision (`fleet_decision`): at least MIN_HOSTS hosts voted, the winner holds MORE than
     two thirds of them and leads the runner-up by at least MIN_LEAD hosts. A single dissenting host
     therefore needs three agreeing hosts against it; two hosts against one (Adept's ring all-gather
     pattern: the wrong value reached two of three machines) is a close split and decides nothing.
Otherwise the case is open: a unit that disagrees with its own host's majority is still divergent (as
its own run said), and units on either side of the split, or on a host whose units tie, are undecided.

Units with identical (case indices, digests) form one *signature*, and hosts with the same units share
one vote; both are found by the identity of the interned tuples (`model.Interner`), so a healthy cohort
costs O(signatures x cases), not O(units x cases). An identity miss only costs time, never changes a
result: every result is computed from the values.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from typing_extensions import NotRequired, TypedDict

from sdcscan.fleet.model import HostReport, PlanKey, UnitRecord
from sdcscan.judgement.evidence import GoldenEntry
from sdcscan.judgement.verdict import strict_majority

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

Signature = tuple[tuple[int, ...], tuple["str | None", ...]]  # (case indices, digests)
Counts = dict[int, dict[str, int]]  # case index -> digest -> votes
HostUnits = list[tuple[HostReport, list[UnitRecord]]]  # each host's units of one comparison group
K = TypeVar("K", bound=Hashable)

MIN_HOSTS = 3  # fewest voting hosts that can settle a disputed case without a golden
MIN_LEAD = 2  # hosts by which the winner must lead the runner-up
# ... and the winner must hold more than SUPERMAJORITY of the voting hosts:
SUPERMAJORITY_NUM, SUPERMAJORITY_DEN = 2, 3

GOLDEN, AGREED, FLEET, HOST = "golden", "agreed", "fleet", "host"  # where a reference digest comes from


class Side(TypedDict):
    """Who stood behind one digest of a case: the hosts that voted for it (absent where the sides are one
    host's units) and the units that produced it."""

    digest: str
    hosts: NotRequired[int]
    units: int


@dataclass(frozen=True, slots=True)
class Tally:
    """The unit-level verdict of a group on each case it ran (what `golden record` keeps)."""

    majority: dict[int, str]  # case index -> digest held by a strict majority of its voters
    undecided: dict[int, tuple[int, int]]  # case index -> (voters, distinct digests): no strict majority
    voters: dict[int, int]  # case index -> units that produced a digest for it


@dataclass(frozen=True, slots=True)
class Dispute:
    """A case on which a unit's digest differs from the case's reference."""

    index: int
    digest: str
    reference: str
    basis: str  # GOLDEN, FLEET or HOST


@dataclass(frozen=True, slots=True)
class UnitJudgement:
    """A unit with something to report: the cases it disputes and the cases left undecided for it."""

    host: int  # position of its host in `CohortConsensus.hosts`
    unit: UnitRecord
    disputes: tuple[Dispute, ...]
    undecided: tuple[int, ...]


def signature(unit: UnitRecord) -> Signature:
    """The key under which units that produced exactly the same digests are counted together."""
    return (unit.indices, unit.digests)


def count_votes(weights: Iterable[tuple[Signature, int]]) -> Counts:
    """Votes per case and digest over signatures weighted by how many voters hold them (None: no vote)."""
    counts: Counts = {}
    for (indices, digests), weight in weights:
        for i, d in zip(indices, digests, strict=True):
            if d is None:
                continue
            c = counts.get(i)
            if c is None:
                counts[i] = {d: weight}
            else:
                c[d] = c.get(d, 0) + weight
    return counts


def tally(weights: Iterable[tuple[Signature, int]]) -> Tally:
    """Strict-majority digests per case over signatures weighted by how many units hold them.

    Args:
        weights: (signature, number of units holding it).
    """
    majority: dict[int, str] = {}
    undecided: dict[int, tuple[int, int]] = {}
    voters: dict[int, int] = {}
    for i, c in count_votes(weights).items():
        voters[i] = sum(c.values())
        best = strict_majority(c)
        if best is not None:
            majority[i] = best
        else:
            undecided[i] = (voters[i], len(c))
    return Tally(majority, undecided, voters)


def host_signature(weights: Sequence[tuple[Signature, int]]) -> Signature:
    """A host's vote: per case the strict-majority digest of its voting units, None where they tie."""
    if len(weights) == 1:
        return weights[0][0]
    counts = count_votes(weights)
    indices = tuple(sorted(counts))
    return indices, tuple(strict_majority(counts[i]) for i in indices)


def _host_vote(voters: Sequence[UnitRecord]) -> Signature:
    """The vote of a host's voting units (no unit: an empty vote)."""
    held: dict[tuple[int, int], int] = {}
    sigs: dict[tuple[int, int], Signature] = {}
    for u in voters:
        k = (id(u.indices), id(u.digests))
        held[k] = held.get(k, 0) + 1
        sigs[k] = (u.indices, u.digests)
    return host_signature([(sigs[k], n) for k, n in held.items()]) if held else ((), ())


def fleet_decision(host_votes: Mapping[str, int]) -> str | None:
    """The digest the hosts' votes settle a disputed case on, or None: too few hosts or a close split.

    Args:
        host_votes: digest -> number of hosts that voted for it.
    """
    voters = sum(host_votes.values())
    if voters < MIN_HOSTS:
        return None
    ranked = sorted(host_votes.items(), key=lambda kv: (-kv[1], kv[0]))
    top, n = ranked[0]
    second = ranked[1][1] if len(ranked) > 1 else 0
    if n * SUPERMAJORITY_DEN > SUPERMAJORITY_NUM * voters and n - second >= MIN_LEAD:
        return top
    return None


def why_undecided(host_votes: Mapping[str, int], host_abstained: bool) -> str:
    """One clause saying why a case could not be decided, for the evidence."""
    voters = sum(host_votes.values())
    if host_abstained and len(host_votes) <= 1:
        return "the host's own units tie and too few other hosts agree to settle it"
    if voters < MIN_HOSTS:
        return f"only {voters} host(s) voted; at least {MIN_HOSTS} are needed"
    top = max(host_votes.values())
    return (
        f"close split: the largest side has {top} of {voters} host(s); more than "
        f"{SUPERMAJORITY_NUM}/{SUPERMAJORITY_DEN} and a lead of {MIN_LEAD} host(s) are needed"
    )


class CohortConsensus:
    """The consensus of one (plan, cohort): host votes, reference digests, and who disputes them.

    Args:
        hosts: (report, its units of this cohort) per host, one report per host, in a fixed order.
        golden: the golden's entry for this plan and cohort, or None.
    """

    def __init__(self, hosts: Sequence[tuple[HostReport, Sequence[UnitRecord]]], golden: GoldenEntry | None):
        self.hosts = hosts
        self.golden = golden
        none: frozenset[str] = frozenset()
        self.convicted = [
            frozenset(u.unit for u in units if r.own_blame(u)) if r.blamed else none for r, units in hosts
        ]
        # signature identity -> (signature, [(host position, unit)])
        self.members: dict[tuple[int, int], tuple[Signature, list[tuple[int, UnitRecord]]]] = {}
        for h, (_, units) in enumerate(hosts):
            for u in units:
                entry = self.members.setdefault((id(u.indices), id(u.digests)), ((u.indices, u.digests), []))
                entry[1].append((h, u))
        self.unit_counts = count_votes((sig, len(holders)) for sig, holders in self.members.values())
        self.votes = self._host_votes()
        distinct: dict[int, tuple[Signature, int]] = {}
        for v in self.votes:
            sig, n = distinct.get(id(v), (v, 0))
            distinct[id(v)] = (sig, n + 1)
        self.host_counts = count_votes(distinct.values())
        self.reference: dict[int, tuple[str, str]] = {}  # case -> (digest, basis)
        self.split: set[int] = set()  # open cases on which voting hosts disagree
        self._decide()
        self._vote_maps: dict[int, dict[int, str | None]] = {}

    def _host_votes(self) -> list[Signature]:
        """Each host's vote; hosts with the same voting units share one (interned) vote."""
        by_units: dict[tuple[tuple[int, int], ...], Signature] = {}
        interned: dict[Signature, Signature] = {}
        votes: list[Signature] = []
        for (_, units), convicted in zip(self.hosts, self.convicted, strict=True):
            voters = [u for u in units if u.unit not in convicted] if convicted else units
            key = tuple(sorted((id(u.indices), id(u.digests)) for u in voters))
            vote = by_units.get(key)
            if vote is None:
                vote = _host_vote(voters)
                vote = interned.setdefault(vote, vote)  # equal votes share one object (and one lookup map)
                by_units[key] = vote
            votes.append(vote)
        return votes

    def _decide(self) -> None:
        """Each case's reference digest (golden, agreed, fleet), or open; open cases split among hosts."""
        golden = self.golden or {}
        for i, digests in self.unit_counts.items():
            g = golden.get(i)
            if g is not None:
                self.reference[i] = (g[0], GOLDEN)
            elif len(digests) == 1:
                self.reference[i] = (next(iter(digests)), AGREED)
            else:
                hv = self.host_counts.get(i, {})
                winner = fleet_decision(hv)
                if winner is not None:
                    self.reference[i] = (winner, FLEET)
                elif len(hv) > 1:
                    self.split.add(i)

    def host_vote(self, host: int, index: int) -> str | None:
        """The digest host `host` voted for case `index` (None: it abstained or did not run it)."""
        vote = self.votes[host]
        m = self._vote_maps.get(id(vote))
        if m is None:
            m = self._vote_maps[id(vote)] = dict(zip(*vote, strict=True))
        return m.get(index)

    def judge(self) -> list[UnitJudgement]:
        """Every unit with a dispute or an undecided case, by signature order, then host, then unit."""
        out: list[UnitJudgement] = []
        ref = self.reference
        for sig, holders in sorted(self.members.values(), key=lambda m: signature_order(m[0])):
            fixed = tuple(
                Dispute(i, d, r[0], r[1])
                for i, d in zip(*sig, strict=True)
                if d is not None and (r := ref.get(i)) is not None and d != r[0]
            )
            open_cases = [(i, d) for i, d in zip(*sig, strict=True) if d is not None and i not in ref]
            if not fixed and not open_cases:
                continue
            for h, u in holders:
                own, undecided = self._open(h, u, open_cases)
                if fixed or own or undecided:
                    disputes = tuple(sorted(fixed + own, key=lambda x: x.index)) if own else fixed
                    out.append(UnitJudgement(h, u, disputes, undecided))
        out.sort(key=lambda j: (signature_order(signature(j.unit)), self.hosts[j.host][0].key, j.unit.unit))
        return out

    def _open(
        self, host: int, unit: UnitRecord, cases: list[tuple[int, str]]
    ) -> tuple[tuple[Dispute, ...], tuple[int, ...]]:
        """Open cases of one unit: disputes with its own host's majority, and the cases left undecided.

        A unit its own run convicted is never undecided: its run already named it.
        """
        disputes: list[Dispute] = []
        undecided: list[int] = []
        for i, d in cases:
            vote = self.host_vote(host, i)
            if vote is not None and d != vote:
                disputes.append(Dispute(i, d, vote, HOST))
            elif unit.unit in self.convicted[host]:
                continue
            elif vote is None or i in self.split:
                undecided.append(i)
        return tuple(disputes), tuple(undecided)

    def sides(self, index: int) -> list[Side]:
        """Who stood where on a case: per digest, the hosts that voted for it and the units that produced
        it, most hosts first."""
        hv = self.host_counts.get(index, {})
        rows = sorted((-hv.get(d, 0), -n, d) for d, n in self.unit_counts.get(index, {}).items())
        return [{"digest": d, "hosts": -h, "units": -n} for h, n, d in rows]

    def host_sides(self, host: int, index: int) -> dict[str, int]:
        """digest -> units of one host that produced it for a case."""
        out: dict[str, int] = {}
        for u in self.hosts[host][1]:
            d = dict(zip(u.indices, u.digests, strict=True)).get(index)
            if d is not None:
                out[d] = out.get(d, 0) + 1
        return out

    def voters(self, index: int) -> tuple[int, int]:
        """(hosts that voted, units that produced a digest) for a case."""
        return sum(self.host_counts.get(index, {}).values()), sum(self.unit_counts.get(index, {}).values())

    def compared(self, sig: Signature, undecided: int) -> int:
        """How many of a signature's digests were checked against a golden or at least one other unit."""
        golden = self.golden or {}
        n = sum(
            1
            for i, d in zip(*sig, strict=True)
            if d is not None and (i in golden or sum(self.unit_counts[i].values()) >= 2)
        )
        return n - undecided

    def cases_compared(self) -> int:
        """Cases of the group judged against a golden or by at least two units."""
        golden = self.golden or {}
        return sum(1 for i, c in self.unit_counts.items() if i in golden or sum(c.values()) >= 2)

    def golden_unjudged(self) -> int:
        """Units the golden cannot judge: no entry for the group, or none of their digests covered."""
        golden = self.golden or {}
        n = 0
        for (indices, digests), holders in self.members.values():
            if not any(d is not None and i in golden for i, d in zip(indices, digests, strict=True)):
                n += len(holders)
        return n


def partition_components(
    minorities: Mapping[K, Iterable[tuple[int, str]]], order: Callable[[K], SupportsRichComparison]
) -> list[list[K]]:
    """Join keys (units, or signatures) that hold the same wrong digest for the same case (union-find).

    A group of units wrong in the same way (one corrupted value spread to several machines) shows up as
    keys sharing (case, digest) pairs that the reference does not hold.

    Args:
        minorities: each divergent key's (case index, wrong digest) disputes.
        order: a total order on keys, so that components and their members come out in a fixed order.

    Returns:
        Connected components, each sorted; singletons included.
    """
    parent: dict[K, K] = {k: k for k in minorities}

    def find(k: K) -> K:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    owner: dict[tuple[int, str], K] = {}
    for key in sorted(minorities, key=order):
        for pair in minorities[key]:
            first = owner.setdefault(pair, key)
            if first != key:
                ra, rb = find(first), find(key)
                if ra != rb:
                    parent[max(ra, rb, key=order)] = min(ra, rb, key=order)
    comps: dict[K, list[K]] = {}
    for key in minorities:
        comps.setdefault(find(key), []).append(key)
    return sorted((sorted(c, key=order) for c in comps.values()), key=lambda c: order(c[0]))


def signature_order(sig: Signature) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """A total order on signatures (None sorts before any digest)."""
    return (sig[0], tuple(d or "" for d in sig[1]))


def comparison_groups(reports: Iterable[HostReport]) -> dict[tuple[PlanKey, str], HostUnits]:
    """(plan, cohort) -> each host's units of that cohort, hosts in the order of `reports`."""
    out: dict[tuple[PlanKey, str], HostUnits] = {}
    for r in reports:
        by_cohort: dict[str, list[UnitRecord]] = {}
        for u in r.units:
            by_cohort.setdefault(u.cohort, []).append(u)
        for cohort, units in by_cohort.items():
            out.setdefault((r.plan, cohort), []).append((r, units))
    return out
