"""The `collective` workload on real gloo worlds: silent and in agreement when clean, blaming the bad hop.

Spawning processes that import torch costs seconds, so one world of four ranks runs every scenario
and sends back its outcomes, and one world of eight runs the triage scenarios; the tests read them.
Each rank builds its `World` by hand, as the worker would, with the injected wire faults.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from sdcscan.collectives import calls as collectives
from sdcscan.collectives.env import WireFault
from sdcscan.collectives.world import World
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case, Outcome
from sdcscan.workloads import SPECS, load
from sdcscan.workloads.base import Context
from sdcscan.workloads.collective import workload as collective
from tests.helpers.gloo_world import spawn_world

# The module's gloo worlds are spawned once, by its fixtures: its tests on one pytest worker, or each
# worker would spawn them again (two worlds side by side took 14 s each, against 9 s for one)
pytestmark = pytest.mark.xdist_group("workload_collective")

SPEC = SPECS["collective"]
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv")
DTYPES = ("bfloat16", "float16", "float32", "int32")


def _world(rank: int, size: int, control: Any, faults: tuple[WireFault, ...] = ()) -> World:
    return World(
        rank=rank,
        size=size,
        hosts=("h",) * size,
        timeout_s=30,
        device=torch.device("cpu"),
        backend="gloo",
        data=None,
        control=control,
        faults=faults,
    )


def _runner(world: World, **params: Any) -> Callable[..., Outcome]:
    """run(occurrence, seed) -> Outcome of a tiny `collective` on `world`."""
    cls = load("collective")
    merged = {**SPEC.defaults, **SPEC.tiny, **params}
    workload = cls(merged)
    ctx = Context(unit=f"rank{world.rank}", device=torch.device("cpu"), run_seed=77, params=merged)
    ctx.world = world
    workload.prepare(ctx)

    def run(occurrence: int, seed: int = 5) -> Outcome:
        ctx.begin_case(None)
        case = Case(index=occurrence, workload="collective", seed=seed, occurrence=occurrence)
        outcome = workload.run(ctx, case)
        outcome.phases = dict(ctx.phases)  # as the worker does
        return outcome

    return run


def _four(rank: int, size: int, control: Any) -> dict[str, Any]:
    """Every (collective, dtype) clean twice; each collective with hop 1→2 bad; a rate below 1."""
    clean = _runner(_world(rank, size, control))
    laps = len(COLLECTIVES) * len(DTYPES)
    out: dict[str, Any] = {"clean": [clean(i) for i in range(laps)]}
    out["again"] = [clean(i) for i in range(laps)]  # served from the cache
    out["broadcast_roots"] = [clean(COLLECTIVES.index("broadcast") + lap * laps) for lap in range(1, size)]
    link = _world(rank, size, control, (WireFault("link", 2),))
    faulty = _runner(link, dtypes=["float32"])
    out["link"] = {c: faulty(i) for i, c in enumerate(COLLECTIVES)}
    out["link_roots"] = [faulty(3 + lap * len(COLLECTIVES)) for lap in range(size)]
    sometimes = _runner(
        _world(rank, size, control, (WireFault("link", 2, rate=0.5),)), collectives=["send_recv"]
    )
    out["rate"] = [sometimes(0, seed=s) for s in range(12)]
    return out


def _eight(rank: int, size: int, control: Any) -> dict[str, Any]:
    """all_reduce with the hop into rank 4 (across the halves) and into rank 6 (inside one) bad, timed."""
    started = time.perf_counter()
    out: dict[str, Any] = {}
    for into in (4, 6):
        world = _world(rank, size, control, (WireFault("link", into),))
        out[f"into {into}"] = _runner(world, collectives=["all_reduce"], dtypes=["int32"])(0)
    out["seconds"] = time.perf_counter() - started
    return out


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, dict[str, Any]]]:
    yield spawn_world(4, _four, tmp_path_factory.mktemp("gloo4"))


@pytest.fixture(scope="module")
def eight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, dict[str, Any]]]:
    yield spawn_world(8, _eight, tmp_path_factory.mktemp("gloo8"))


def _column(world: dict[int, dict[str, Any]], *keys: Any) -> list[Any]:
    """The result at `keys` on every rank, in rank order."""
    found = []
    for rank in sorted(world):
        value = world[rank]
        for key in keys:
            value = value[key]
        found.append(value)
    return found


def _statuses(outcomes: list[Outcome]) -> list[str]:
    return [o.status for o in outcomes]


# --- clean ----------------------------------------------------------------------------------------


def test_clean_cases_cover_every_collective_and_dtype_and_agree_on_every_rank(four):
    """Each (collective, dtype): ok on all four ranks, one digest for all of them, nothing attributed."""
    laps = len(COLLECTIVES) * len(DTYPES)
    covered = set()
    for i in range(laps):
        outcomes = [four[r]["clean"][i] for r in range(4)]
        assert _statuses(outcomes) == [STATUS_OK] * 4, [o.mismatches for o in outcomes]
        assert len({o.digest for o in outcomes}) == 1
        detail = outcomes[0].detail
        assert detail["attribution"] == [{"kind": "clean"}] and detail["triage"] is None
        covered.add((detail["collective"], detail["dtype"]))
    assert covered == {(c, d) for c in COLLECTIVES for d in DTYPES}


def test_a_repeated_case_gives_the_same_digest(four):
    """The second lap (data from the cache) repeats the first bit for bit."""
    for rank in range(4):
        assert [(o.status, o.digest) for o in four[rank]["again"]] == [
            (o.status, o.digest) for o in four[rank]["clean"]
        ]


def test_a_clean_broadcast_from_every_root_is_ok(four):
    """The root moves one rank per lap through the product; every rank checks its copy."""
    for lap in range(3):
        outcomes = [four[r]["broadcast_roots"][lap] for r in range(4)]
        assert _statuses(outcomes) == [STATUS_OK] * 4
        assert outcomes[0].detail["root"] == lap + 1


def test_detail_records_sizes_bandwidth_and_setting(four):
    """nccl-tests' S, algbw and busbw, the ring and backend; ops are the bytes moved."""
    # the collective changes fastest, then the dtype: all_gather float32
    outcome = four[1]["clean"][DTYPES.index("float32") * len(COLLECTIVES) + COLLECTIVES.index("all_gather")]
    d = outcome.detail
    assert (d["collective"], d["dtype"], d["numel"]) == ("all_gather", "float32", 257)
    assert d["bytes"] == 4 * 257 * 4 and outcome.ops == d["bytes"] and outcome.ops_unit == "byte"
    assert d["algbw_gbps"] > 0 and d["busbw_gbps"] == pytest.approx(d["algbw_gbps"] * 3 / 4)
    assert (d["ring"], d["backend"]) == ([0, 1, 2, 3], "gloo") and "nccl_algo" in d
    assert outcome.phases["compute"] > 0 and outcome.phases["check"] > 0 and "triage" not in outcome.phases


# --- a bad hop ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["all_gather", "send_recv", "broadcast"])
def test_a_bad_hop_is_named_and_only_its_receiver_mismatches(four, name):
    """`2:link`: the copies name hop 1→2, and rank 2 alone reports a mismatch that says so."""
    outcomes = _column(four, "link", name)
    assert _statuses(outcomes) == [STATUS_OK, STATUS_OK, STATUS_MISMATCH, STATUS_OK]
    assert len({o.digest for o in outcomes}) == 1
    found = outcomes[0].detail["attribution"]
    assert [(a["kind"], tuple(a["hop"])) for a in found] == [("hop", (1, 2))]
    (mismatch,) = outcomes[2].mismatches
    assert mismatch.where.startswith(f"{name} float32 257: hop 1→2 corrupted")


def test_the_all_gather_blame_lists_every_source_and_receiver_the_hop_reached(four):
    """Source s's block crosses hop 1→2 on its way to rank 2 and beyond: sources 3, 0, 1 at 2, 3, 0."""
    (found,) = four[0]["link"]["all_gather"].detail["attribution"]
    assert (tuple(found["sources"]), tuple(found["receivers"])) == ((3, 0, 1), (2, 3, 0))
    (mismatch,) = four[2]["link"]["all_gather"].mismatches
    assert "sources 3,0,1 at receivers 2,3,0" in mismatch.where


def test_a_broadcast_sees_the_hop_only_when_its_path_crosses_it(four):
    """Root 2's block never crosses 1→2: clean. From 0, 1 and 3 the hop is named."""
    for root in range(4):
        outcomes = [four[r]["link_roots"][root] for r in range(4)]
        assert outcomes[0].detail["root"] == root
        expected = [STATUS_OK] * 4 if root == 2 else [STATUS_OK, STATUS_OK, STATUS_MISMATCH, STATUS_OK]
        assert _statuses(outcomes) == expected, root


@pytest.mark.parametrize("name", ["all_reduce", "reduce_scatter"])
def test_a_bad_hop_under_a_sum_goes_to_triage_which_names_both_its_ends(four, name):
    """Every rank's sum is wrong, so nobody is named; triage on subgroups narrows it to ranks 1 and 2."""
    outcomes = _column(four, "link", name)
    assert _statuses(outcomes) == [STATUS_OK, STATUS_MISMATCH, STATUS_MISMATCH, STATUS_OK]
    assert len({o.digest for o in outcomes}) == 1
    detail = outcomes[0].detail
    assert [a["kind"] for a in detail["attribution"]] == ["unattributed"]
    triage = detail["triage"]
    assert tuple(triage["suspects"]) == ("rank 1 (h)", "rank 2 (h)") and triage["stop"] == "isolated"
    assert all(t["result"] is not None for t in triage["trials"])
    assert "triage suspects ranks 1,2" in outcomes[1].mismatches[0].where
    assert outcomes[1].phases["triage"] > 0  # the re-runs are timed apart from the case's compute


def test_a_fault_rate_is_drawn_per_case_and_every_rank_agrees(four):
    """`2:link@0.5`: some cases see the hop, some do not; all ranks decide alike for each case."""
    faulty = []
    for i in range(12):
        outcomes = [four[r]["rate"][i] for r in range(4)]
        assert len({o.digest for o in outcomes}) == 1
        faulty.append(_statuses(outcomes) != [STATUS_OK] * 4)
    assert 0 < sum(faulty) < 12


def test_the_eight_rank_triage_narrows_a_hop_to_its_two_ends(eight):
    """Hop 3→4 spans the halves (both halves pass, then each side shrinks); 5→6 lies in one half."""
    for into in (4, 6):
        outcomes = _column(eight, f"into {into}")
        suspects = {into - 1, into}
        assert _statuses(outcomes) == [STATUS_MISMATCH if r in suspects else STATUS_OK for r in range(8)]
        assert len({o.digest for o in outcomes}) == 1
    assert max(_column(eight, "seconds")) < 30


# --- without a world, and the catalogue ----------------------------------------------------------


def test_run_without_a_world_says_it_needs_a_distributed_run():
    workload = load("collective")({**SPEC.defaults, **SPEC.tiny})
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=1, params={})
    with pytest.raises(RuntimeError, match="distributed run"):
        workload.run(ctx, Case(index=0, workload="collective", seed=1, occurrence=0))


def test_the_catalogue_restates_the_collectives_dtypes_and_block_limit():
    """The torch-free catalogue repeats what the module supports; they must not drift apart."""
    assert SPEC.params["collectives"].item.options == collectives.COLLECTIVES  # type: ignore[attr-defined]
    assert SPEC.params["dtypes"].item.options == tuple(collective.DTYPES)  # type: ignore[attr-defined]
    assert SPEC.params["sizes"].item.high == collective.MAX_BLOCK  # type: ignore[attr-defined]
    assert tuple(SPEC.defaults["collectives"]) == COLLECTIVES and SPEC.distributed


@pytest.mark.parametrize(
    "params",
    [
        {"collectives": ["all_to_all"]},
        {"collectives": []},
        {"dtypes": ["float64"]},
        {"sizes": [0]},
        {"sizes": [collective.MAX_BLOCK + 1]},
        {"triage_budget": 0},
    ],
)
def test_what_the_catalogue_refuses_the_workload_refuses_too(params):
    assert any(SPEC.param_problem(k, v) for k, v in params.items())
    with pytest.raises(ValueError):
        load("collective")({**SPEC.defaults, **params})
