"""The collectives' names, the calls the check makes under the names this torch has for them, the
injected bit flip, and the nccl-tests bandwidth arithmetic.

`collectives.checked` runs all_gather, all_reduce (sum), reduce_scatter, broadcast and an explicit
send/recv ring on exact data with these. They run on any process group the caller has initialised (gloo
on CPU, NCCL on GPU) and never initialise one, read the environment or touch the clock; peers and roots
are group ranks, turned into the global ranks torch.distributed wants by `global_rank`.

Nothing here waits forever: every collective and every `Work.wait()` is bounded by the timeout the
caller passed to `init_process_group` (or `new_group`). gloo raises from the blocked call when it
passes; NCCL's watchdog aborts the communicator (async error handling, on by default since torch
2.2).

Bus bandwidth follows nccl-tests' doc/PERFORMANCE.md: algbw = S / t, busbw = algbw × a factor that
makes the number comparable with the hardware's peak whatever the number of ranks.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.distributed as dist

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


_BITS_OF_SIZE = {2: torch.int16, 4: torch.int32}


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


def _bus_factor(collective: str) -> Callable[[int], float]:
    """The nccl-tests bus bandwidth factor of `collective`."""
    if collective not in _BUS_FACTOR:
        raise UsageError(f"unknown collective {collective!r}: one of {', '.join(COLLECTIVES)}")
    return _BUS_FACTOR[collective]


def _check_int(name: str, value: object, minimum: int | None) -> int:
    """`value`, or a UsageError unless it is an int (not a bool) of at least `minimum`."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise UsageError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise UsageError(f"{name} must be >= {minimum}, got {value}")
    return value
