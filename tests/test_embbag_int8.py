"""embbag_int8 workload: 8- and 4-bit tables in both modes; clean cases pass, table, output and fetch
faults are caught, raw-id flips stay silent, and every bag output reaches the digest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import torch

from sdcscan.checks.embbag import exact, packing, realistic
from sdcscan.faults import FaultSpec, from_label
from sdcscan.outcomes import Case
from sdcscan.workloads import SPECS, load
from sdcscan.workloads.base import Context, has_selftest
from sdcscan.workloads.embbag_int8 import workload as embbag_int8
from sdcscan.workloads.embbag_int8.selftest_spec import BURSTS, FIXED_LAYOUT_MODELS, LAYOUT_MODELS, TABLE_RUNS
from sdcscan.workloads.embbag_int8.workload import EmbbagInt8, exact_table, fit_rows

VARIANTS = list(EmbbagInt8.selftest_variants)


def _ready(params: Mapping[str, Any], seed: int = 1) -> tuple[EmbbagInt8, Context]:
    workload = EmbbagInt8({**EmbbagInt8.spec.tiny, **params})
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=seed, params={})
    workload.prepare(ctx)
    return workload, ctx


def _seed_of(label: int | str) -> int:
    """A stable seed per self-test label (a bit, or a model's name)."""
    return label if isinstance(label, int) else sum(map(ord, label))


def _run(
    workload: EmbbagInt8, ctx: Context, seed: int, fault: FaultSpec | None = None, occurrence: int = 0
) -> Any:
    ctx.begin_case(fault)
    return workload.run(ctx, Case(seed, "embbag_int8", seed, occurrence))


def test_registered_with_the_selftest_protocol() -> None:
    """Registry entry, variants, bits and floors are what sdcscan selftest reads."""
    assert load("embbag_int8") is EmbbagInt8 and has_selftest(EmbbagInt8)
    assert set(VARIANTS) == {
        "exact",
        "exact_4bit",
        "realistic",
        "realistic_4bit",
        "exact_wide",
        "realistic_wide",
    }
    assert EmbbagInt8.negative_sites == ("indices",)
    assert EmbbagInt8.selftest_bits("exact", "table") == [*range(8), *BURSTS, *TABLE_RUNS]
    assert EmbbagInt8.selftest_bits("exact", "output") == [*range(32), *BURSTS]
    assert EmbbagInt8.selftest_bits("realistic", "fetch") == [*range(12), "wrong_rows"]  # 4096 rows
    assert EmbbagInt8.selftest_bits("exact_wide", "output") == [*FIXED_LAYOUT_MODELS, *LAYOUT_MODELS]
    assert EmbbagInt8.selftest_floor("exact_wide", "output", "stuck1:31") == 1.0
    assert EmbbagInt8.selftest_floor("exact_wide", "output", "run32:23") == 1.0  # the weighted sum
    assert EmbbagInt8.selftest_floor("realistic_wide", "output", "run32:23") == 0.99
    assert EmbbagInt8.selftest_bits("exact_wide", "indices") == []
    assert EmbbagInt8.selftest_floor("exact_4bit", "table", "burst:8") == 1.0  # the weighted sum sees it
    assert EmbbagInt8.selftest_floor("exact", "table", "run32:4") == 1.0
    assert EmbbagInt8.selftest_floor("realistic", "table", "run32:4") is None
    assert EmbbagInt8.selftest_floor("exact_4bit", "table", "burst:4") == 1.0
    assert EmbbagInt8.selftest_floor("exact", "fetch", "wrong_rows") == 1.0
    assert EmbbagInt8.selftest_floor("realistic", "fetch", "wrong_rows") == 0.99
    assert EmbbagInt8.selftest_floor("exact_wide", "output", "tile8") == 1.0
    for variant in ("exact", "exact_4bit"):
        assert [EmbbagInt8.selftest_floor(variant, s, 0) for s in ("output", "table", "fetch")] == [1.0] * 3
    assert EmbbagInt8.selftest_floor("exact", "indices", 3) is None
    assert [EmbbagInt8.selftest_floor("realistic", "table", b) for b in range(8)] == [None] * 4 + [0.99] * 4
    assert [EmbbagInt8.selftest_floor("realistic_4bit", "table", b) for b in range(8)] == [0.99] * 8
    assert EmbbagInt8.selftest_floor("realistic", "output", 30) is None
    assert EmbbagInt8.selftest_floor("realistic_4bit", "fetch", 5) == 0.99
    assert EmbbagInt8.spec.defaults["rows"] >= 1_000_000 and EmbbagInt8.spec.defaults["bits"] == [8, 4]


@pytest.mark.parametrize("mode", ["exact", "realistic"])
@pytest.mark.parametrize("weighted", [False, True])
def test_clean_cases_pass_are_deterministic_and_cycle_the_bit_widths(mode: str, weighted: bool) -> None:
    """Several cases pass; a second worker with the same run seed builds the same tables and digests;
    occurrences alternate 8- and 4-bit tables."""
    first, ctx1 = _ready({"mode": mode, "weighted": weighted})
    second, ctx2 = _ready({"mode": mode, "weighted": weighted})
    for seed in range(4):
        a, b = _run(first, ctx1, seed, occurrence=seed), _run(second, ctx2, seed, occurrence=seed)
        assert a.status == "ok" and not a.mismatches
        assert a.detail["bits"] == (8, 4)[seed % 2]
        assert a.digest == b.digest and a.ops == b.ops and a.ops_unit == "lookup"


def test_the_digest_folds_in_every_bag() -> None:
    """A change in the first or the last bag's output alone changes the case digest."""
    workload, ctx = _ready({"mode": "realistic"})
    clean = _run(workload, ctx, 0).digest
    for element in (0, EmbbagInt8.spec.tiny["bags"] * EmbbagInt8.spec.tiny["dim"] - 1):
        outcome = _run(workload, ctx, 0, FaultSpec("bitflip", "output", 1, element=element, bit=0))
        assert outcome.digest != clean, element


@pytest.mark.parametrize("variant", ["exact", "exact_4bit"])
@pytest.mark.parametrize("site", ["output", "table", "fetch"])
def test_exact_mode_catches_every_value_changing_flip(variant: str, site: str) -> None:
    """Every bit of an output word, of a pooled table byte (both nibbles), and of a fetched row id within
    the table, and the bursts and wrong-row fetches with a floor of 1; the table is restored after."""
    workload, ctx = _ready(EmbbagInt8.selftest_variants[variant])
    bits = EmbbagInt8.selftest_variants[variant]["bits"][0]
    pristine = workload.tables[bits].clone()
    for label in EmbbagInt8.selftest_bits(variant, site):
        if EmbbagInt8.selftest_floor(variant, site, label) != 1.0:
            continue
        for seed in range(3):
            outcome = _run(workload, ctx, seed, from_label(label, site, 100 * _seed_of(label) + seed))
            assert ctx.injected is not None
            if ctx.injected["value_changed"]:
                assert outcome.status == "mismatch", (label, seed)
                assert outcome.mismatches[0].check == "embbag_exact"
    assert torch.equal(workload.tables[bits], pristine)
    assert _run(workload, ctx, 0).status == "ok"


@pytest.mark.parametrize("variant", ["realistic", "realistic_4bit"])
def test_realistic_mode_catches_high_table_bits_and_wrong_rows(variant: str) -> None:
    """The bits the selftest holds to 99% (the top of each quantized value) and every wrong-row fetch,
    over a few cases; the check names realistic mode and the bags it recomputed."""
    workload, ctx = _ready(EmbbagInt8.selftest_variants[variant])
    sites = {
        "table": [b for b in range(8) if EmbbagInt8.selftest_floor(variant, "table", b)],
        "fetch": range(12),
    }
    for site, labels in sites.items():
        for bit in labels:
            for seed in range(3):
                outcome = _run(workload, ctx, seed, FaultSpec("bitflip", site, 7 * bit + seed, bit=bit))
                assert ctx.injected is not None and ctx.injected["value_changed"]
                assert outcome.status == "mismatch", (site, bit, seed)
                assert outcome.mismatches[0].check == "embbag_realistic"
                assert outcome.detail["flagged_bags"] >= 1


@pytest.mark.parametrize("variant", VARIANTS)
def test_raw_id_flips_stay_silent(variant: str) -> None:
    """Negative control: the lookup and the checksum both use the corrupted, re-hashed id."""
    workload, ctx = _ready(EmbbagInt8.selftest_variants[variant])
    for bit in range(0, 64, 3):
        outcome = _run(workload, ctx, bit, FaultSpec("bitflip", "indices", bit, bit=bit))
        assert ctx.injected is not None and outcome.status == "ok"


def _first_batch_ids(workload, ctx, seed: int, rows: int) -> torch.Tensor:
    """The row ids batch 0 of case `seed` reads, as `run` draws them (where every fault site strikes)."""
    lengths, _, starts = workload._case_draws(Case(seed, "embbag_int8", seed, 0))
    return workload._batch_inputs(ctx, starts[0], int(lengths.sum()), rows, first=True)[0]


def test_a_flip_in_a_row_of_scale_zero_is_recorded_as_no_change() -> None:
    """FBGEMM stores a constant 8-bit row with scale 0: its q bits change no value, so the trial is not
    counted (like +0.0 → −0.0), and the case passes."""
    workload, ctx = _ready({"mode": "realistic", "bits": [8]})
    packed = workload.tables[8]
    idx = _first_batch_ids(workload, ctx, 0, packed.shape[0])
    row = int(idx[0])  # the row the table fault strikes
    constant = (packed[:, -8:].contiguous().view(torch.float32)[:, 0] == 0).nonzero().flatten()
    assert constant.numel() > 0  # the mixed table holds some
    saved = packed[row].clone()
    packed[row] = packed[int(constant[0])]  # bag 0 now reads a constant row: no checksum changes
    workload.stats[8] = realistic.row_stats(packed, 8, weighted=False)
    outcome = _run(workload, ctx, 0, FaultSpec("bitflip", "table", 3, bit=6))
    assert ctx.injected is not None and ctx.injected["value_changed"] is False
    assert outcome.status == "ok"
    packed[row] = saved


def test_a_fetch_flip_that_wraps_onto_the_same_row_is_no_change() -> None:
    """Flipping bit 40 of a row id of a 2048-row table wraps back onto the intended row."""
    workload, ctx = _ready({"mode": "exact", "bits": [8]})
    outcome = _run(workload, ctx, 0, FaultSpec("bitflip", "fetch", 1, bit=40))
    assert ctx.injected is not None and ctx.injected["value_changed"] is False
    assert outcome.status == "ok"


@pytest.mark.parametrize("bits", [8, 4])
def test_exact_rows_carry_the_parity_of_their_index(bits: int) -> None:
    """Each row's sum of q has the parity of its index's popcount, so rows r and r XOR 2^k always differ."""
    packed = exact_table(0, 1000, 16, bits)
    q, _, _ = packing.split_packed(packed, bits)
    popcount = torch.tensor([bin(r).count("1") % 2 for r in range(1000)])
    assert torch.equal(q.sum(1, dtype=torch.int64) % 2, popcount)
    assert q.max() <= packing.layout(bits).q_max


def test_fit_rows_scales_down_to_the_memory_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """1/(4·cpus) of MemAvailable per CPU worker, half the free memory of a GPU, less what the worker
    needs whatever the rows; unknown memory keeps the requested rows."""
    assert fit_rows(1_000_000, 80, None) == 1_000_000
    assert fit_rows(1_000_000, 80, 80 * 1000) == 1000
    assert fit_rows(1_000_000, 80, 80 * 1000, fixed_bytes=80 * 400) == 600
    assert fit_rows(10, 80, 1) == 1
    monkeypatch.setattr(embbag_int8, "_mem_available", lambda: 64 << 30)
    monkeypatch.setattr(embbag_int8.os, "cpu_count", lambda: 8)
    assert embbag_int8.memory_share(torch.device("cpu")) == 2 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (70 << 30, 80 << 30))
    assert embbag_int8.memory_share(torch.device("cuda", 0)) == 35 << 30  # not divided among the CPUs


def test_short_memory_is_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare shrinks the tables (8- and 4-bit rows and their checksums) to what the id pool, its two
    prefix sums (one per bit width) and the check's buffers leave, and says so in a note."""
    per_row = (16 + 8) + (8 + 4) + 2 * embbag_int8.CHECK_BYTES_PER_ROW
    tiny = EmbbagInt8.spec.tiny
    pool_ids = tiny["bags"] * tiny["pooling"][1] + embbag_int8.POOL_ROOM
    fixed = 4 * pool_ids + 2 * 4 * (pool_ids + 1) + 3 * 4 * tiny["bags"] * tiny["dim"]
    monkeypatch.setattr(embbag_int8, "_mem_available", lambda: 4 * (per_row * 500 + fixed))
    monkeypatch.setattr(embbag_int8.os, "cpu_count", lambda: 1)
    workload, ctx = _ready({})
    assert {b: t.shape[0] for b, t in workload.tables.items()} == {8: 500, 4: 500}
    assert any("scaled down" in n for n in ctx.notes)
    assert _run(workload, ctx, 0).status == "ok"


@pytest.mark.parametrize(
    "params",
    [
        {"mode": "sum"},
        {"dim": 10},
        {"pooling": [5, 2]},
        {"pooling": [3]},
        {"bits": [5]},
        {"bits": []},
        {"dim": 12},
    ],
)
def test_bad_parameters_are_rejected(params: dict[str, Any]) -> None:
    """Unknown mode, a dim the CUDA kernels cannot take (4-bit: a multiple of 8), a bad pooling range or
    bit width."""
    with pytest.raises(ValueError):
        EmbbagInt8(params)


@pytest.mark.parametrize(("params", "key"), [({"bits": [5]}, "bits"), ({"bits": [8, 4], "dim": 12}, "dim")])
def test_the_catalogue_refuses_what_the_workload_cannot_run(params: dict[str, Any], key: str) -> None:
    """Refused at profile load (exit 2), not by every worker: a width other than 8 or 4, or a 4-bit
    table whose dim is not a multiple of 8."""
    spec = SPECS["embbag_int8"]
    merged = {**spec.defaults, **params}
    problems = [k for k, v in params.items() if spec.param_problem(k, v)]
    found = spec.rules_problem(merged)
    assert key in problems or (found is not None and found[0] == key)
    assert spec.rules_problem({**spec.defaults, "bits": [8], "dim": 12}) is None


def test_a_pool_id_changed_in_memory_after_prepare_is_caught() -> None:
    """Exact mode's checksums are prefix sums over the id pool as prepare drew it: a case whose lookups
    read a pool id changed later (a memory fault) fails in the bag that read it, and passes again once
    the id is restored. Long bags (a gather of the row sums would be exact only in int32) pass too."""
    workload, ctx = _ready({"weighted": True, "pooling": [1000, 4000]})
    assert _run(workload, ctx, 0).status == "ok"
    start = workload._case_draws(Case(0, "embbag_int8", 0, 0))[2][0]  # case 0's bag 0 reads here
    sums = workload.row_sums[8]
    intended = int(workload.ids[start])
    other = next(r for r in range(sums.numel()) if int(sums[r]) != int(sums[intended]))
    workload.ids[start] = other
    outcome = _run(workload, ctx, 0)
    assert outcome.status == "mismatch" and outcome.detail["bad_bags"] == 1
    assert "bag 0 sum" in outcome.mismatches[0].where
    workload.ids[start] = intended
    assert _run(workload, ctx, 0).status == "ok"


def test_cases_read_the_id_pool_at_their_own_offsets_and_faults_never_reach_it() -> None:
    """Ids are views of one pool per worker (the run seed sets it); cases differ; an `indices` or
    `fetch` fault corrupts a copy, so the case after a struck one equals a fresh worker's."""
    workload, ctx = _ready({})
    firsts = {_first_batch_ids(workload, ctx, s, 2048).data_ptr() for s in range(16)}
    assert len(firsts) > 8
    digests = {_run(workload, ctx, seed).digest for seed in range(8)}
    assert len(digests) == 8
    other, _ = _ready({}, seed=2)
    assert not torch.equal(other.ids, workload.ids)
    pool = workload.ids.clone()
    fresh, fresh_ctx = _ready({})
    for site, bit in (("indices", 40), ("fetch", 3), ("table", 6)):
        _run(workload, ctx, 3, FaultSpec("bitflip", site, 3, bit=bit))
        assert ctx.injected is not None and ctx.injected["site"] == site
        assert torch.equal(workload.ids, pool)
        assert _run(workload, ctx, 3).digest == _run(fresh, fresh_ctx, 3).digest


@pytest.mark.parametrize("variant", ["realistic", "realistic_4bit", "exact", "exact_4bit"])
def test_a_wrong_row_fetched_for_four_bags_is_caught(variant: str) -> None:
    """One address bit wrong for four lookups spaced by at least the longest bag: each in its own bag."""
    workload, ctx = _ready(EmbbagInt8.selftest_variants[variant])
    for seed in range(6):
        outcome = _run(workload, ctx, seed, from_label("wrong_rows", "fetch", seed))
        assert ctx.injected is not None and ctx.injected["value_changed"]
        positions = ctx.injected["elements"]
        lengths, _, _ = workload._case_draws(Case(seed, "embbag_int8", seed, 0))
        bags = torch.bucketize(torch.tensor(positions), torch.cumsum(lengths, 0), right=True)
        assert len(set(bags.tolist())) == 4, (positions, lengths)
        assert outcome.status == "mismatch" and outcome.detail["bad_bags"] >= 1, seed


def test_a_full_burst_of_a_4bit_byte_whose_values_sum_to_15_is_caught_by_the_weighted_sum() -> None:
    """All 8 bits flipped turn q into 15 - q in both nibbles: the row's plain sum stays when they sum to
    15 (exact mode's blind spot until issue 44), but the two columns weigh differently."""
    workload, ctx = _ready(EmbbagInt8.selftest_variants["exact_4bit"])
    rows = workload.tables[4].shape[0]
    for seed in range(20):
        body = workload.tables[4][int(_first_batch_ids(workload, ctx, seed, rows)[0])][:8]
        pairs = [i for i, b in enumerate(body.tolist()) if (b & 15) + (b >> 4) == 15]
        others = [i for i, b in enumerate(body.tolist()) if (b & 15) + (b >> 4) != 15]
        if pairs and others:
            break
    cancelling = _run(workload, ctx, seed, FaultSpec("burst", "table", 0, element=pairs[0], bit=0, param=8))
    assert ctx.injected is not None and ctx.injected["value_changed"] and cancelling.status == "mismatch"
    seen = _run(workload, ctx, seed, FaultSpec("burst", "table", 0, element=others[0], bit=0, param=8))
    assert seen.status == "mismatch"


@pytest.mark.parametrize("variant", ["exact_wide", "realistic_wide"])
def test_layout_faults_of_the_output_are_caught_at_the_wide_shape(variant: str) -> None:
    """Runs, strides, tiles and stuck column blocks of the (64 bags, 128) output: a clean case passes;
    one that changed values fails (measured, not guaranteed: changes can cancel in a bag, see below)."""
    workload, ctx = _ready(EmbbagInt8.selftest_variants[variant])
    assert _run(workload, ctx, 50).status == "ok"
    for label in LAYOUT_MODELS:
        outcome = _run(workload, ctx, 3, from_label(f"{label}:28", "output", 3))  # an exponent bit
        assert ctx.injected is not None and ctx.injected["value_changed"] and outcome.status == "mismatch"


def test_changes_that_cancel_in_a_bag_on_the_grid_are_seen_only_by_the_weighted_sum() -> None:
    """Two elements of one bag with the same exponent, one bit flipped up in one and down in the other, or
    two elements exchanged: the bag's plain sum and every element's place on the 2^-7 grid stay (the plain
    check alone cannot see it), the column-weighted sum moves."""
    out = torch.tensor([[5.0, 6.0, 1.0, 2.0]])  # 5 = 101b, 6 = 110b: bit 0 of the integer part differs
    units = (out * 128).to(torch.int32)
    expected = units.sum(1, dtype=torch.int32)
    weights = exact.column_weights(4, seed=1, device=torch.device("cpu"))
    weighted = (weights, (units * weights).sum(1, dtype=torch.int32))
    assert not bool(exact.exact_bad_bags(out, expected, weighted=weighted)[0])  # clean
    for changed in ([[4.0, 7.0, 1.0, 2.0]], [[6.0, 5.0, 1.0, 2.0]]):  # bit 0 flipped -1 and +1; exchanged
        assert not bool(exact.exact_bad_bags(torch.tensor(changed), expected)[0])
        assert bool(exact.exact_bad_bags(torch.tensor(changed), expected, weighted=weighted)[0])
    assert bool(exact.exact_bad_bags(torch.tensor([[4.0, 6.0, 1.0, 2.0]]), expected)[0])


def test_column_weights_are_distinct_odd_and_small_enough_for_int32() -> None:
    w = exact.column_weights(512, seed=7, device=torch.device("cpu"))
    assert w.dtype == torch.int32 and len(set(w.tolist())) == 512
    assert bool((w % 2 == 1).all()) and int(w.max()) < exact.COLUMN_WEIGHT_LIMIT
    assert torch.equal(w, exact.column_weights(512, seed=7, device=torch.device("cpu")))


@pytest.mark.parametrize("variant", ["exact", "exact_4bit", "exact_wide"])
def test_the_same_bit_flipped_across_a_run_of_a_table_row_is_caught(variant: str) -> None:
    """Issue 44: a run of 32 bytes of one table row, one bit flipped in each, cancelled in the bag sums 7
    times in 40 (bits flipping up and down alike). Every bit, 5 seeds each: caught every time."""
    workload, ctx = _ready(EmbbagInt8.selftest_variants[variant])
    for bit in range(8):
        for seed in range(5):
            outcome = _run(workload, ctx, seed, from_label(f"run32:{bit}", "table", seed))
            assert ctx.injected is not None and ctx.injected["value_changed"], (bit, seed)
            assert outcome.status == "mismatch", (variant, bit, seed)


@pytest.mark.parametrize("dim", [8, 12, 128, 2040, 2048])
def test_the_row_parity_read_as_words_is_the_parity_of_the_row_sum(dim: int) -> None:
    """The table's per-row parity, taken eight bytes at a time where the width allows, is the row sum's."""
    from sdcscan.workloads.embbag_int8.workload import _row_sum_parity

    q = torch.randint(0, 256, (500, dim), generator=torch.Generator().manual_seed(dim), dtype=torch.uint8)
    q[0] = 255  # the largest lane sums
    assert torch.equal(_row_sum_parity(q), q.sum(1, dtype=torch.int64) & 1)
