"""`train_dp` on a real gloo world of four CPU processes, and its pieces without one.

Clean cases agree bit for bit on every rank in both dtypes; `3:update` accuses rank 3 alone and
`2:link` the hop 1→2 (rank 2 alone reports the mismatch). One spawned world runs every scenario and
sends back a summary of each outcome (spawning processes that import torch costs seconds). The
hashing, the link model and the judging of an exchange are tested directly, including a compute
error that no fault kind injects.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from sdcscan.collectives.attribution import (
    CAUSE_COMPUTE,
    CAUSE_UPDATE,
    HopBlame,
    RankBlame,
    Unattributed,
    judge_state_hashes,
)
from sdcscan.collectives.env import WireFault
from sdcscan.faults import FaultSpec
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case
from sdcscan.workloads import SPECS, load
from sdcscan.workloads.base import Context
from sdcscan.workloads.train_dp.workload import (
    DTYPES,
    RankReport,
    TrainDp,
    build_model,
    case_outcome,
    flip_bit_,
    hash_tensors,
    judge_exchange,
    link_arcs,
    state_tensors,
)
from tests.helpers.gloo_world import spawn_world

# The module's gloo worlds are spawned once, by its fixtures: its tests on one pytest worker, or each
# worker would spawn them again (two worlds side by side took 14 s each, against 9 s for one)
pytestmark = pytest.mark.xdist_group("workload_train_dp")

WORLD = 4
CASES = (0, 1, 2)
STARTUP_S = 120  # the whole world, spawn to results; each collective is bounded by the 30 s group timeout
SCENARIOS: dict[str, tuple[str, tuple[WireFault, ...]]] = {
    "clean/float32": ("float32", ()),
    "clean/bfloat16": ("bfloat16", ()),
    "update/float32": ("float32", (WireFault("update", 3),)),
    "update/bfloat16": ("bfloat16", (WireFault("update", 3),)),
    "link/float32": ("float32", (WireFault("link", 2),)),
    "link/bfloat16": ("bfloat16", (WireFault("link", 2),)),
    "rare/float32": ("float32", (WireFault("update", 3, rate=1e-9), WireFault("link", 2, rate=1e-9))),
}


def _summary(outcome: Any, injected: Any) -> dict[str, Any]:
    return {
        "status": outcome.status,
        "digest": outcome.digest,
        "state_hash": outcome.detail["state_hash"],
        "findings": outcome.detail["verdict"]["findings"],
        "checks": [m.check for m in outcome.mismatches],
        "steps": outcome.detail["steps"],
        "losses": outcome.detail["losses"],
        "unattributed": outcome.detail.get("unattributed", False),
        "ops": outcome.ops,
        "injected": injected,
    }


def _run_cases(
    rank: int, control: Any, dtype: str, faults: tuple[WireFault, ...], armed: bool = False
) -> Any:
    from sdcscan.collectives.world import World

    params = {**SPECS["train_dp"].tiny, "dtype": dtype}
    ctx = Context(unit=f"cpu:{rank}", device=torch.device("cpu"), run_seed=1, params=params)
    ctx.world = World(
        rank,
        WORLD,
        ("h",) * WORLD,
        30,
        torch.device("cpu"),
        "gloo",
        data=None,
        control=control,
        faults=faults,
    )
    workload = load("train_dp")(params)
    workload.prepare(ctx)
    found = []
    for index in CASES:
        # `armed`: a local fault at the site `--inject` uses, armed by the runner on rank 1 alone
        ctx.begin_case(FaultSpec("bitflip", "update", seed=index) if armed and rank == 1 else None)
        outcome = workload.run(
            ctx, Case(index=index, workload="train_dp", seed=500 + index, occurrence=index)
        )
        found.append(_summary(outcome, ctx.injected))
    return found


def _every_scenario(rank: int, size: int, control: Any) -> dict[str, Any]:
    """One rank's summaries of every scenario, run in this order on every rank."""
    out = {label: _run_cases(rank, control, dtype, faults) for label, (dtype, faults) in SCENARIOS.items()}
    out["again/float32"] = _run_cases(rank, control, "float32", ())
    out["armed/float32"] = _run_cases(rank, control, "float32", (), armed=True)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, dict[str, Any]]]:
    """Rank → scenario → one summary per case, from one gloo world of four spawned processes."""
    yield spawn_world(WORLD, _every_scenario, tmp_path_factory.mktemp("gloo"), startup_s=STARTUP_S)


def _per_case(world: dict[int, dict[str, Any]], label: str, key: str) -> list[list[Any]]:
    """For each case, `key` of every rank's summary, in rank order."""
    return [[world[r][label][i][key] for r in range(WORLD)] for i in range(len(CASES))]


# --- on a world of four ranks -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_clean_cases_agree_bit_for_bit_on_every_rank(world, dtype):
    label = f"clean/{dtype}"
    assert _per_case(world, label, "status") == [[STATUS_OK] * WORLD] * len(CASES)
    assert _per_case(world, label, "findings") == [[[]] * WORLD] * len(CASES)
    digests = _per_case(world, label, "digest")
    assert all(len(set(row)) == 1 for row in digests)
    assert len({row[0] for row in digests}) == len(CASES)  # each case trains a different model
    steps = SPECS["train_dp"].tiny["steps"]
    assert _per_case(world, label, "steps") == [[steps] * WORLD] * len(CASES)
    # shards differ, so losses differ between ranks: the replicas compared equal values, not one value
    losses = _per_case(world, label, "losses")
    assert all(len({tuple(ls) for ls in row}) == WORLD for row in losses)
    assert all(all(math.isfinite(x) for x in ls) for row in losses for ls in row)
    assert all(ops > 0 for row in _per_case(world, label, "ops") for ops in row)


def test_a_case_run_twice_gives_the_same_digests(world):
    assert _per_case(world, "again/float32", "digest") == _per_case(world, "clean/float32", "digest")


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_update_error_on_rank_3_accuses_rank_3_alone(world, dtype):
    label = f"update/{dtype}"
    assert _per_case(world, label, "status") == [[STATUS_OK] * 3 + [STATUS_MISMATCH]] * len(CASES)
    for row in _per_case(world, label, "findings"):
        for findings in row:  # every rank reached the same verdict
            assert [(f["kind"], f["rank"], f["cause"]) for f in findings] == [("rank", 3, CAUSE_UPDATE)]
    assert _per_case(world, label, "checks")[0] == [[], [], [], ["state_hash"]]
    states = _per_case(world, label, "state_hash")
    assert all(len(set(row[:3])) == 1 and row[3] != row[0] for row in states)
    # the case digest is the verdict every rank reached: the cross-rank consensus sees no dispute
    assert all(len(set(row)) == 1 for row in _per_case(world, label, "digest"))
    assert [row[3]["kind"] for row in _per_case(world, label, "injected")] == ["update"] * len(CASES)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_bad_link_into_rank_2_names_the_hop_from_rank_1(world, dtype):
    label = f"link/{dtype}"
    assert _per_case(world, label, "status") == [[STATUS_OK, STATUS_OK, STATUS_MISMATCH, STATUS_OK]] * len(
        CASES
    )
    for row in _per_case(world, label, "findings"):
        for findings in row:
            assert [(f["kind"], tuple(f["hop"]), tuple(f["receivers"])) for f in findings] == [
                ("hop", (1, 2), (2, 3))
            ]
    states = _per_case(world, label, "state_hash")
    # ranks 0 and 1 hold the right state; 2 and 3 each a different wrong one (nested arcs)
    assert all(row[0] == row[1] and len({row[0], row[2], row[3]}) == 3 for row in states)
    assert all(len(set(row)) == 1 for row in _per_case(world, label, "digest"))
    clean = _per_case(world, f"clean/{dtype}", "digest")
    assert all(row[0] != c[0] for row, c in zip(_per_case(world, label, "digest"), clean, strict=True))
    assert [row[:2] for row in _per_case(world, label, "injected")] == [[None, None]] * len(CASES)


def test_a_fault_that_does_not_strike_leaves_every_rank_clean(world):
    """Rates are drawn from the case seed on every rank alike: at 1e-9 nothing strikes."""
    assert _per_case(world, "rare/float32", "digest") == _per_case(world, "clean/float32", "digest")
    assert _per_case(world, "rare/float32", "injected") == [[None] * WORLD] * len(CASES)


def test_a_fault_armed_at_the_update_site_on_one_rank_accuses_that_rank(world):
    """The site `--inject` arms in a unit's runner: a bit flipped in a parameter on rank 1 alone."""
    statuses = _per_case(world, "armed/float32", "status")
    assert statuses == [[STATUS_OK, STATUS_MISMATCH, STATUS_OK, STATUS_OK]] * len(CASES)


# --- the state hash -----------------------------------------------------------------------------


def _trained(dtype: torch.dtype) -> tuple[torch.nn.Sequential, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = build_model(8, 1).to(dtype=dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    model(torch.randn(4, 8, dtype=dtype)).float().sum().backward()
    opt.step()
    return model, opt


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_hash_covers_optimizer_state(dtype):
    model, opt = _trained(DTYPES[dtype])
    names = [n for n, _ in state_tensors(model, opt)]
    assert "0.weight.exp_avg" in names and "2.bias.exp_avg_sq" in names and "0.weight.step" in names
    before = hash_tensors(state_tensors(model, opt))
    exp_avg = opt.state[next(model.parameters())]["exp_avg"]  # 0.weight
    flip_bit_(exp_avg.view(-1), 5, 0)  # one lowest bit, in exp_avg alone
    corrupted = hash_tensors(state_tensors(model, opt))
    flip_bit_(exp_avg.view(-1), 5, 0)
    assert corrupted != before
    assert hash_tensors(state_tensors(model, opt)) == before


def test_bfloat16_hashing_sees_a_one_ulp_change():
    x = torch.linspace(-3, 3, 64, dtype=torch.bfloat16)
    y = x.clone()
    flip_bit_(y, 17, 0)  # one unit in the last place of a bf16 value
    assert y[17] != x[17] and torch.equal(y[:17], x[:17])
    assert hash_tensors([("x", x)]) != hash_tensors([("x", y)])
    assert hash_tensors([("x", x)]) == hash_tensors([("x", x.clone())])


def test_the_hash_tells_apart_names_shapes_and_dtypes():
    x = torch.zeros(4)
    assert len({
        hash_tensors([("x", x)]),
        hash_tensors([("y", x)]),
        hash_tensors([("x", x.view(2, 2))]),
        hash_tensors([("x", x.view(torch.int32))]),
    }) == 4  # fmt: skip


# --- the link model and the judging of an exchange ------------------------------------------------


def test_the_bad_hop_corrupts_the_blocks_it_forwards_on_nested_arcs():
    assert link_arcs([0, 1, 2, 3], 2) == {3: (2,), 0: (2, 3)}
    assert link_arcs([0, 1, 2], 0) == {1: (0,)}
    assert link_arcs([0, 1], 1) == {0: (1,)}  # two ranks: only the sender's own block crosses
    assert link_arcs([0], 0) == {}


@pytest.mark.parametrize("size", range(2, 9))
def test_what_the_link_model_leaves_is_read_as_that_hop(size):
    """Each rank's state hash stands for the set of blocks it holds wrong."""
    receiver = size - 1 if size > 2 else 1
    sender = receiver - 1
    arcs = link_arcs(list(range(size)), receiver)
    hashes = {r: ",".join(str(s) for s, holders in sorted(arcs.items()) if r in holders) for r in range(size)}
    verdict = judge_state_hashes(hashes)
    (finding,) = verdict.findings
    if size == 2:
        assert isinstance(finding, Unattributed)
    elif size == 3:
        assert isinstance(finding, RankBlame) and finding.rank == receiver
        assert (sender, receiver) in finding.alternative_hops
    else:
        assert isinstance(finding, HopBlame) and finding.hop == (sender, receiver)


def _reports(
    hashes: list[str], losses: list[list[float]], replicas: list[list[float]]
) -> dict[int, RankReport]:
    return {r: RankReport(h, tuple(losses[r]), tuple(replicas[r])) for r, h in enumerate(hashes)}


LOSSES = [[1.0, 1.5, 2.0], [1.1, 1.6, 2.1], [1.2, 1.7, 2.2], [1.3, 1.8, 2.3]]
REPLICAS = [[1.3, 1.8, 2.3], [1.0, 1.5, 2.0], [1.1, 1.6, 2.1], [1.2, 1.7, 2.2]]  # rank r recomputes r - 1


def test_an_exchange_of_agreeing_hashes_and_replicas_is_ok():
    verdict, at = judge_exchange(_reports(["a"] * 4, LOSSES, REPLICAS), [0, 1, 2, 3])
    assert verdict.ok and at == 2


def test_a_loss_its_replica_disagrees_with_is_a_compute_error_on_that_rank():
    replicas = [list(r) for r in REPLICAS]
    replicas[2][1] = 1.6000001  # rank 2's recomputation of rank 1's loss at step 1
    verdict, at = judge_exchange(_reports(["a"] * 4, LOSSES, replicas), [0, 1, 2, 3])
    (finding,) = verdict.findings
    assert isinstance(finding, RankBlame) and (finding.rank, finding.cause, at) == (1, CAUSE_COMPUTE, 1)
    assert (finding.loss, finding.expected_loss) == (1.6, 1.6000001)
    outcome = case_outcome(1, verdict, judged=at, digest="a", steps_run=3)
    assert outcome.status == STATUS_MISMATCH and [m.check for m in outcome.mismatches] == ["replica_loss"]
    assert case_outcome(2, verdict, judged=at, digest="a", steps_run=3).status == STATUS_OK


def test_once_states_differ_only_the_windows_first_losses_are_compared():
    """Rank 3's state went wrong mid-window: later losses differ from replicas because of it."""
    losses = [list(r) for r in LOSSES]
    losses[3][2] = 9.0  # rank 3's own loss after its state went wrong
    verdict, at = judge_exchange(_reports(["a", "a", "a", "b"], losses, REPLICAS), [0, 1, 2, 3])
    assert at == 0
    assert verdict.findings == (RankBlame(3, CAUSE_UPDATE, alternative_hops=((2, 3), (3, 0))),)


def test_an_unattributed_pattern_accuses_nobody_but_says_so():
    verdict = judge_state_hashes({0: "a", 1: "b", 2: "c", 3: "d"})
    for rank in range(WORLD):
        outcome = case_outcome(rank, verdict, judged=0, digest="x", steps_run=2)
        assert outcome.status == STATUS_OK and not outcome.mismatches
        assert outcome.detail["unattributed"] is True and outcome.detail["finding"]
    clean = case_outcome(0, judge_state_hashes({0: "a", 1: "a"}), judged=0, digest="a", steps_run=2)
    assert "unattributed" not in clean.detail and clean.status == STATUS_OK


def test_a_blamed_hop_accuses_its_receiver_only():
    verdict = judge_state_hashes({0: "a", 1: "a", 2: "b", 3: "c"})
    statuses = [case_outcome(r, verdict, judged=0, digest="", steps_run=1).status for r in range(WORLD)]
    assert statuses == [STATUS_OK, STATUS_OK, STATUS_MISMATCH, STATUS_OK]


# --- the contract ---------------------------------------------------------------------------------


def test_the_catalogue_offers_exactly_the_dtypes_the_module_runs():
    spec = SPECS["train_dp"]
    assert spec.distributed and spec.params["dtype"].options == tuple(DTYPES)  # type: ignore[attr-defined]
    assert spec.fault_sites[0] == "update"


def test_it_refuses_to_run_outside_a_distributed_run():
    params = {**SPECS["train_dp"].defaults, **SPECS["train_dp"].tiny}
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=1, params=params)
    workload = TrainDp(params)
    workload.prepare(ctx)
    ctx.begin_case(None)
    with pytest.raises(ValueError, match="distributed run"):
        workload.run(ctx, Case(index=0, workload="train_dp", seed=1, occurrence=0))
    with pytest.raises(ValueError, match="dtype"):
        TrainDp({"dtype": "float16"})
