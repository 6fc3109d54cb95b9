"""Checked collectives on a real gloo world of four CPU processes: silent when clean, firing on a fault.

Starting a process that imports torch costs seconds, so one spawned world runs every scenario and
sends its results back; the tests read them. The parent always stops its children, even when a
scenario fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist

from sdcscan.collectives.attribution import HopBlame, blame_all_gather, blame_send_recv_ring
from sdcscan.collectives.ops import (
    ALL_GATHER,
    ALL_REDUCE,
    BROADCAST,
    REDUCE_SCATTER,
    SEND_RECV,
    algorithm_bytes,
    bus_bandwidth,
    checked_all_gather,
    checked_all_reduce,
    checked_broadcast,
    checked_reduce_scatter,
    gather_to_rank0,
    ring_send_recv,
)
from sdcscan.errors import UsageError
from tests.helpers.gloo_world import spawn_world

WORLD = 4
NUMEL = 257  # odd, so no element count lines up with a power of two by accident
SEED = 13
DTYPES = ("bfloat16", "float16", "float32", "int32")
RING = [0, 1, 2, 3]
ODD_RING = [3, 1, 0, 2]  # 3→1→0→2→3: successors are not rank + 1
CHECKED = ("send_recv", "all_gather", "broadcast", "all_reduce", "reduce_scatter")


def _clean(rank: int, dtype: torch.dtype) -> dict[str, object]:
    """Every checked collective once, without faults."""
    args = (rank, WORLD, NUMEL, dtype, SEED)
    return {
        "send_recv": ring_send_recv(rank, WORLD, RING, NUMEL, dtype, SEED, device="cpu"),
        "all_gather": checked_all_gather(*args, device="cpu"),
        "broadcast": checked_broadcast(*args, device="cpu", root=1),
        "all_reduce": checked_all_reduce(*args, device="cpu"),
        "reduce_scatter": checked_reduce_scatter(*args, device="cpu"),
    }


def _faults(rank: int) -> dict[str, object]:
    """Each collective with one injected corruption; pairs are gathered at rank 0."""
    f32 = torch.float32
    hop = ring_send_recv(
        rank, WORLD, RING, NUMEL, f32, SEED, device="cpu", corrupt=lambda s, r: (s, r) == (1, 2)
    )
    odd = ring_send_recv(
        rank,
        WORLD,
        ODD_RING,
        NUMEL,
        torch.bfloat16,
        SEED,
        device="cpu",
        corrupt=lambda s, r: (s, r) == (1, 0),
    )
    # What a ring all_gather delivers when hop 1→2 corrupts source 1's block: it is stored wrong at
    # every rank it reaches after the hop, 2, 3 and then 0 (its last stop before returning to 1).
    arc = checked_all_gather(
        rank, WORLD, NUMEL, torch.int32, SEED, device="cpu", corrupt=lambda s, r: s == 1 and r in (2, 3, 0)
    )
    cast = checked_broadcast(
        rank, WORLD, NUMEL, torch.float16, SEED, device="cpu", root=2, corrupt=lambda s, r: r == 3
    )
    return {
        "hop": gather_to_rank0(hop, WORLD),
        "odd_ring": gather_to_rank0(odd, WORLD),
        "arc": gather_to_rank0(arc, WORLD),
        "broadcast": gather_to_rank0(cast, WORLD),
        "all_reduce": checked_all_reduce(
            rank, WORLD, NUMEL, f32, SEED, device="cpu", corrupt=lambda r: r == 2
        ),
        "reduce_scatter": checked_reduce_scatter(
            rank, WORLD, NUMEL, torch.bfloat16, SEED, device="cpu", corrupt=lambda r: r == 1
        ),
    }


def _subgroup(rank: int) -> dict[str, object]:
    """Ranks 1, 2, 3 as a group of three (group ranks 0, 1, 2): ring hop 0→1 corrupted, broadcast from 2."""
    group = dist.new_group([1, 2, 3])
    if rank == 0:
        return {}
    me = dist.get_rank(group)
    hop = ring_send_recv(
        me,
        3,
        [0, 1, 2],
        NUMEL,
        torch.float32,
        SEED,
        device="cpu",
        corrupt=lambda s, r: (s, r) == (0, 1),
        group=group,
    )
    cast = checked_broadcast(me, 3, NUMEL, torch.int32, SEED, device="cpu", root=2, group=group)
    return {
        "hop": gather_to_rank0(hop, 3, group=group),
        "broadcast": gather_to_rank0(cast, 3, group=group),
        "all_gather": checked_all_gather(me, 3, NUMEL, torch.float16, SEED, device="cpu", group=group),
    }


def _usage_errors(rank: int) -> dict[str, bool]:
    """Whether a rank or world that is not the process group's is refused before any collective."""

    def refused(call: Callable[[], object]) -> bool:
        try:
            call()
        except UsageError:
            return True
        return False

    other = (rank + 1) % WORLD
    return {
        "wrong_rank": refused(
            lambda: checked_all_reduce(other, WORLD, NUMEL, torch.float32, SEED, device="cpu")
        ),
        "wrong_world": refused(lambda: checked_all_gather(rank, 8, NUMEL, torch.float32, SEED, device="cpu")),
        "wrong_gather_world": refused(lambda: gather_to_rank0([], 2)),
        "unsupported_dtype": refused(
            lambda: checked_broadcast(rank, WORLD, NUMEL, torch.float64, SEED, device="cpu")
        ),
    }


def _every_scenario(rank: int, size: int, control: Any) -> dict[str, Any]:
    """One rank's results of every scenario, run in this order on every rank (the control group is unused)."""
    out: dict[str, Any] = {"usage": _usage_errors(rank)}
    for name in DTYPES:
        out[f"clean/{name}"] = _clean(rank, getattr(torch, name))
    out["faults"] = _faults(rank)
    out["subgroup"] = _subgroup(rank)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, dict[str, Any]]]:
    """Rank → results of every scenario, from one gloo world of four spawned processes."""
    yield spawn_world(WORLD, _every_scenario, tmp_path_factory.mktemp("gloo"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("collective", CHECKED)
def test_a_clean_collective_reports_nothing_wrong_on_any_rank(world, collective, dtype):
    """Every checked collective in every dtype: no wrong pair and no wrong element anywhere."""
    empty: int | list[object] = 0 if collective in ("all_reduce", "reduce_scatter") else []
    assert [world[r][f"clean/{dtype}"][collective] for r in range(WORLD)] == [empty] * WORLD


def test_a_corrupted_ring_hop_is_gathered_at_rank0_and_blamed(world):
    """Hop 1→2 corrupted: rank 0 gathers exactly (1, 2); the others get nothing; the blame names the hop."""
    assert [world[r]["faults"]["hop"] for r in range(WORLD)] == [[(1, 2)], [], [], []]
    blame = blame_send_recv_ring(RING, world[0]["faults"]["hop"])
    assert [b.hop for b in blame] == [(1, 2)]


def test_the_ring_follows_the_given_order_not_the_rank_numbers(world):
    """On the ring 3→1→0→2→3 rank 0 receives from 1: the hop 1→0 is the one reported."""
    assert world[0]["faults"]["odd_ring"] == [(1, 0)]
    assert [b.hop for b in blame_send_recv_ring(ODD_RING, world[0]["faults"]["odd_ring"])] == [(1, 0)]


def test_all_gather_blocks_wrong_on_the_arc_after_a_hop_name_that_hop(world):
    """Source 1's block wrong at 2, 3 and 0 (what hop 1→2 of a ring leaves): blame names hop 1→2."""
    pairs = world[0]["faults"]["arc"]
    assert pairs == [(1, 0), (1, 2), (1, 3)]
    blame = blame_all_gather(RING, pairs)
    assert isinstance(blame, HopBlame)
    assert (blame.hop, blame.sources, blame.receivers) == ((1, 2), (1,), (2, 3, 0))


@pytest.mark.parametrize("collective, corrupted_rank", [("all_reduce", 2), ("reduce_scatter", 1)])
def test_a_bit_flipped_in_one_ranks_sum_is_reported_by_that_rank_alone(world, collective, corrupted_rank):
    """One bit flipped in one rank's result: exactly one wrong element there, none elsewhere."""
    counts = [world[r]["faults"][collective] for r in range(WORLD)]
    assert counts == [1 if r == corrupted_rank else 0 for r in range(WORLD)]


def test_a_corrupted_broadcast_copy_names_root_and_receiver(world):
    """Broadcast from 2 with rank 3's copy corrupted: rank 0 gathers exactly (2, 3)."""
    assert [world[r]["faults"]["broadcast"] for r in range(WORLD)] == [[(2, 3)], [], [], []]


def test_on_a_subgroup_ranks_roots_and_pairs_are_group_ranks(world):
    """Group {1, 2, 3}: its rank 0 (global 1) gathers the hop 0→1; a broadcast from its rank 2 is clean."""
    sub = {r: world[r]["subgroup"] for r in range(1, WORLD)}
    assert [sub[r]["hop"] for r in (1, 2, 3)] == [[(0, 1)], [], []]
    assert [(sub[r]["broadcast"], sub[r]["all_gather"]) for r in (1, 2, 3)] == [([], [])] * 3


def test_a_rank_or_world_that_is_not_the_process_groups_is_refused(world):
    """A wrong rank or world (collective or gather), or a dtype without exact data: UsageError, on every rank."""
    refused = dict.fromkeys(["wrong_rank", "wrong_world", "wrong_gather_world", "unsupported_dtype"], True)
    assert [world[r]["usage"] for r in range(WORLD)] == [refused] * WORLD


@pytest.mark.parametrize(
    "collective, bytes_, seconds, world_size, expected",
    [
        (ALL_REDUCE, 8_000_000_000, 2.0, 8, 4e9 * 2 * 7 / 8),  # 7e9 B/s
        (ALL_REDUCE, 1_000, 1.0, 1, 0.0),  # one rank moves nothing over the bus
        (ALL_GATHER, 4_000_000, 0.001, 4, 4e9 * 3 / 4),
        (REDUCE_SCATTER, 4_000_000, 0.001, 2, 4e9 / 2),
        (BROADCAST, 1_000_000, 0.5, 16, 2e6),
        (SEND_RECV, 3_000, 1.5, 4, 2e3),
    ],
)
def test_bus_bandwidth_applies_the_nccl_tests_factor(collective, bytes_, seconds, world_size, expected):
    """busbw = bytes / seconds × 2(n-1)/n, (n-1)/n, (n-1)/n, 1, 1 (nccl-tests doc/PERFORMANCE.md)."""
    assert bus_bandwidth(collective, bytes_, seconds, world_size) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "collective, dtype, expected",
    [
        (ALL_REDUCE, torch.float32, 1000 * 4),
        (ALL_GATHER, torch.bfloat16, 4 * 1000 * 2),  # the whole gathered output
        (REDUCE_SCATTER, torch.int32, 4 * 1000 * 4),  # the whole input
        (BROADCAST, torch.float16, 1000 * 2),
        (SEND_RECV, torch.float32, 1000 * 4),
    ],
)
def test_algorithm_bytes_is_the_size_nccl_tests_divides_by_time(collective, dtype, expected):
    """S for 1000 elements on 4 ranks: the buffer, or n parts for all_gather and reduce_scatter."""
    assert algorithm_bytes(collective, 1000, dtype, 4) == expected


@pytest.mark.parametrize(
    "call",
    [
        lambda: bus_bandwidth("all_to_all", 1, 1.0, 2),
        lambda: bus_bandwidth(ALL_REDUCE, -1, 1.0, 2),
        lambda: bus_bandwidth(ALL_REDUCE, 1, 0.0, 2),
        lambda: bus_bandwidth(ALL_REDUCE, 1, float("inf"), 2),
        lambda: bus_bandwidth(ALL_REDUCE, 1, 1.0, 0),
        lambda: algorithm_bytes("gather", 1, torch.float32, 2),
        lambda: ring_send_recv(0, 4, [0, 1, 1, 3], 8, torch.float32, 0, device="cpu"),
        lambda: ring_send_recv(0, 4, [0, 1, 2], 8, torch.float32, 0, device="cpu"),
        lambda: ring_send_recv(0, 2, [0, True], 8, torch.float32, 0, device="cpu"),
        lambda: checked_all_reduce(0, 4, 8, torch.float32, 0, device="cpu"),  # no process group here
        lambda: checked_broadcast(4, 4, 8, torch.float32, 0, device="cpu"),
    ],
    ids=[
        "unknown-collective",
        "negative-bytes",
        "zero-seconds",
        "infinite-seconds",
        "empty-world",
        "algorithm-bytes-unknown",
        "ring-repeats-a-rank",
        "ring-misses-a-rank",
        "ring-holds-a-bool",
        "no-process-group",
        "rank-outside-world",
    ],
)
def test_bad_arguments_raise_usage_error(call):
    """Bad arguments, or no process group, are a UsageError before any communication."""
    with pytest.raises(UsageError):
        call()
