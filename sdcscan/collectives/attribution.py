"""Who corrupted a collective: one hop of the ring, one rank, or nobody provably.

Pure attribution from plain data, so the rule is tested without torch.distributed: the ring order
and the wrong (source, receiver) pairs of an all_gather, the pairs of an explicit send/recv ring, or
the per-rank hashes of parameters and optimizer state that `train_dp` exchanges. Adept's SDC post
gives the rule: in a ring all-gather, source s's block travels s → next(s) → … → pred(s), stored and
forwarded at every step, so a block corrupted on hop k→next(k) is wrong at every receiver from
next(k) to pred(s), a contiguous arc. A rank that miscopies what it receives into its own output,
but forwards it intact, is wrong alone. Patterns that fit neither are `Unattributed` and left to
triage by subgroups (`sdcscan.collectives.triage`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from sdcscan.errors import UsageError

# What a RankBlame says went wrong on the rank.
CAUSE_COPY = "copy"  # all_gather: it stored blocks wrong that it forwarded intact (or its own block)
CAUSE_UPDATE = "update"  # train_dp: it alone holds a different state after the update
CAUSE_COMPUTE = "compute"  # train_dp: its loss before the all-reduce differs from a replica's


def _and(items: Sequence[str], word: str = "and") -> str:
    """'a', 'a and b', 'a, b and c' (or another joining word)."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}"


def _ranks(ranks: Sequence[int]) -> str:
    """'rank 2' or 'ranks 2, 3 and 4'."""
    return ("rank " if len(ranks) == 1 else "ranks ") + _and([str(r) for r in ranks])


@dataclass(frozen=True, slots=True)
class Clean:
    """Nothing is wrong: every receiver got every block right."""

    def to_dict(self) -> dict[str, object]:
        return {"kind": "clean"}

    def describe(self) -> str:
        return "every receiver got every block right"


@dataclass(frozen=True, slots=True)
class HopBlame:
    """Blocks corrupted in transit on one hop: the sender's send path, the link, or the receiving
    end that stores and forwards them."""

    hop: tuple[int, int]  # (sender, receiver), consecutive on the ring
    sources: tuple[int, ...]  # whose blocks the hop corrupted, in ring order from the hop's receiver
    receivers: tuple[int, ...]  # every rank holding a wrong block, in ring order from the hop's receiver
    # Every wrong pair lies on the arcs after `hop`. A pattern that does not is Unattributed, never a
    # HopBlame with False: the field is there so a reader of the report needs no schema to know it.
    consistent: bool = True
    # The lone receiver when the pattern is one pair (s, pred(s)): that rank miscopying the block
    # fits as well. Always the case on a ring of two, where a hop and a receiver look the same.
    rank_alternative: int | None = None
    # Hashes only, two groups: the hop at fault if `receivers` hold the right state and the rest not.
    other_hop: tuple[int, int] | None = None

    def to_dict(self) -> dict[str, object]:
        return {"kind": "hop", **dataclasses.asdict(self)}

    def describe(self) -> str:
        sender, receiver = self.hop
        blocks = _and([f"source {s}'s" for s in self.sources]) + (
            " block" if len(self.sources) == 1 else " blocks"
        )
        if len(self.receivers) == 1:
            text = f"hop {sender}→{receiver} corrupts blocks in transit: rank {receiver} got {blocks} wrong"
        else:
            text = (
                f"hop {sender}→{receiver} corrupts blocks in transit: every receiver from rank {receiver} on"
                f" along the ring got {blocks} wrong"
            )
        if self.rank_alternative is not None:
            text += f" (rank {self.rank_alternative} alone miscopying what it received looks the same)"
        if self.other_hop is not None:
            text += (
                f"; if {_ranks(self.receivers)} hold the right state instead, hop"
                f" {self.other_hop[0]}→{self.other_hop[1]} is at fault"
            )
        return text


@dataclass(frozen=True, slots=True)
class RankBlame:
    """One rank's own fault: a local copy, its optimizer update, or its forward/backward compute."""

    rank: int
    cause: str  # one of CAUSE_*
    sources: tuple[int, ...] = ()  # copy: whose blocks it holds wrong (its own included), ring order
    loss: float | None = None  # compute: its loss before the all-reduce
    expected_loss: float | None = None  # compute: what its replica recomputation gave
    # update: the hops a hash cannot clear: a block corrupted on the hop into the rank leaves it
    # alone wrong, one corrupted on its own block's first hop leaves it alone right.
    alternative_hops: tuple[tuple[int, int], ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"kind": "rank", **dataclasses.asdict(self)}

    def describe(self) -> str:
        r = self.rank
        if self.cause == CAUSE_UPDATE:
            text = (
                f"rank {r} alone holds different parameters and optimizer state: an error in its own update"
            )
            if self.alternative_hops:
                hops = _and([f"{a}→{b}" for a, b in self.alternative_hops], "or")
                text += f" (or a block corrupted on hop {hops}, which a hash cannot tell apart)"
            return text
        if self.cause == CAUSE_COMPUTE:
            return (
                f"rank {r} computed loss {self.loss!r} before the all-reduce where its replica gave"
                f" {self.expected_loss!r}: a compute error on rank {r} (every rank then holds the same"
                " wrong state, which hashes cannot show)"
            )
        held = [f"source {s}'s" for s in self.sources if s != r] + (["its own"] if r in self.sources else [])
        return (
            f"rank {r} miscopies blocks locally: it alone holds {_and(held)}"
            f" block{'' if len(held) == 1 else 's'} wrong, which no other rank does"
        )


@dataclass(frozen=True, slots=True)
class Unattributed:
    """A pattern no single hop or rank explains: triage by subgroups takes over."""

    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"kind": "unattributed", "reason": self.reason}

    def describe(self) -> str:
        return f"no single hop or rank explains it: {self.reason}"


Attribution: TypeAlias = Clean | HopBlame | RankBlame | Unattributed


@dataclass(frozen=True, slots=True)
class _Ring:
    """The order data travels: order[i] sends to order[i + 1 mod n]."""

    order: tuple[int, ...]
    position: dict[int, int]

    @classmethod
    def of(cls, ring: Sequence[int]) -> _Ring:
        order = tuple(ring)
        if not order or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in order):
            raise UsageError(f"a ring is a non-empty list of rank numbers, got {list(order)!r}")
        if len(set(order)) != len(order):
            raise UsageError(f"a ring names each rank once, got {list(order)!r}")
        return cls(order, {r: i for i, r in enumerate(order)})

    def after(self, rank: int) -> int:
        return self.order[(self.position[rank] + 1) % len(self.order)]

    def before(self, rank: int) -> int:
        return self.order[self.position[rank] - 1]

    def starting_at(self, rank: int) -> tuple[int, ...]:
        i = self.position[rank]
        return self.order[i:] + self.order[:i]

    def check(self, rank: int, role: str) -> None:
        if rank not in self.position:
            raise UsageError(f"{role} {rank!r} is not on the ring {list(self.order)}")


def _by_source(ring: _Ring, wrong: Iterable[tuple[int, int]]) -> dict[int, set[int]]:
    """The wrong receivers of each source, checked against the ring."""
    receivers: dict[int, set[int]] = {}
    for source, receiver in wrong:
        ring.check(source, "source")
        ring.check(receiver, "receiver")
        receivers.setdefault(source, set()).add(receiver)
    return receivers


def _hop_of(ring: _Ring, source: int, receivers: set[int]) -> tuple[int, int] | str:
    """The hop whose arc is exactly `receivers` for this source's block, or why there is none."""
    if source in receivers:
        return f"source {source}'s own block is wrong at rank {source}, where no hop carries it"
    path = ring.starting_at(source)[1:]  # next(s) … pred(s): where its block goes, in order
    first = min(receivers, key=path.index)
    arc = path[path.index(first) :]
    missing = [r for r in arc if r not in receivers]
    if missing:
        return f"source {source}'s block is wrong at rank {first} but right at rank {missing[0]} after it on the ring"
    return (ring.before(first), first)


def blame_all_gather(ring: Sequence[int], wrong: Iterable[tuple[int, int]]) -> Attribution:
    """Name the hop, or the rank, behind the wrong blocks of a ring all_gather.

    Args:
        ring: The ranks in the order data travels (ring[i] sends to ring[i + 1 mod n]), as the
            backend's ring was forced and recorded.
        wrong: The (source, receiver) pairs whose block arrived wrong: receiver checked, bit for
            bit, the block seeded by source. (s, s) means s's own block is wrong in its output.

    Returns:
        Clean when nothing is wrong; HopBlame when every source's wrong receivers are exactly the
        arc after one common hop; RankBlame when one receiver alone holds wrong blocks; otherwise
        Unattributed with the reason.

    Raises:
        UsageError: The ring repeats a rank, or a pair names a rank that is not on it.
    """
    topo = _Ring.of(ring)
    by_source = _by_source(topo, wrong)
    if not by_source:
        return Clean()
    sources = sorted(by_source, key=topo.position.__getitem__)
    hops = [_hop_of(topo, s, by_source[s]) for s in sources]
    reason = next((h for h in hops if isinstance(h, str)), None)
    if reason is None and len(set(hops)) > 1:
        pairs = [
            f"source {s} to hop {h[0]}→{h[1]}"
            for s, h in zip(sources, hops, strict=True)
            if isinstance(h, tuple)
        ]
        reason = f"the blocks point to different hops: {_and(pairs)}"
    if reason is None and isinstance(hops[0], tuple):
        return _hop_blame(topo, hops[0], sources, by_source)
    everyone = {r for rs in by_source.values() for r in rs}
    if len(everyone) == 1:
        return RankBlame(everyone.pop(), CAUSE_COPY, sources=tuple(sources))
    return Unattributed(reason or "")


def _hop_blame(
    ring: _Ring, hop: tuple[int, int], sources: list[int], by_source: dict[int, set[int]]
) -> HopBlame:
    """A HopBlame with its sources and receivers in ring order from the hop's receiver."""
    along = ring.starting_at(hop[1])
    everyone = set().union(*by_source.values())
    receivers = tuple(r for r in along if r in everyone)
    ordered = tuple(s for s in along if s in sources)
    alone = receivers[0] if len(receivers) == 1 else None
    return HopBlame(hop=hop, sources=ordered, receivers=receivers, rank_alternative=alone)


def blame_send_recv_ring(ring: Sequence[int], wrong: Iterable[tuple[int, int]]) -> tuple[HopBlame, ...]:
    """Name the hops of an explicit send/recv ring: each rank sends its block once, to its successor.

    Args:
        ring: The ranks in the order sdcscan fixed: ring[i] sends to ring[i + 1 mod n].
        wrong: The (source, receiver) pairs whose block arrived wrong; receiver must follow source.

    Returns:
        One HopBlame per wrong hop, in ring order (empty when nothing is wrong): the block crossed
        that hop alone, so the blame is direct.

    Raises:
        UsageError: A pair that is not a hop of the ring (a ring of one rank has none).
    """
    topo = _Ring.of(ring)
    pairs = set(wrong)
    for source, receiver in pairs:
        topo.check(source, "source")
        topo.check(receiver, "receiver")
        if len(topo.order) == 1 or receiver != topo.after(source):
            raise UsageError(f"({source}, {receiver}) is not a hop of the send/recv ring {list(topo.order)}")
    hops = [(s, topo.after(s)) for s in topo.order if (s, topo.after(s)) in pairs]
    return tuple(HopBlame(hop=h, sources=(h[0],), receivers=(h[1],)) for h in hops)


@dataclass(frozen=True, slots=True)
class HashVerdict:
    """What one exchange of `train_dp` state hashes (and losses) shows."""

    groups: tuple[tuple[int, ...], ...]  # ranks sharing one hash, largest group first, each in ring order
    findings: tuple[Attribution, ...]  # compute errors first, then what the hashes show; () when all agree

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "groups": self.groups, "findings": [f.to_dict() for f in self.findings]}

    def describe(self) -> str:
        if self.ok:
            return "every rank holds the same parameters and optimizer state"
        return "; ".join(f.describe() for f in self.findings)


def judge_state_hashes(
    hashes: Mapping[int, str],
    *,
    ring: Sequence[int] | None = None,
    losses: Mapping[int, float] | None = None,
    expected_losses: Mapping[int, float] | None = None,
) -> HashVerdict:
    """Judge one `train_dp` exchange: the hash of every rank's parameters and optimizer state.

    One rank apart from an agreeing majority: an update error on that rank (Adept's reading; the
    two hops next to it stay possible and are listed). Several ranks apart: a transport error if
    they are one contiguous arc of the ring (groups of ranks sharing a wrong hash each a stretch of
    it: several blocks corrupted on the same hop). The largest group is taken to hold the right
    state: a hash cannot say which state is right, and any stretch of a ring could be the wrong
    one, so with two groups the other boundary hop is named too. Two ranks that disagree, an even
    split, or all different: Unattributed, nobody is accused on consensus alone.

    Args:
        hashes: Per rank, a digest of the raw bytes of its parameters and optimizer state at one step.
        ring: The all-reduce's ring order (ring[i] sends to ring[i + 1 mod n]); default: ranks sorted.
        losses: Per rank, its loss on its own shard before the all-reduce (shards differ, so losses
            differ between ranks legitimately).
        expected_losses: Per rank (the same ranks as `losses`), the loss a replica recomputation of
            that rank's step gave. Training is deterministic, so they must be equal exactly (two NaNs
            count as equal); a difference is a compute error on the rank, which hashes cannot see
            because the all-reduce spreads the wrong gradient to every rank.

    Raises:
        UsageError: The ring and the hashes name different ranks, or the losses are incomplete.
    """
    topo = _Ring.of(ring if ring is not None else sorted(hashes))
    if set(hashes) != set(topo.order):
        raise UsageError(f"hashes are for ranks {sorted(hashes)} but the ring is {list(topo.order)}")
    by_hash: dict[str, list[int]] = {}
    for rank in topo.order:
        by_hash.setdefault(hashes[rank], []).append(rank)
    groups = sorted((tuple(g) for g in by_hash.values()), key=lambda g: (-len(g), topo.position[g[0]]))
    finding = _judge_groups(topo, groups)
    found = (*_compute_errors(topo, losses, expected_losses), *([finding] if finding else []))
    return HashVerdict(groups=tuple(groups), findings=found)


def _compute_errors(
    ring: _Ring, losses: Mapping[int, float] | None, expected: Mapping[int, float] | None
) -> tuple[RankBlame, ...]:
    """A RankBlame for every rank whose loss is not exactly its replica's."""
    if losses is None and expected is None:
        return ()
    if losses is None or expected is None or not set(losses) == set(expected) <= set(ring.order):
        raise UsageError("pass losses and expected_losses together, for the same ranks of the ring")

    def same(a: float, b: float) -> bool:
        return a == b or (math.isnan(a) and math.isnan(b))

    return tuple(
        RankBlame(r, CAUSE_COMPUTE, loss=losses[r], expected_loss=expected[r])
        for r in ring.order
        if r in losses and not same(losses[r], expected[r])
    )


def _judge_groups(ring: _Ring, groups: list[tuple[int, ...]]) -> Attribution | None:
    """What the hash groups (largest first) show, or None when every rank agrees."""
    n = len(ring.order)
    if len(groups) == 1:
        return None
    if n == 2:
        return Unattributed(
            f"two ranks disagree ({ring.order[0]} and {ring.order[1]}), and with two nobody is accused on consensus alone"
        )
    if len(groups) == n:
        return Unattributed(f"all {n} ranks hold different states")
    if len(groups[0]) == len(groups[1]):
        return _even_split(ring, groups)
    wrong = [r for g in groups[1:] for r in g]
    if len(wrong) == 1:
        r = wrong[0]
        return RankBlame(r, CAUSE_UPDATE, alternative_hops=((ring.before(r), r), (r, ring.after(r))))
    return _transport(ring, groups)


def _stretches(ring: _Ring, members: Sequence[int]) -> list[list[int]]:
    """`members` cut into maximal runs of ring neighbours, each in ring order."""
    inside = set(members)
    starts = [r for r in ring.order if r in inside and ring.before(r) not in inside]
    runs = []
    for start in starts:
        run = [start]
        while ring.after(run[-1]) in inside and ring.after(run[-1]) != start:
            run.append(ring.after(run[-1]))
        runs.append(run)
    return runs


def _even_split(ring: _Ring, groups: list[tuple[int, ...]]) -> Unattributed:
    """No group is larger than every other: say which hops an even split into two arcs points to."""
    if len(groups) == 2 and len(_stretches(ring, groups[0])) == 1:
        hops = [f"{ring.before(g[0])}→{g[0]}" for g in groups]
        sides = " against ".join(", ".join(str(r) for r in g) for g in groups)
        return Unattributed(
            f"the ring splits evenly into two stretches (ranks {sides}): a block corrupted on hop"
            f" {hops[0]} or on hop {hops[1]}, and no majority says which"
        )
    return Unattributed(f"no group of ranks is larger than every other ({len(groups)} different states)")


def _transport(ring: _Ring, groups: list[tuple[int, ...]]) -> Attribution:
    """Several ranks apart from the majority: one hop if they form one arc, each group a stretch of it."""
    wrong = [r for g in groups[1:] for r in g]
    arcs = _stretches(ring, wrong)
    if len(arcs) != 1:
        return Unattributed(
            f"{_ranks(sorted(wrong, key=ring.position.__getitem__))} differ from the majority on"
            f" {len(arcs)} separate stretches of the ring: no single hop reaches them all"
        )
    arc = arcs[0]
    runs = [run for g in groups[1:] for run in _stretches(ring, g)]
    if len(runs) != len(groups) - 1:
        return Unattributed(
            "ranks that share a wrong hash are not neighbours on the ring: no single hop explains it"
        )
    runs.sort(key=lambda run: arc.index(run[0]))
    # Each run ends where one corrupted block's lap ended: just before the rank it started from.
    sources = tuple(ring.after(run[-1]) for run in runs)
    other = (arc[-1], ring.after(arc[-1])) if len(groups) == 2 else None
    return HopBlame(hop=(ring.before(arc[0]), arc[0]), sources=sources, receivers=tuple(arc), other_hop=other)
