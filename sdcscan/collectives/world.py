"""This rank's view of the distributed world, as the worker's workloads see it (`Context.world`).

The worker of each rank joins the world once, after its workloads are prepared (`join`), and hands
the same `World` to every workload. Distributed workloads (`WorkloadSpec.distributed`) run the same
case index on every rank at once: the worker agrees with its peers before each such case
(`agree`), so no rank enters a collective its peers will never join.

Two process groups: `data` carries the checked collectives (NCCL on GPUs, gloo on CPUs); `control`
is always gloo and carries the small things: the agreement, the digest exchange and the
`monitored_barrier` that names a rank that stopped answering. Both are bounded by `timeout_s`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from sdcscan.collectives.env import BARRIER_S, DistEnv, WireFault
from sdcscan.collectives.triage import Node


class WorldBroken(RuntimeError):
    """A collective failed because a rank died or stopped answering; `missing` names who, if known."""

    def __init__(self, message: str, missing: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass
class World:
    """This rank, its peers, the groups and the faults injected on the wire.

    Attributes:
        rank, size: This rank and the world's size (global ranks).
        hosts: The hostname of every rank, indexed by rank.
        timeout_s: Every collective on `data` and `control` gives up after this long.
        device: Where the data collectives' buffers live (this rank's GPU, or the CPU).
        backend: "nccl" or "gloo": the data group's backend.
        data: The group the checked collectives run on (None: the default group).
        control: The gloo group for agreement, digest exchange and monitored_barrier.
        faults: Wire faults injected by `--inject` (every rank holds all of them, so every rank
            can tell where a simulated bad hop lies).
        agree_s, agreements: Seconds spent in (mostly waiting at) the agreements, and how many ran.
        exchange_s, exchanges: Seconds spent exchanging digests, and how many exchanges ran.
    """

    rank: int
    size: int
    hosts: tuple[str, ...]
    timeout_s: float
    device: torch.device
    backend: str
    data: dist.ProcessGroup | None = None
    control: dist.ProcessGroup | None = None
    watch: dist.ProcessGroup | None = (
        None  # gloo, used only by monitored_barrier: a group whose collective timed out is unusable
    )
    faults: tuple[WireFault, ...] = ()
    agree_s: float = 0.0
    agreements: int = 0
    exchange_s: float = 0.0
    exchanges: int = 0
    broken: str | None = None  # why distributed cases stopped (a rank died or stopped answering)
    lost: bool = False  # a rank stopped answering (not this rank's own error)
    missing: tuple[int, ...] = ()  # which ranks, where this rank could tell (rank 0)
    cohorts: tuple[str, ...] = ()  # every rank's cohort, indexed by rank
    _groups: dict[tuple[int, ...], dist.ProcessGroup] = field(default_factory=dict)

    @property
    def one_cohort(self) -> bool:
        """Whether every rank computes the same floats from the same inputs (same device model,
        software and ISA): only then may ranks compare their float results with each other."""
        return len(set(self.cohorts)) <= 1

    @property
    def ring(self) -> tuple[int, ...]:
        """The ring data travels in, for sdcscan's own send/recv ring and for attribution: rank order."""
        return tuple(range(self.size))

    def nodes(self) -> tuple[Node, ...]:
        """Triage's units: one per rank, named with its host, in rank order."""
        return tuple(Node(name=f"rank {r} ({self.hosts[r]})", ranks=(r,)) for r in range(self.size))

    def fault(self, kind: str) -> WireFault | None:
        """The injected wire fault of `kind` ("link" or "update"), if any."""
        return next((f for f in self.faults if f.kind == kind), None)

    def link_corrupts(self, sender: int, receiver: int) -> bool:
        """Whether an injected bad link corrupts data that crosses the hop sender → receiver.

        `--inject R:link` is a bad hop into rank R from its predecessor in the world's ring.
        """
        f = self.fault("link")
        return f is not None and receiver == f.rank and sender == (f.rank - 1) % self.size

    def subgroup(self, ranks: Sequence[int]) -> dist.ProcessGroup:
        """A data group of `ranks` (global, sorted), made once: every rank of the world must call this
        in the same order, members or not (torch's `new_group` contract)."""
        key = tuple(sorted(ranks))
        if key not in self._groups:
            self._groups[key] = dist.new_group(
                list(key), timeout=timedelta(seconds=self.timeout_s), backend=self.backend
            )
        return self._groups[key]


def join(
    env: DistEnv,
    *,
    device: torch.device,
    hostname: str,
    faults: tuple[WireFault, ...],
    timeout_s: float,
    join_timeout_s: float,
    plan: str,
    cohort: str,
) -> World:
    """Join the world through the launcher's store; blocks until every rank joined, at most `join_timeout_s`.

    The default group (gloo) is only the join: the checked collectives run on `data` (NCCL on a GPU)
    and everything small on `control`, both bounded by `timeout_s`. `plan` names this rank's plan
    (profile, seed, device kind): every rank must have the same. `cohort` names what must match for
    two ranks to compute the same floats (device model, software, ISA); ranks may differ in it.

    Raises:
        RuntimeError (torch's DistStoreError, DistNetworkError, ...): the store or a peer could not be
            reached in time, or the ranks' plans differ. The worker reports it as a failed set-up:
            its unit is invalid (exit 3).
    """
    join_timeout = timedelta(seconds=join_timeout_s)
    store = dist.TCPStore(env.master_addr, env.master_port, is_master=False, timeout=join_timeout)
    prefixed = dist.PrefixStore(f"sdcscan/{env.run_id}/{env.restart}/world", store)
    dist.init_process_group(
        "gloo", store=prefixed, rank=env.rank, world_size=env.world_size, timeout=join_timeout
    )
    bound = timedelta(seconds=timeout_s)
    backend = "nccl" if device.type == "cuda" else "gloo"
    control = dist.new_group(timeout=bound, backend="gloo")
    watch = dist.new_group(timeout=bound, backend="gloo")
    data = dist.new_group(timeout=bound, backend=backend) if backend == "nccl" else control
    joined: list[Any] = [None] * env.world_size
    dist.all_gather_object(joined, (hostname, plan, cohort), group=control)
    hosts = [h for h, _, _ in joined]
    plans = {p for _, p, _ in joined}
    if len(plans) > 1:  # lockstep needs every rank to run the same case at the same index
        apart = [r for r, (_, p, _) in enumerate(joined) if p != joined[0][1]]
        raise RuntimeError(
            f"the ranks do not share one plan (profile, seed, device kind): ranks {apart} differ from rank 0; "
            "give every node the same --profile and --seed"
        )
    return World(
        rank=env.rank,
        size=env.world_size,
        hosts=tuple(str(h) for h in hosts),
        cohorts=tuple(str(c) for _, _, c in joined),
        timeout_s=timeout_s,
        device=device,
        backend=backend,
        data=data,
        control=control,
        watch=watch,
        faults=faults,
    )


def agree(world: World, *, go: bool, exchange: bool) -> tuple[bool, bool]:
    """Before a distributed case: run it only if every rank will (go), and whether to exchange digests now.

    One all_reduce (MAX) of two integers on the control group: any rank that will not run the case
    stops distributed cases for all; any rank whose exchange interval has passed asks for one.

    Raises:
        WorldBroken: a peer died or did not answer within the timeout (`name_missing` says who).
    """
    started = time.perf_counter()
    votes = torch.tensor([0 if go else 1, 1 if exchange else 0], dtype=torch.int64)
    try:
        dist.all_reduce(votes, op=dist.ReduceOp.MAX, group=world.control)
    except Exception as err:  # gloo raises RuntimeError subclasses on timeouts and lost peers
        raise broken(world, f"the agreement before a distributed case failed: {_first_line(err)}") from err
    finally:
        world.agree_s += time.perf_counter() - started
        world.agreements += 1
    return votes[0].item() == 0, votes[1].item() == 1


def gather_from_all(world: World, mine: Any) -> list[Any]:
    """Every rank's `mine` (plain, picklable data), in rank order, over the control group: a
    collective call every rank of the world makes."""
    gathered: list[Any] = [None] * world.size
    dist.all_gather_object(gathered, mine, group=world.control)
    return gathered


def exchange(world: World, mine: Any) -> list[Any]:
    """Every rank's `mine` (plain data), in rank order, over the control group (counted as exchange time).

    Raises:
        WorldBroken: as for `agree`.
    """
    started = time.perf_counter()
    try:
        gathered = gather_from_all(world, mine)
    except Exception as err:
        raise broken(world, f"the digest exchange failed: {_first_line(err)}") from err
    finally:
        world.exchange_s += time.perf_counter() - started
        world.exchanges += 1
    return gathered


def broken(world: World, why: str) -> WorldBroken:
    """Mark the world broken after a failed collective, naming the ranks that stopped answering when
    this rank can tell (rank 0 learns who from gloo's monitored_barrier). No distributed case runs
    after this on this rank."""
    missing = name_missing(world)
    if missing is None:
        who = "every rank still answers"
    elif missing:
        who = f"rank(s) {', '.join(map(str, missing))} stopped answering"
    else:
        who = "a peer stopped answering (the cluster report names the rank whose unit could not be judged)"
    world.broken, world.lost, world.missing = f"{why}; {who}", missing is not None, missing or ()
    return WorldBroken(world.broken, missing or ())


def name_missing(world: World) -> tuple[int, ...] | None:
    """None when every rank reaches a monitored barrier within BARRIER_S; else the ranks that did not
    (gloo tells rank 0 who; the others only learn that the barrier failed: ())."""
    try:
        dist.monitored_barrier(group=world.watch, timeout=timedelta(seconds=BARRIER_S), wait_all_ranks=True)
    except Exception as err:
        return tuple(int(r) for r in re.findall(r"\d+", _missing_part(str(err))))
    return None


def _missing_part(message: str) -> str:
    """The list of ranks in gloo's "Ranks 1, 3 failed to pass monitoredBarrier" message, else ''."""
    m = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", message)
    return m.group(1) if m else ""


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]
