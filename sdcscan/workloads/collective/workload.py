"""`collective`: checked collectives on exact data, every rank checking every element it holds.

A case runs one (collective, dtype, size) of the product of the parameters, chosen from the case's
occurrence, so every rank of the world runs the same one (the worker runs distributed cases in
lockstep). The data come from `sdcscan.collectives.exact_data`, whose right result is known bit for
bit whatever algorithm the backend picks; after the collective every rank shares what it saw wrong
over the gloo control group, so every rank computes the same attribution (`attribution`): a wrong
block of a copy (all_gather, broadcast, the send/recv ring) names the hop it crossed; a wrong sum
names a rank when it is wrong alone, and otherwise goes to reductive triage on subgroups
(`triage`). Only the ranks blamed report a mismatch, so the exit code points at them.

Injected faults are simulated where they would strike: `--inject R:link` makes the hop into rank R
(from its predecessor on the ring, rank order) corrupt everything that crosses it. A copied block
travels from its source along the ring, so it arrives wrong wherever its path crossed the hop; a
sum mixes every rank's data on every hop of its group's ring, so the hop corrupts every rank's
result. Either way the receiver flips one bit after the collective and the same check catches it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar, TypeAlias

import torch
import torch.distributed as dist

from sdcscan.collectives import checked
from sdcscan.collectives.attribution import Attribution, HopBlame, RankBlame, Unattributed
from sdcscan.collectives.calls import BROADCAST, COLLECTIVES, algorithm_bytes, bus_bandwidth
from sdcscan.collectives.checked import COPIES, BadHop, Data, Group, Pair, Pick
from sdcscan.collectives.triage import Node, Triage, reductive_triage
from sdcscan.collectives.world import World, gather_from_all
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome
from sdcscan.workloads.base import Context, register
from sdcscan.workloads.collective.spec import DTYPES as DTYPE_NAMES
from sdcscan.workloads.collective.spec import MAX_BLOCK, SPEC
from sdcscan.workloads.workload_spec import WorkloadSpec

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}
CACHE_BYTES = 2**31  # built inputs and expected results kept per rank, least recently used dropped first


# A cache entry's key: collective, dtype, numel, group size, my rank in it, broadcast root, seed, device.
_CacheKey: TypeAlias = tuple[str, str, int, int, int, int | None, int, str]


@register
class Collective:
    """all_gather, all_reduce, reduce_scatter, broadcast and a send/recv ring, checked bit for bit."""

    name: ClassVar[str] = "collective"
    spec: ClassVar[WorkloadSpec] = SPEC

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.p = {**self.spec.defaults, **params}
        for key, known in (("collectives", COLLECTIVES), ("dtypes", tuple(DTYPES))):
            values = self.p[key]
            if not values or any(v not in known for v in values):
                raise ValueError(f"collective: {key} must be a non-empty list of {', '.join(known)}")
        sizes = self.p["sizes"]
        if not sizes or any(
            not isinstance(s, int) or isinstance(s, bool) or not 1 <= s <= MAX_BLOCK for s in sizes
        ):
            raise ValueError(f"collective: sizes must be a non-empty list of integers in 1..{MAX_BLOCK}")
        if not isinstance(self.p["triage_budget"], int) or self.p["triage_budget"] < 1:
            raise ValueError("collective: triage_budget must be an integer >= 1")
        # The collective changes fastest, then the dtype: a short run still checks every collective.
        self.combos = [
            (collective, dtype, size)
            for size in self.p["sizes"]
            for dtype in self.p["dtypes"]
            for collective in self.p["collectives"]
        ]
        self._cache: OrderedDict[_CacheKey, Data] = OrderedDict()
        self._cached_bytes = 0

    def prepare(self, ctx: Context) -> None:
        """Nothing to build yet: the world (and so each rank's data) is known only when cases run."""

    def run(self, ctx: Context, case: Case) -> Outcome:
        world = ctx.world
        if world is None:
            raise RuntimeError(
                "collective needs a distributed run (ctx.world is None): start it with `sdcscan run --distributed`"
            )
        pick = self._pick(case.occurrence, world.size)
        fault = world.fault("link")
        # One draw from the case seed, the same on every rank: either the whole case (triage included)
        # sees the bad hop, or none of it does.
        active = fault is not None and random.Random(f"{case.seed}:link").random() < fault.rate

        def bad(sender: int, receiver: int) -> bool:
            return active and bool(world.link_corrupts(sender, receiver))

        members = tuple(range(world.size))
        group = Group(members, world.data, world.rank)
        # The data seed is the run's, not the case's: every case of one (collective, dtype, size) uses
        # the same data, so after the first the cache holds them and a case costs the collective and
        # the comparison only. Exact data make any corruption visible whatever the values; the run
        # seed is the same on every rank (it fixes the plan they share) and differs between runs.
        seed = ctx.run_seed
        result = self._execute(ctx, world, pick, group, seed, bad, timed=True)
        with ctx.phase("check"):
            seen = gather_from_all(world, result)
            findings = checked.attribute(pick.collective, members, seen)
        triage = None
        if any(isinstance(f, Unattributed) for f in findings):
            with ctx.phase("triage"):
                triage = self._triage(ctx, pick, seed, bad, world)
        blamed = checked.blamed(findings, triage, world.nodes())
        seconds = ctx.phases.get("compute", 0.0)
        nbytes = algorithm_bytes(pick.collective, pick.numel, DTYPES[pick.dtype], world.size)
        attribution = [f.to_dict() for f in findings]
        triage_dict = triage.to_dict() if triage is not None else None
        mismatches = []
        if world.rank in blamed:
            mismatches.append(_mismatch(pick, findings, seen, triage, sorted(blamed)))
        return Outcome(
            status=STATUS_MISMATCH if mismatches else STATUS_OK,
            digest=_digest(pick, world.size, attribution, triage_dict),
            mismatches=mismatches,
            ops=float(nbytes),
            ops_unit="byte",
            detail={
                "collective": pick.collective,
                "dtype": pick.dtype,
                "numel": pick.numel,
                "bytes": nbytes,
                "root": pick.root if pick.collective == BROADCAST else None,
                "algbw_gbps": nbytes / seconds / 1e9 if seconds > 0 else None,
                "busbw_gbps": (
                    bus_bandwidth(pick.collective, nbytes, seconds, world.size) / 1e9 if seconds > 0 else None
                ),
                "attribution": attribution,
                "triage": triage_dict,
                "ring": list(world.ring),
                "backend": world.backend,
                "nccl_algo": os.environ.get("NCCL_ALGO"),  # recorded: it changes the path a block takes
            },
        )

    def _pick(self, occurrence: int, world_size: int) -> Pick:
        """The (collective, dtype, size) of this occurrence, cycling the product; the root moves per lap."""
        collective, dtype, numel = self.combos[occurrence % len(self.combos)]
        return Pick(collective, dtype, numel, root=(occurrence // len(self.combos)) % world_size)

    def _execute(
        self, ctx: Context, world: World, pick: Pick, group: Group, seed: int, bad: BadHop, *, timed: bool
    ) -> list[Pair] | int:
        """Run `pick` on `group` and check it: this rank's wrong pairs (copies) or wrong elements (sums).

        `timed`: time setup, the collective (compute) and the check as the case's phases; triage's
        re-runs are timed as a whole instead, so they do not count as the case's compute.
        """

        def phase(name: str) -> AbstractContextManager[None]:
            return ctx.phase(name) if timed else nullcontext()

        with phase("setup"):
            data = self._data(pick, group, seed, world.device)
            buffers = checked.buffers(pick, group, data)
        with phase("compute"):
            checked.call(pick, group, data, buffers)
        with phase("check"):
            return checked.check(pick, group, data, buffers, bad)

    def _data(self, pick: Pick, group: Group, seed: int, device: torch.device) -> Data:
        """This rank's input and expected result, built once and kept while the cache has room."""
        root = group.root(pick) if pick.collective == BROADCAST else None  # the others do not use it
        key = (pick.collective, pick.dtype, pick.numel, group.size, group.me, root, seed, str(device))
        found = self._cache.get(key)
        if found is not None:
            self._cache.move_to_end(key)
            return found
        data = checked.build(pick, group, seed, device)
        size = _nbytes(data)
        if size <= CACHE_BYTES:
            while self._cached_bytes + size > CACHE_BYTES:
                _, old = self._cache.popitem(last=False)
                self._cached_bytes -= _nbytes(old)
            self._cache[key] = data
            self._cached_bytes += size
        return data

    def _triage(self, ctx: Context, pick: Pick, seed: int, bad: BadHop, world: World) -> Triage:
        """Reductive triage on subgroups; every rank plans the same trials and sees the same answers."""

        def reproduces(nodes: tuple[Node, ...]) -> bool | None:
            ranks = tuple(sorted(r for node in nodes for r in node.ranks))
            handle = world.subgroup(ranks)  # every rank, member or not, in the same order
            outcome = 0  # 0: clean, 1: reproduced, 2: could not run
            if world.rank in ranks:
                sub = Group(ranks, handle, ranks.index(world.rank))
                try:
                    result = self._execute(ctx, world, pick, sub, seed, bad, timed=False)
                    outcome = 1 if result else 0
                except RuntimeError:  # a peer died or timed out: this trial says nothing
                    outcome = 2
            flag = torch.tensor([outcome], dtype=torch.int32)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=world.control)
            answer = int(flag.item())
            return None if answer == 2 else answer == 1

        return reductive_triage(
            world.nodes(), reproduces, budget=self.p["triage_budget"], min_size=2, known_to_reproduce=True
        )


def _nbytes(data: Data) -> int:
    """Memory `data` holds (all_gather's and broadcast's input shares the expected result's storage)."""
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in (data.send, data.expected)
    }
    return sum(storages.values())


def _mismatch(
    pick: Pick, findings: Sequence[Attribution], seen: list[Any], triage: Triage | None, blamed: list[int]
) -> Mismatch:
    """The mismatch a blamed rank reports: what went wrong and who is blamed, in one line."""
    parts = []
    for f in findings:
        if isinstance(f, HopBlame):
            parts.append(
                f"hop {f.hop[0]}→{f.hop[1]} corrupted blocks of sources {_list(f.sources)}"
                f" at receivers {_list(f.receivers)}"
            )
        elif isinstance(f, RankBlame) and pick.collective in COPIES:
            parts.append(f"rank {f.rank} alone holds blocks of sources {_list(f.sources)} wrong")
        elif isinstance(f, RankBlame):
            parts.append(
                f"rank {f.rank} alone holds a wrong sum ({seen[f.rank]} wrong elements): its own reduction"
                " or copy, or the last hop into it"
            )
        elif isinstance(f, Unattributed):
            parts.append(f.reason)
    if triage is not None:
        parts.append(f"triage suspects ranks {_list(blamed)}: {triage.describe()}")
    if pick.collective in COPIES:
        actual = f"{sum(len(part) for part in seen)} blocks wrong"
    else:
        actual = f"{sum(seen)} elements wrong on {sum(1 for c in seen if c)} ranks"
    return Mismatch(
        check="collective", where=f"{pick.label}: {'; '.join(parts)}", expected="bit-exact", actual=actual
    )


def _digest(
    pick: Pick, world_size: int, attribution: list[dict[str, object]], triage: dict[str, object] | None
) -> str:
    """The same on every rank, clean or not: what ran and what every rank concluded."""
    root = pick.root if pick.collective == BROADCAST else None
    facts = [pick.collective, pick.dtype, pick.numel, root, world_size, attribution, triage]
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def _list(ranks: Sequence[int]) -> str:
    return ",".join(map(str, ranks))
