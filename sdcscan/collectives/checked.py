"""The collective workload's check, as every case runs it: what a rank sends and must end with for one
(collective, dtype, size) on a group of ranks, the collective itself, the bit-exact comparison with an
injected bad hop applied where it would strike, and the attribution every rank computes from what all
of them saw.

The data come from `exact_data`, whose right result is known bit for bit whatever algorithm the backend
picks. A copied block (all_gather, broadcast, the send/recv ring) travels the group's ring from its
source, so it arrives wrong wherever its path crossed a bad hop, and its (source, receiver) pair names
the hop (`attribution`); a sum mixes every rank's data on every hop, so a bad hop anywhere corrupts every
rank's result, and a wrong sum names a rank only when that rank alone holds one.

`sdcscan.workloads.collective` runs this on the world and on triage's subgroups; the tests run the same
functions on a gloo world (tests/test_distributed_collectives.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import torch
import torch.distributed as dist

from sdcscan.collectives.attribution import (
    CAUSE_COPY,
    Attribution,
    Clean,
    HopBlame,
    RankBlame,
    Unattributed,
    blame_all_gather,
    blame_send_recv_ring,
)
from sdcscan.collectives.calls import (
    ALL_GATHER,
    ALL_REDUCE,
    BROADCAST,
    REDUCE_SCATTER,
    SEND_RECV,
    all_gather_into,
    flip_one_bit,
    global_rank,
    reduce_scatter,
    send_to_receive_from,
)
from sdcscan.collectives.exact_data import bitwise_equal, block, contribution, expected_sum, wrong_elements
from sdcscan.collectives.triage import Node, Triage

COPIES = (ALL_GATHER, BROADCAST, SEND_RECV)  # the collectives whose blocks have a source to blame

Pair: TypeAlias = tuple[int, int]  # (source, receiver), group ranks: receiver holds source's block wrong
BadHop: TypeAlias = Callable[[int, int], bool]  # (sender, receiver), global ranks -> corrupts what crosses


@dataclass(frozen=True, slots=True)
class Pick:
    """What one case runs; the same on every rank."""

    collective: str
    dtype: str
    numel: int
    root: int  # broadcast's root (a global rank); it moves one rank each lap through the product

    @property
    def label(self) -> str:
        return f"{self.collective} {self.dtype} {self.numel}"


@dataclass(frozen=True, slots=True)
class Group:
    """The ranks a collective runs on: the whole world or a triage subgroup."""

    members: tuple[int, ...]  # global ranks, sorted: the group's ring is this order
    handle: dist.ProcessGroup | None  # the process group (None: the default group)
    me: int  # this process's rank in the group

    @property
    def size(self) -> int:
        return len(self.members)

    def root(self, pick: Pick) -> int:
        """Broadcast's root in this group: the case's root if a member, else the group's rank 0."""
        return self.members.index(pick.root) if pick.root in self.members else 0

    def path_crosses(self, source: int, receiver: int, bad: BadHop) -> bool:
        """Whether `source`'s block, travelling the group's ring to `receiver`, crosses a bad hop."""
        n, at = self.size, source
        while at != receiver:
            if bad(self.members[at], self.members[(at + 1) % n]):
                return True
            at = (at + 1) % n
        return False

    def ring_crosses(self, bad: BadHop) -> bool:
        """Whether any hop of the group's ring is bad (a ring of one has none)."""
        n = self.size
        return n > 1 and any(bad(self.members[i], self.members[(i + 1) % n]) for i in range(n))


@dataclass(frozen=True, slots=True)
class Data:
    """One rank's input and the result it must hold afterwards, for one pick on one group."""

    send: torch.Tensor  # the input (cloned before a collective that writes into it)
    expected: torch.Tensor  # all_gather: every source's block, flat; the others: this rank's result


def build(pick: Pick, group: Group, seed: int, device: torch.device) -> Data:
    """Inputs from `exact_data` (seeded by group ranks) and the result this rank must end with."""
    dtype, n, me, numel = getattr(torch, pick.dtype), group.size, group.me, pick.numel
    if pick.collective == ALL_GATHER:
        expected = torch.cat([block(s, numel, dtype, seed, device=device) for s in range(n)])
        return Data(send=expected[me * numel : (me + 1) * numel], expected=expected)
    if pick.collective == BROADCAST:
        mine = block(group.root(pick), numel, dtype, seed, device=device)
        return Data(send=mine, expected=mine)
    if pick.collective == SEND_RECV:
        return Data(
            send=block(me, numel, dtype, seed, device=device),
            expected=block((me - 1) % n, numel, dtype, seed, device=device),
        )
    total = numel * (n if pick.collective == REDUCE_SCATTER else 1)
    send = contribution(me, n, total, dtype, seed, device=device)
    expected = expected_sum(n, total, dtype, seed, device=device)
    if pick.collective == REDUCE_SCATTER:
        expected = expected[me * numel : (me + 1) * numel].clone()
    return Data(send=send, expected=expected)


def buffers(pick: Pick, group: Group, data: Data) -> tuple[torch.Tensor, torch.Tensor]:
    """(what is sent, where the result lands), fresh for each call so no run sees another's result."""
    if pick.collective == ALL_REDUCE:  # in place
        result = data.send.clone()
        return result, result
    if pick.collective == BROADCAST:  # in place: the root sends its buffer, the others receive into theirs
        result = data.send.clone() if group.me == group.root(pick) else torch.empty_like(data.send)
        return result, result
    return data.send, torch.empty_like(data.expected)


def call(pick: Pick, group: Group, data: Data, held: tuple[torch.Tensor, torch.Tensor]) -> None:
    """The collective itself, and nothing else: this is what the case times."""
    send, result = held
    handle, collective = group.handle, pick.collective
    if collective == ALL_GATHER:
        all_gather_into(result, send, handle)
    elif collective == ALL_REDUCE:
        dist.all_reduce(result, op=dist.ReduceOp.SUM, group=handle)
    elif collective == REDUCE_SCATTER:
        reduce_scatter(result, send, handle)
    elif collective == BROADCAST:
        dist.broadcast(result, src=global_rank(handle, group.root(pick)), group=handle)
    elif group.size > 1:  # SEND_RECV
        send_to_receive_from(send, result, (group.me + 1) % group.size, (group.me - 1) % group.size, handle)
    else:
        result.copy_(send)


def check(
    pick: Pick, group: Group, data: Data, held: tuple[torch.Tensor, torch.Tensor], bad: BadHop
) -> list[Pair] | int:
    """Corrupt what an injected bad hop would have, then compare bit for bit with the expected result:
    this rank's wrong (source, receiver) pairs for a copy, its count of wrong elements for a sum."""
    result, me, n, numel = held[1], group.me, group.size, pick.numel
    if pick.collective not in COPIES:
        if group.ring_crosses(bad):
            flip_one_bit(result)
        return wrong_elements(result, data.expected)
    if pick.collective == ALL_GATHER:
        received = [(s, s * numel) for s in range(n)]
    else:  # one block: from the root, or from the ring predecessor
        received = [(group.root(pick) if pick.collective == BROADCAST else (me - 1) % n, 0)]
    wrong = []
    for source, start in received:
        got = result[start : start + numel]
        if group.path_crosses(source, me, bad):
            flip_one_bit(got)
        if not bitwise_equal(got, data.expected[start : start + numel]):
            wrong.append((source, me))
    return wrong


def attribute(collective: str, ring: Sequence[int], seen: list[Any]) -> tuple[Attribution, ...]:
    """What every rank's results show: the same on every rank, since every rank sees them all."""
    if collective in COPIES:
        pairs = sorted({(int(s), int(r)) for part in seen for s, r in part})
        if collective == SEND_RECV:
            return blame_send_recv_ring(ring, pairs) or (Clean(),)
        return (blame_all_gather(ring, pairs),)
    wrong = [r for r, count in enumerate(seen) if count]
    if not wrong:
        return (Clean(),)
    if len(wrong) == 1:
        return (RankBlame(wrong[0], CAUSE_COPY, sources=(wrong[0],)),)
    return (
        Unattributed(
            f"ranks {', '.join(map(str, wrong))} hold wrong sums: every rank's data is in every element,"
            " so no single hop or rank can be named"
        ),
    )


def blamed(findings: Sequence[Attribution], triage: Triage | None, nodes: Sequence[Node]) -> set[int]:
    """The ranks that report a mismatch: a hop's receiver, a blamed rank, or every triage suspect."""
    blamed: set[int] = set()
    for f in findings:
        if isinstance(f, HopBlame):
            blamed.add(f.hop[1])
        elif isinstance(f, RankBlame):
            blamed.add(f.rank)
    if triage is not None:
        ranks_of = {node.name: node.ranks for node in nodes}
        blamed.update(r for name in triage.suspects for r in ranks_of[name])
    return blamed
