"""The collective workload's check (`collectives.checked`, what every case runs) on a real gloo world of four
CPU processes: silent when clean, and naming the hop or the rank when an injected bad hop strikes.

Starting a process that imports torch costs seconds, so one spawned world runs every scenario and
sends its results back; the tests read them. The parent always stops its children, even when a
scenario fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist

from sdcscan.collectives import checked
from sdcscan.collectives.attribution import Clean, HopBlame, RankBlame, Unattributed
from sdcscan.collectives.calls import (
    ALL_GATHER,
    ALL_REDUCE,
    BROADCAST,
    REDUCE_SCATTER,
    SEND_RECV,
    algorithm_bytes,
    bus_bandwidth,
)
from sdcscan.collectives.checked import Group, Pick
from sdcscan.collectives.triage import STOP_ISOLATED, Node, Triage
from sdcscan.errors import UsageError
from tests.helpers.gloo_world import spawn_world

# The module's gloo worlds are spawned once, by its fixtures: its tests on one pytest worker, or each
# worker would spawn them again (two worlds side by side took 14 s each, against 9 s for one)
pytestmark = pytest.mark.xdist_group("distributed_collectives")

WORLD = 4
NUMEL = 257  # odd, so no element count lines up with a power of two by accident
SEED = 13
DTYPES = ("bfloat16", "float16", "float32", "int32")
CHECKED = ("send_recv", "all_gather", "broadcast", "all_reduce", "reduce_scatter")


def _seen(pick: Pick, group: Group, bad: checked.BadHop) -> tuple[Any, list[Any]]:
    """Run one pick on `group` as a case does: this rank's check, and every member's (gathered)."""
    data = checked.build(pick, group, SEED, torch.device("cpu"))
    held = checked.buffers(pick, group, data)
    checked.call(pick, group, data, held)
    mine = checked.check(pick, group, data, held, bad)
    everyone: list[Any] = [None] * group.size
    dist.all_gather_object(everyone, mine, group=group.handle)
    return mine, everyone


def _clean(rank: int, dtype: str) -> dict[str, object]:
    """Every collective once, without a bad hop: what this rank's check found."""
    group = Group(tuple(range(WORLD)), None, rank)
    return {c: _seen(Pick(c, dtype, NUMEL, root=1), group, lambda s, r: False)[0] for c in CHECKED}


def _faults(rank: int) -> dict[str, object]:
    """Each collective with the hop 1→2 bad (global ranks): what every rank saw, and what all concluded."""
    group = Group(tuple(range(WORLD)), None, rank)
    out: dict[str, object] = {}
    for collective, dtype in ((SEND_RECV, "float32"), (ALL_GATHER, "int32"), (BROADCAST, "float16"),
                              (ALL_REDUCE, "float32"), (REDUCE_SCATTER, "bfloat16")):  # fmt: skip
        pick = Pick(collective, dtype, NUMEL, root=2 if collective == BROADCAST else 0)
        _, seen = _seen(pick, group, lambda s, r: (s, r) == (1, 2))
        out[collective] = (seen, checked.attribute(collective, group.members, seen))
    return out


def _subgroup(rank: int) -> dict[str, object]:
    """Ranks 1, 2, 3 as a group of three (group ranks 0, 1, 2), hop 2→3 (global) bad: pairs and roots are
    group ranks."""
    handle = dist.new_group([1, 2, 3])
    if rank == 0:
        return {}
    group = Group((1, 2, 3), handle, rank - 1)
    bad = lambda s, r: (s, r) == (2, 3)  # noqa: E731
    ring = _seen(Pick(SEND_RECV, "float32", NUMEL, root=0), group, bad)[1]
    cast = _seen(Pick(BROADCAST, "int32", NUMEL, root=3), group, bad)[1]  # root 3: group rank 2
    return {"ring": ring, "broadcast": cast}


def _every_scenario(rank: int, size: int, control: Any) -> dict[str, Any]:
    """One rank's results of every scenario, run in this order on every rank (the control group is unused)."""
    out: dict[str, Any] = {f"clean/{name}": _clean(rank, name) for name in DTYPES}
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
    """Every collective in every dtype: no wrong pair and no wrong element anywhere."""
    empty: int | list[object] = 0 if collective in ("all_reduce", "reduce_scatter") else []
    assert [world[r][f"clean/{dtype}"][collective] for r in range(WORLD)] == [empty] * WORLD


def test_a_bad_hop_on_the_ring_is_seen_by_its_receiver_and_named(world):
    """Hop 1→2 bad: rank 2 alone holds its predecessor's block wrong, and every rank names the hop."""
    seen, blame = world[0]["faults"][SEND_RECV]
    assert seen == [[], [], [(1, 2)], []]
    assert [b.hop for b in blame] == [(1, 2)]
    assert all(world[r]["faults"][SEND_RECV] == (seen, blame) for r in range(WORLD))  # the same everywhere


def test_all_gather_blocks_wrong_on_the_arc_after_a_hop_name_that_hop(world):
    """A block travels the ring from its source: every block that crosses hop 1→2 on its way arrives
    wrong (source 1's at 2, 3 and 0; 0's at 2 and 3; 3's at 2), and the blame names 1→2 from them."""
    seen, (blame,) = world[0]["faults"][ALL_GATHER]
    assert seen == [[(1, 0)], [], [(0, 2), (1, 2), (3, 2)], [(0, 3), (1, 3)]]
    assert isinstance(blame, HopBlame) and blame.consistent
    assert (blame.hop, blame.sources, blame.receivers) == ((1, 2), (3, 0, 1), (2, 3, 0))


def test_a_broadcast_from_the_hops_sender_is_wrong_past_it(world):
    """Broadcast from 2: its block reaches 3, 0 and 1 through hop 2→3 only, so a bad hop 1→2 touches none."""
    seen, blame = world[0]["faults"][BROADCAST]
    assert seen == [[], [], [], []] and blame == (Clean(),)


@pytest.mark.parametrize("collective", [ALL_REDUCE, REDUCE_SCATTER])
def test_a_bad_hop_spoils_every_ranks_sum_and_names_no_rank(world, collective):
    """A sum mixes every rank's data on every hop: each rank holds one wrong element, and the attribution
    is left to triage (no hop or rank can be named from one case)."""
    seen, (finding,) = world[0]["faults"][collective]
    assert seen == [1, 1, 1, 1] and isinstance(finding, Unattributed)


def test_on_a_subgroup_pairs_and_roots_are_group_ranks(world):
    """Group {1, 2, 3} with hop 2→3 bad: group rank 2 (global 3) holds group rank 1's block wrong; a
    broadcast from global 3 (group rank 2) reaches 1 and 2 over hops 3→1 and 1→2: clean."""
    sub = {r: world[r]["subgroup"] for r in range(1, WORLD)}
    assert all(sub[r]["ring"] == [[], [], [(1, 2)]] for r in (1, 2, 3))
    assert all(sub[r]["broadcast"] == [[], [], []] for r in (1, 2, 3))


def test_one_rank_alone_with_a_wrong_sum_is_blamed_and_a_hop_blames_its_receiver():
    """The attribution every rank computes from what all saw, and who reports the mismatch: a wrong sum on
    rank 2 alone blames rank 2; a hop blames its receiver (never its sender); triage blames its suspects."""
    (alone,) = checked.attribute(ALL_REDUCE, (0, 1, 2, 3), [0, 0, 3, 0])
    assert isinstance(alone, RankBlame) and alone.rank == 2
    assert checked.attribute(ALL_REDUCE, (0, 1, 2, 3), [0, 0, 0, 0]) == (Clean(),)
    nodes = [Node(f"n{r}", (r,)) for r in range(4)]
    assert checked.blamed([alone], None, nodes) == {2}
    hops = checked.attribute(SEND_RECV, (0, 1, 2, 3), [[], [], [(1, 2)], []])
    assert checked.blamed(hops, None, nodes) == {2}
    triage = Triage(suspects=("n1", "n3"), stop=STOP_ISOLATED, trials=())
    assert checked.blamed([Clean()], triage, nodes) == {1, 3}


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
    ],
    ids=[
        "unknown-collective",
        "negative-bytes",
        "zero-seconds",
        "infinite-seconds",
        "empty-world",
        "algorithm-bytes-unknown",
    ],
)
def test_bad_arguments_raise_usage_error(call):
    """Bad arguments are a UsageError."""
    with pytest.raises(UsageError):
        call()
