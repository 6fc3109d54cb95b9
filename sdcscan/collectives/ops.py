"""Checked collectives: run one collective on exact data and say, bit for bit, what arrived wrong.

The `collective` workload (issue 13, item 3) runs all_gather, all_reduce (sum), reduce_scatter,
broadcast and an explicit send/recv ring on data from `exact_data`, whose correct result is known
whatever algorithm the backend picks. Every rank checks every element it holds; where the source
of a block is known (all_gather, broadcast, the ring) it reports wrong (source, receiver) pairs,
which `attribution` turns into a hop or a rank; for the sums it reports how many elements are wrong.

These functions run on any process group the caller has initialised (gloo on CPU, NCCL on GPU) and
never initialise one, read the environment or touch the clock. `rank` and `world` are this
process's rank in `group` and the group's size (the default group when `group` is None); they are
checked against the group, so a caller that confuses global and group ranks gets a UsageError, not a
wrong blame. Ring orders, sources and receivers are group ranks too.

Nothing here waits forever: every collective and every `Work.wait()` is bounded by the timeout the
caller passed to `init_process_group` (or `new_group`). gloo raises from the blocked call when it
passes; NCCL's watchdog aborts the communicator (async error handling, on by default since torch
2.2). On NCCL a `wait()` only orders the current stream; the CPU blocks at the comparison, which
reads a result back.

Fault injection (`corrupt`): the receiver flips one bit of what it received, after the collective
and before the check, so the same code runs with and without a fault and the check is what fires.

Bus bandwidth follows nccl-tests' doc/PERFORMANCE.md: algbw = S / t, busbw = algbw × a factor that
makes the number comparable with the hardware's peak whatever the number of ranks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

import torch
import torch.distributed as dist

from sdcscan.collectives.exact_data import (
    SUPPORTED_DTYPES,
    bitwise_equal,
    block,
    contribution,
    expected_sum,
    wrong_elements,
)
from sdcscan.errors import UsageError

ALL_REDUCE = "all_reduce"
ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
BROADCAST = "broadcast"
SEND_RECV = "send_recv"

# nccl-tests doc/PERFORMANCE.md, "Summary": busbw = algbw × factor(n) for n ranks. all_reduce moves
# each element 2(n-1) times over n links; all_gather and reduce_scatter do half of that; broadcast
# and send/recv are bound by one sender's link.
_BUS_FACTOR: dict[str, Callable[[int], float]] = {
    ALL_REDUCE: lambda n: 2 * (n - 1) / n,
    ALL_GATHER: lambda n: (n - 1) / n,
    REDUCE_SCATTER: lambda n: (n - 1) / n,
    BROADCAST: lambda n: 1.0,
    SEND_RECV: lambda n: 1.0,
}
COLLECTIVES: tuple[str, ...] = tuple(_BUS_FACTOR)

Pair: TypeAlias = tuple[int, int]  # (source, receiver): receiver holds source's block wrong
CorruptPair: TypeAlias = Callable[[int, int], bool]  # (source, receiver) -> flip a bit there?
CorruptRank: TypeAlias = Callable[[int], bool]  # receiver -> flip a bit in its result?

_BITS_OF_SIZE = {2: torch.int16, 4: torch.int32}


def ring_send_recv(
    rank: int,
    world: int,
    ring: Sequence[int],
    numel: int,
    dtype: torch.dtype,
    seed: int,
    *,
    device: torch.device | str,
    corrupt: CorruptPair | None = None,
    group: dist.ProcessGroup | None = None,
) -> list[Pair]:
    """One lap of the explicit ring: send `block(rank)` to the successor, check the predecessor's.

    The topology is sdcscan's, not the backend's, so a wrong block names its hop exactly
    (`attribution.blame_send_recv_ring`). The send and the receive are posted together with
    `batch_isend_irecv`, so no rank waits for another to start: a ring cannot deadlock.

    Args:
        rank, world: This rank in `group`, and the group's size.
        ring: Every rank of the group once, in the order data travels: ring[i] sends to ring[i + 1 mod n].
        numel: Elements per block (1-D).
        dtype: One of `exact_data.SUPPORTED_DTYPES`.
        seed: The case's seed, the same on every rank.
        device: Where the buffers live (the group's device: CPU for gloo, this rank's GPU for NCCL).
        corrupt: Fault injection: when corrupt(predecessor, rank) is true, one bit of the received
            block is flipped before the check.
        group: The process group; None for the default one.

    Returns:
        [(predecessor, rank)] when the received block is wrong, else [] (also on a ring of one).

    Raises:
        UsageError: A bad ring, rank, world, numel, dtype or seed, or a rank or world that is not
            the group's.
    """
    order = _ring_order(ring, world)
    _check_rank(rank, world, group)
    _check_data(numel, dtype, seed)
    outgoing = block(rank, numel, dtype, seed, device=device)
    if world == 1:
        return []
    position = order.index(rank)
    successor, predecessor = order[(position + 1) % world], order[position - 1]
    incoming = torch.empty_like(outgoing)
    send_to_receive_from(outgoing, incoming, successor, predecessor, group)
    return _wrong_pairs([(predecessor, incoming)], rank, seed, corrupt)


def checked_all_gather(
    rank: int,
    world: int,
    numel: int,
    dtype: torch.dtype,
    seed: int,
    *,
    device: torch.device | str,
    corrupt: CorruptPair | None = None,
    group: dist.ProcessGroup | None = None,
) -> list[Pair]:
    """all_gather of per-source blocks; check every source's block as it arrived here.

    Each rank contributes `block(rank)`; the receiver regenerates `block(source)` for every source
    (world × numel elements of drawing, see `exact_data`) and compares bit for bit. Its own block is
    checked too: a wrong (rank, rank) pair is a local copy error.

    Args:
        rank, world, numel, dtype, seed, device, group: As for `ring_send_recv`; numel is per source.
        corrupt: Fault injection: when corrupt(source, rank) is true, one bit of the received copy
            of source's block is flipped before the check.

    Returns:
        The (source, rank) pairs whose block arrived wrong, by source.

    Raises:
        UsageError: A bad rank, world, numel, dtype or seed, or a rank or world that is not the group's.
    """
    _check_rank(rank, world, group)
    _check_data(numel, dtype, seed)
    mine = block(rank, numel, dtype, seed, device=device)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine, group=group)
    return _wrong_pairs(list(enumerate(gathered)), rank, seed, corrupt)


def checked_broadcast(
    rank: int,
    world: int,
    numel: int,
    dtype: torch.dtype,
    seed: int,
    *,
    device: torch.device | str,
    root: int = 0,
    corrupt: CorruptPair | None = None,
    group: dist.ProcessGroup | None = None,
) -> list[Pair]:
    """Broadcast `block(root)` from `root`; every rank, the root included, checks what it holds.

    Args:
        rank, world, numel, dtype, seed, device, group: As for `ring_send_recv`.
        root: The sending rank, in `group`.
        corrupt: Fault injection: when corrupt(root, rank) is true, one bit of this rank's copy is
            flipped before the check.

    Returns:
        [(root, rank)] when this rank's copy is wrong, else [].

    Raises:
        UsageError: A bad root, rank, world, numel, dtype or seed, or a rank or world that is not the group's.
    """
    _check_rank(rank, world, group)
    _check_member("root", root, world)
    _check_data(numel, dtype, seed)
    if rank == root:
        tensor = block(root, numel, dtype, seed, device=device)
    else:
        tensor = torch.empty(numel, dtype=dtype, device=device)
    dist.broadcast(tensor, src=global_rank(group, root), group=group)
    return _wrong_pairs([(root, tensor)], rank, seed, corrupt)


def checked_all_reduce(
    rank: int,
    world: int,
    numel: int,
    dtype: torch.dtype,
    seed: int,
    *,
    device: torch.device | str,
    corrupt: CorruptRank | None = None,
    group: dist.ProcessGroup | None = None,
) -> int:
    """SUM all_reduce of `contribution`s; count the elements of this rank's result that are wrong.

    The expected result is `expected_sum`, exact whatever order or tree the backend adds in. No
    source can be named: every rank's contribution is in every element.

    Args:
        rank, world, numel, dtype, seed, device, group: As for `ring_send_recv`.
        corrupt: Fault injection: when corrupt(rank) is true, one bit of the result is flipped
            before the check.

    Returns:
        How many of the `numel` elements differ in any bit from the exact sum.

    Raises:
        UsageError: A bad rank, world, numel, dtype or seed, or a rank or world that is not the group's.
    """
    _check_rank(rank, world, group)
    _check_data(numel, dtype, seed)
    tensor = contribution(rank, world, numel, dtype, seed, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    if corrupt is not None and corrupt(rank):
        flip_one_bit(tensor)
    return wrong_elements(tensor, expected_sum(world, numel, dtype, seed, device=device))


def checked_reduce_scatter(
    rank: int,
    world: int,
    numel: int,
    dtype: torch.dtype,
    seed: int,
    *,
    device: torch.device | str,
    corrupt: CorruptRank | None = None,
    group: dist.ProcessGroup | None = None,
) -> int:
    """SUM reduce_scatter of `contribution`s of world × numel elements; check this rank's shard.

    Rank r receives elements [r·numel, (r+1)·numel) of the sum of every rank's input.

    Args:
        rank, world, dtype, seed, device, group: As for `ring_send_recv`.
        numel: Elements of each rank's output shard (the input has world × numel).
        corrupt: Fault injection: when corrupt(rank) is true, one bit of the shard is flipped
            before the check.

    Returns:
        How many of the shard's `numel` elements differ in any bit from the exact sum.

    Raises:
        UsageError: A bad rank, world, numel, dtype or seed, or a rank or world that is not the group's.
    """
    _check_rank(rank, world, group)
    _check_data(numel, dtype, seed)
    tensor = contribution(rank, world, world * numel, dtype, seed, device=device)
    shard = torch.empty(numel, dtype=dtype, device=device)
    reduce_scatter(shard, tensor, group)
    if corrupt is not None and corrupt(rank):
        flip_one_bit(shard)
    expected = expected_sum(world, world * numel, dtype, seed, device=device)
    return wrong_elements(shard, expected[rank * numel : (rank + 1) * numel])


def gather_to_rank0(
    local_pairs: Iterable[Pair], world: int, *, group: dist.ProcessGroup | None = None
) -> list[Pair]:
    """Every rank's wrong pairs, united at rank 0 of `group` (the one that writes the cluster report).

    A collective call: every rank of the group must make it. On NCCL, `gather_object` moves the
    pickles through this rank's current CUDA device: call `torch.cuda.set_device` first.

    Returns:
        At rank 0, the union of every rank's pairs, sorted; [] on every other rank.

    Raises:
        UsageError: A world that is not the group's.
    """
    rank = _group_rank(world, group)
    local = sorted({(int(source), int(receiver)) for source, receiver in local_pairs})
    gathered: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(local, gathered, dst=global_rank(group, 0), group=group)
    if gathered is None:
        return []
    return sorted({(source, receiver) for part in gathered for source, receiver in part})


def bus_bandwidth(collective: str, bytes_: int, seconds: float, world: int) -> float:
    """Bus bandwidth in bytes per second, the nccl-tests way (doc/PERFORMANCE.md).

    algbw = bytes_ / seconds; busbw = algbw × 2(n-1)/n for all_reduce, (n-1)/n for all_gather and
    reduce_scatter, 1 for broadcast and send/recv. `bytes_` is nccl-tests' S: the buffer for
    all_reduce, broadcast and send/recv, but the whole gathered output (all_gather) or the whole
    input (reduce_scatter), n times one rank's part: `algorithm_bytes` computes it.

    Raises:
        UsageError: An unknown collective, negative bytes, a time that is not positive and finite,
            or a world below 1.
    """
    factor = _bus_factor(collective)
    _check_int("bytes_", bytes_, 0)
    _check_int("world", world, 1)
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"seconds must be a positive, finite number, got {seconds!r}")
    return bytes_ / seconds * factor(world)


def algorithm_bytes(collective: str, numel: int, dtype: torch.dtype, world: int) -> int:
    """nccl-tests' S for one call of the function here named by `collective` with `numel` elements.

    all_gather's numel is one source's block and reduce_scatter's one rank's shard, so S is
    world × numel elements for them; for the others S is the buffer, numel elements.

    Raises:
        UsageError: An unknown collective, a negative numel or a world below 1.
    """
    _bus_factor(collective)
    _check_int("numel", numel, 0)
    _check_int("world", world, 1)
    parts = world if collective in (ALL_GATHER, REDUCE_SCATTER) else 1
    return parts * numel * dtype.itemsize


def _wrong_pairs(
    received: Sequence[tuple[int, torch.Tensor]], receiver: int, seed: int, corrupt: CorruptPair | None
) -> list[Pair]:
    """The (source, receiver) pairs whose received block is not, bit for bit, `block(source)`."""
    wrong = []
    for source, tensor in received:
        if corrupt is not None and corrupt(source, receiver):
            flip_one_bit(tensor)
        expected = block(source, tensor.numel(), tensor.dtype, seed, device=tensor.device)
        if not bitwise_equal(tensor, expected):
            wrong.append((source, receiver))
    return wrong


def send_to_receive_from(
    outgoing: torch.Tensor,
    incoming: torch.Tensor,
    successor: int,
    predecessor: int,
    group: dist.ProcessGroup | None,
) -> None:
    """One hop of a ring: send `outgoing` to `successor`, receive `incoming` from `predecessor` (group
    ranks). Both are posted together with `batch_isend_irecv`, so no rank waits for another to start
    and a ring cannot deadlock; each wait is bounded by the group's timeout."""
    ops = [
        dist.P2POp(dist.isend, outgoing, global_rank(group, successor), group),
        dist.P2POp(dist.irecv, incoming, global_rank(group, predecessor), group),
    ]
    for work in dist.batch_isend_irecv(ops):
        work.wait()


def all_gather_into(output: torch.Tensor, input_: torch.Tensor, group: dist.ProcessGroup | None) -> None:
    """all_gather of equal flat blocks into one tensor, under the name this torch has for it."""
    # torch 2.13 renamed all_gather_into_tensor to all_gather_single, as it did for reduce_scatter.
    call = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    call(output, input_, group=group)


def flip_one_bit(tensor: torch.Tensor) -> None:
    """Flip, in place, the lowest bit of the middle element (a no-op on an empty tensor).

    The lowest bit keeps a normal float normal and finite: the check, not a NaN, must catch it.
    """
    if tensor.numel() == 0:
        return
    bits = tensor.view(_BITS_OF_SIZE[tensor.element_size()])
    middle = tensor.numel() // 2
    bits[middle : middle + 1].bitwise_xor_(1)


def reduce_scatter(output: torch.Tensor, input_: torch.Tensor, group: dist.ProcessGroup | None) -> None:
    """SUM reduce_scatter of a flat input into `output`, under the name this torch has for it."""
    # torch 2.13 renamed reduce_scatter_tensor to reduce_scatter_single and deprecated the old name;
    # the project supports torch from 2.4, which has only the old one.
    call = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    call(output, input_, op=dist.ReduceOp.SUM, group=group)


def global_rank(group: dist.ProcessGroup | None, group_rank: int) -> int:
    """The global rank torch.distributed's peer and root arguments expect for a rank of `group`."""
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def _ring_order(ring: Sequence[int], world: int) -> list[int]:
    """`ring` as a list, checked to name every rank of a world of `world` exactly once."""
    _check_int("world", world, 1)
    order = list(ring)
    if not all(isinstance(r, int) and not isinstance(r, bool) for r in order) or sorted(order) != list(
        range(world)
    ):
        raise UsageError(f"a ring names every rank of a world of {world} once, got {order!r}")
    return order


def _check_rank(rank: int, world: int, group: dist.ProcessGroup | None) -> None:
    """Raise UsageError unless this process is rank `rank` of a group of `world` ranks."""
    _check_int("world", world, 1)
    _check_member("rank", rank, world)
    actual = _group_rank(world, group)
    if actual != rank:
        raise UsageError(f"rank {rank} was given, but this process is rank {actual} of its process group")


def _group_rank(world: int, group: dist.ProcessGroup | None) -> int:
    """This process's rank in `group`, after checking the group exists and has `world` ranks."""
    _check_int("world", world, 1)
    if not dist.is_initialized():
        raise UsageError("no process group: call torch.distributed.init_process_group first")
    size = dist.get_world_size(group)
    if size != world:
        raise UsageError(f"a world of {world} was given, but the process group has {size} ranks")
    return dist.get_rank(group)


def _bus_factor(collective: str) -> Callable[[int], float]:
    """The nccl-tests bus bandwidth factor of `collective`."""
    if collective not in _BUS_FACTOR:
        raise UsageError(f"unknown collective {collective!r}: one of {', '.join(COLLECTIVES)}")
    return _BUS_FACTOR[collective]


def _check_data(numel: int, dtype: torch.dtype, seed: int) -> None:
    """Raise UsageError for a block or contribution `exact_data` cannot make, before any collective:
    a rank that raised inside one would leave its peers waiting for the timeout."""
    _check_int("numel", numel, 0)
    _check_int("seed", seed, None)
    if dtype not in SUPPORTED_DTYPES:
        raise UsageError(f"checked collectives support {', '.join(map(str, SUPPORTED_DTYPES))}, not {dtype}")


def _check_member(name: str, value: object, world: int) -> None:
    """Raise UsageError unless `value` is a rank of a world of `world`."""
    if _check_int(name, value, 0) >= world:
        raise UsageError(f"{name} {value} is outside a world of {world}")


def _check_int(name: str, value: object, minimum: int | None) -> int:
    """`value`, or a UsageError unless it is an int (not a bool) of at least `minimum`."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise UsageError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise UsageError(f"{name} must be >= {minimum}, got {value}")
    return value
