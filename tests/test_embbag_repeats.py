"""embbag_int8 `repeats`: a case runs that many batches of `bags` bags, each at its own offset in the id
pool. One batch is exactly the case before the parameter existed; more batches are all looked up,
checked, counted and digested; faults strike batch 0; a bad value is refused."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import torch

from sdcscan.checks import counter_rng
from sdcscan.checks.digest import Fingerprint
from sdcscan.checks.embbag import packing
from sdcscan.faults import FaultSpec
from sdcscan.outcomes import Case, Outcome
from sdcscan.workloads import SPECS
from sdcscan.workloads.base import Context
from sdcscan.workloads.embbag_int8.workload import LENGTHS_ROOM, MAX_RECORDED, EmbbagInt8

MODES = ["exact", "realistic"]


def _small(mode: str, **params: Any) -> dict[str, Any]:
    """The selftest's small 8-bit variant of `mode` (~1 ms a batch), weighted, with `params` on top."""
    return {**EmbbagInt8.selftest_variants[mode], "weighted": True, **params}


def _ready(params: Mapping[str, Any], seed: int = 1) -> tuple[EmbbagInt8, Context]:
    workload = EmbbagInt8(params)
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=seed, params={})
    workload.prepare(ctx)
    return workload, ctx


def _run(workload: EmbbagInt8, ctx: Context, seed: int, fault: FaultSpec | None = None) -> Outcome:
    ctx.begin_case(fault)
    return workload.run(ctx, Case(seed, "embbag_int8", seed, 0))


def _reference_digest(workload: EmbbagInt8, ctx: Context, seed: int, repeats: int | None) -> str:
    """The digest written out by hand: the counter generator picks the window of the lengths pool, then
    one pool offset per batch (`repeats` None: one batch); each batch's output is fingerprinted in order."""
    p = workload.p
    lo, hi = p["pooling"]
    lengths_pool = counter_rng.below(ctx.run_seed ^ 0x1E9, p["bags"] + LENGTHS_ROOM, hi - lo + 1, "cpu") + lo
    window = counter_rng.host_below(seed, 0, LENGTHS_ROOM + 1)
    lengths = lengths_pool[window : window + p["bags"]].to(torch.int32)
    count = int(lengths.sum())
    draws = 1 if repeats is None else repeats
    starts = [counter_rng.host_below(seed, 1 + i, workload.ids.numel() - count + 1) for i in range(draws)]
    offsets = torch.cumsum(lengths, 0, dtype=torch.int32) - lengths
    fingerprint = Fingerprint()
    for start in starts:
        weights = None if workload.weights is None else workload.weights[start : start + count]
        idx = workload.ids[start : start + count]
        fingerprint.tensor(packing.embedding_bag(workload.tables[8], 8, idx, offsets, weights))
    return fingerprint.hexdigest()


@pytest.fixture
def corrupt_call(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[set[int]], None]]:
    """corrupt_call(calls): the op's outputs of those calls (0 = the first batch) come back with 1.0
    added to every element, as a device that miscomputes a whole batch would return them."""

    def arm(calls: set[int]) -> None:
        made = iter(range(1 << 30))
        real = packing.embedding_bag

        def op(*args: Any) -> torch.Tensor:
            out = real(*args)
            return out + 1.0 if next(made) in calls else out

        monkeypatch.setattr(packing, "embedding_bag", op)

    yield arm


@pytest.mark.parametrize("mode", MODES)
def test_one_batch_is_the_case_before_repeats_existed(mode: str) -> None:
    """repeats 1 (the default) makes the digest, lookups and counters of a case without the parameter,
    and that digest is the one drawn and fingerprinted by hand the way cases always were."""
    plain, plain_ctx = _ready(_small(mode))
    once, once_ctx = _ready(_small(mode, repeats=1))
    for seed in range(3):
        a, b = _run(plain, plain_ctx, seed), _run(once, once_ctx, seed)
        assert a.status == b.status == "ok"
        assert a.digest == b.digest == _reference_digest(plain, plain_ctx, seed, None)
        assert (a.ops, a.detail) == (b.ops, b.detail)
        assert a.detail["rows_checked"] == 8


@pytest.mark.parametrize("mode", MODES)
def test_three_batches_are_deterministic_distinct_and_count_three_times(mode: str) -> None:
    """Two workers agree; the digest folds in all three batches (not the one-batch digest); lookups,
    checked bags and the realistic check's counters add up over the batches."""
    first, ctx1 = _ready(_small(mode, repeats=3))
    second, ctx2 = _ready(_small(mode, repeats=3))
    once, once_ctx = _ready(_small(mode))
    for seed in range(3):
        a, b, one = _run(first, ctx1, seed), _run(second, ctx2, seed), _run(once, once_ctx, seed)
        assert a.status == "ok" and not a.mismatches
        assert a.digest == b.digest == _reference_digest(first, ctx1, seed, 3)
        assert a.digest != one.digest
        assert a.ops == 3 * one.ops and a.ops_unit == "lookup"
        assert a.detail["rows_checked"] == 3 * one.detail["rows_checked"] == 24
    _, _, starts = first._case_draws(Case(0, "embbag_int8", 0, 0))
    assert len(set(starts)) == 3  # each batch reads its own stretch of the pool


@pytest.mark.parametrize("mode", MODES)
def test_an_output_fault_strikes_batch_0_and_is_caught(mode: str) -> None:
    """The flip lands in batch 0 (no pass index is recorded: the site is passed once a case), the case
    is a mismatch naming batch 0, and the digest differs from the clean case's."""
    workload, ctx = _ready(_small(mode, repeats=3))
    clean = _run(workload, ctx, 2)
    outcome = _run(workload, ctx, 2, FaultSpec("bitflip", "output", 5, element=3, bit=30))
    assert ctx.injected is not None and ctx.injected["site"] == "output" and "repeat" not in ctx.injected
    assert outcome.status == "mismatch" and outcome.detail["bad_bags"] == 1
    assert outcome.mismatches[0].where.startswith("8-bit batch 0, bag 0")
    assert outcome.digest != clean.digest


@pytest.mark.parametrize("mode", MODES)
def test_a_table_fault_is_caught_and_restored(mode: str) -> None:
    """The table row a bag of batch 0 reads is corrupted for the case and restored after it."""
    workload, ctx = _ready(_small(mode, repeats=3))
    pristine = workload.tables[8].clone()
    clean = _run(workload, ctx, 4)
    outcome = _run(workload, ctx, 4, FaultSpec("bitflip", "table", 1, bit=7))
    assert ctx.injected is not None and ctx.injected["value_changed"]
    assert outcome.status == "mismatch" and "batch 0, bag 0" in outcome.mismatches[0].where
    assert torch.equal(workload.tables[8], pristine)
    assert _run(workload, ctx, 4).digest == clean.digest


@pytest.mark.parametrize("mode", MODES)
def test_a_miscomputed_later_batch_changes_the_digest_and_is_named(
    mode: str, corrupt_call: Callable[[set[int]], None]
) -> None:
    """A wrong output in batch 2 alone is checked and digested like batch 0's."""
    workload, ctx = _ready(_small(mode, repeats=3))
    clean = _run(workload, ctx, 0)
    corrupt_call({2})
    outcome = _run(workload, ctx, 0)
    assert outcome.status == "mismatch" and outcome.detail["bad_bags"] == 8
    assert {m.where.split(" bag")[0] for m in outcome.mismatches} == {"8-bit batch 2,"}
    assert outcome.digest != clean.digest


def test_mismatch_records_stop_at_the_limit_over_all_batches(
    corrupt_call: Callable[[set[int]], None],
) -> None:
    """Every bag of every batch wrong: all are counted, MAX_RECORDED are recorded, batch 0's first."""
    workload, ctx = _ready(_small("realistic", repeats=3, bags=5))
    corrupt_call({0, 1, 2})
    outcome = _run(workload, ctx, 1)
    assert outcome.detail["bad_bags"] == 15 and outcome.detail["flagged_bags"] == 15
    assert len(outcome.mismatches) == MAX_RECORDED == 8
    places = [m.where.split(" (")[0] for m in outcome.mismatches]
    assert places[:6] == [f"8-bit batch 0, bag {b}" for b in range(5)] + ["8-bit batch 1, bag 0"]


@pytest.mark.parametrize("repeats", [0, -1, 2.5, True])
def test_a_bad_repeats_is_refused_at_construction(repeats: Any) -> None:
    """The workload and the catalogue both refuse a count of batches that is not a positive integer."""
    with pytest.raises(ValueError, match="repeats"):
        EmbbagInt8({"repeats": repeats})
    assert SPECS["embbag_int8"].param_problem("repeats", repeats) is not None


def test_a_good_repeats_is_accepted() -> None:
    """The other side of the refusal: 1 and 2 pass both the workload and the catalogue."""
    for repeats in (1, 2):
        assert EmbbagInt8({"repeats": repeats}).p["repeats"] == repeats
        assert SPECS["embbag_int8"].param_problem("repeats", repeats) is None
