"""Majority digests per case inside one comparison group (one plan, one cohort), and who disagrees.

Units with identical (case indices, digests) form one *signature*; in a healthy fleet nearly all units
of a cohort share a handful of signatures, so the tally costs O(signatures × cases), not
O(units × cases). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sdcscan.fleet.model import UnitRecord
from sdcscan.verdict import strict_majority

Signature = tuple[tuple[int, ...], tuple["str | None", ...]]  # (case indices, digests)


@dataclass(frozen=True, slots=True)
class Tally:
    """The verdict of a group on each case it ran."""

    majority: dict[int, str]  # case index -> digest held by a strict majority of its voters
    undecided: dict[int, tuple[int, int]]  # case index -> (voters, distinct digests): no strict majority
    voters: dict[int, int]  # case index -> units that produced a digest for it


def signature(unit: UnitRecord) -> Signature:
    """The key under which units that produced exactly the same digests are counted together."""
    return (unit.indices, unit.digests)


def tally(weights: Iterable[tuple[Signature, int]]) -> Tally:
    """Count digests per case over signatures weighted by how many units hold them.

    A digest wins a case only with a strict majority (more than half the voters); otherwise, if the
    voters disagree, the case is undecided and nobody is accused on it.

    Args:
        weights: (signature, number of units holding it).
    """
    counts: dict[int, dict[str, int]] = {}
    for (indices, digests), weight in weights:
        for i, d in zip(indices, digests, strict=True):
            if d is None:
                continue
            c = counts.get(i)
            if c is None:
                counts[i] = {d: weight}
            else:
                c[d] = c.get(d, 0) + weight
    majority: dict[int, str] = {}
    undecided: dict[int, tuple[int, int]] = {}
    voters: dict[int, int] = {}
    for i, c in counts.items():
        if len(c) == 1:
            ((d, n),) = c.items()
            majority[i], voters[i] = d, n
            continue
        voters[i] = sum(c.values())
        best = strict_majority(c)
        if best is not None:
            majority[i] = best
        else:
            undecided[i] = (voters[i], len(c))
    return Tally(majority, undecided, voters)


def disputes(sig: Signature, t: Tally) -> list[tuple[int, str]]:
    """(case index, own digest) for every case where this signature disagrees with a decided majority."""
    majority = t.majority
    return [(i, d) for i, d in zip(*sig, strict=True) if d is not None and majority.get(i, d) != d]


def undecided_cases(sig: Signature, t: Tally) -> list[int]:
    """Case indices this signature voted on that ended without a majority."""
    und = t.undecided
    if not und:
        return []
    return [i for i, d in zip(*sig, strict=True) if d is not None and i in und]


def compared_cases(sig: Signature, t: Tally) -> int:
    """How many of this signature's digests were checked against a majority of at least two units."""
    majority, voters = t.majority, t.voters
    return sum(1 for i, d in zip(*sig, strict=True) if d is not None and i in majority and voters[i] >= 2)


def partition_components(minorities: dict[Signature, list[tuple[int, str]]]) -> list[list[Signature]]:
    """Join signatures that hold the same wrong digest for the same case (union-find).

    A group of units wrong in the same way (one corrupted value spread to several machines) shows up as
    signatures sharing (case, digest) pairs that the majority does not hold.

    Args:
        minorities: each divergent signature's (case index, digest) disputes.

    Returns:
        Connected components, each a sorted list of signatures; singletons included.
    """
    parent: dict[Signature, Signature] = {s: s for s in minorities}

    def find(s: Signature) -> Signature:
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    owner: dict[tuple[int, str], Signature] = {}
    for sig in sorted(minorities, key=_sig_order):
        for pair in minorities[sig]:
            first = owner.setdefault(pair, sig)
            if first is not sig:
                ra, rb = find(first), find(sig)
                if ra != rb:
                    parent[max(ra, rb, key=_sig_order)] = min(ra, rb, key=_sig_order)
    comps: dict[Signature, list[Signature]] = {}
    for sig in minorities:
        comps.setdefault(find(sig), []).append(sig)
    return sorted((sorted(c, key=_sig_order) for c in comps.values()), key=lambda c: _sig_order(c[0]))


def _sig_order(sig: Signature) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """A total order on signatures (None sorts before any digest)."""
    return (sig[0], tuple(d or "" for d in sig[1]))
