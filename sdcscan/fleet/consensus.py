"""The fleet's vote: its constants and words. Hierarchical consensus inside one comparison group (one
plan, one cohort): units vote within their host, hosts vote across the fleet, a golden overrules both.
The rule is computed in SQL (`fleet.sql_steps`), once; this module holds what the SQL and the evidence share.

Within a host, units vote as `sdcscan run` does: a case's digest is the strict majority of the host's
units, and a host whose units tie abstains on that case. Units the host's own run named failing
(`HostReport.own_blame`) do not vote. Across hosts each host casts ONE vote per case, whatever its
number of units, so an 8-unit host cannot outvote two 2-unit hosts, and re-runs of one host (only its
newest report is here) cannot stuff the ballot.

Each case gets a reference digest, in this order:
  1. the golden's digest, wherever the golden covers the case (it overrules every vote);
  2. the only digest, when every unit that ran the case agrees (nothing to judge);
  3. the hosts' decision: at least MIN_HOSTS hosts voted, the winner holds MORE than two thirds of them
     and leads the runner-up by at least MIN_LEAD hosts. A single dissenting host therefore needs three
     agreeing hosts against it; two hosts against one (Adept's ring all-gather pattern: the wrong value
     reached two of three machines) is a close split and decides nothing.
Otherwise the case is open: a unit that disagrees with its own host's majority is still divergent (as
its own run said), unless every other host that voted holds the unit's digest. Then the host's
majority is what the fleet disputes, and with too few hosts to decide, the case is undecided: a host
whose majority is wrong must not get its healthy units accused in a cohort of 2 or 3 hosts. Units on
either side of a split, or on a host whose units tie, are undecided.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

from typing_extensions import NotRequired, TypedDict

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

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
