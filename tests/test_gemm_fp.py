"""gemm_fp: silent on many clean rows, fires on high-bit flips at the output and the encoded operand,
names the flipped element, and stays silent on the negative control."""

from __future__ import annotations

import json

import pytest
import torch

from sdcscan.faults import FaultSpec
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case
from sdcscan.units import device_model
from sdcscan.workloads import SPECS, load
from sdcscan.workloads import calibration as calibrate
from sdcscan.workloads.base import Context

SHAPES = {
    "float32": [256, 256, 64],
    "float64": [256, 256, 64],
    "bfloat16": [256, 128, 32],
    "float16": [256, 128, 32],
}
CHECKER = {"float32": "float32", "float64": "float64", "bfloat16": "float32", "float16": "float32"}
SIGN = {"float32": 31, "float64": 63, "bfloat16": 15, "float16": 15}
EXP_HIGH = {"float32": 29, "float64": 61, "bfloat16": 13, "float16": 13}  # the exponent bit below the MSB
EXP_MSB = {"float32": 30, "float64": 62, "bfloat16": 14, "float16": 14}


@pytest.fixture
def table_path(calibration_here: str) -> str:
    """The calibration keyed to this CPU (see conftest)."""
    return calibration_here


def make(dtype: str, table: str, *, selftest: bool = False, **overrides):
    cls = load("gemm_fp")
    params = {
        **cls.spec.defaults,
        "dtypes": [dtype],
        "shapes": [SHAPES[dtype]],
        "repeats": [1],
        "checkers": [CHECKER[dtype]],
        "calibration": table,
        **overrides,
    }
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=7, params=params)
    workload = cls.for_selftest(params) if selftest else cls(params)
    workload.prepare(ctx)
    return workload, ctx


def run(workload, ctx, seed: int, fault: FaultSpec | None = None):
    ctx.begin_case(fault)
    return workload.run(ctx, Case(index=seed, workload="gemm_fp", seed=seed, occurrence=0))


@pytest.mark.parametrize("dtype", list(SHAPES))
def test_clean_cases_stay_silent_over_ten_thousand_rows(dtype, table_path):
    """≥ 10,240 clean rows per dtype across three input distributions: no row fires."""
    rows = 0
    for dist in ("abs_normal", "normal", "llm_like"):
        workload, ctx = make(dtype, table_path, inputs=dist)
        assert not ctx.notes
        for seed in range(14):
            outcome = run(workload, ctx, seed)
            assert outcome.status == STATUS_OK, (dist, outcome.mismatches)
            assert outcome.detail["max_ratio"] < 1.0
            rows += outcome.detail["rows_checked"]
    assert rows >= 10_000


@pytest.mark.parametrize("dtype", list(SHAPES))
@pytest.mark.parametrize("bit_of", [SIGN, EXP_HIGH])
def test_output_flip_is_detected_and_located(dtype, bit_of, table_path):
    """A sign or high exponent flip in C fails its row and column, and the Mismatch names that element."""
    workload, ctx = make(dtype, table_path)
    n = SHAPES[dtype][2]
    for seed in range(5):
        outcome = run(workload, ctx, seed, FaultSpec("bitflip", "output", seed, bit=bit_of[dtype]))
        assert ctx.injected["value_changed"]
        assert outcome.status == STATUS_MISMATCH
        i, j = divmod(ctx.injected["element"], n)
        assert f"{dtype} C[{i}, {j}] (row {i} and column {j} checks)" in outcome.mismatches[0].where


@pytest.mark.parametrize("dtype", list(SHAPES))
def test_flip_in_the_encoded_operand_is_detected(dtype, table_path):
    """B changed after its checksum was taken: the whole column of C it feeds is wrong, so many rows fail.

    fp32/fp64 see a sign flip of one B element. For bf16/fp16 an O(1) change of one B element is below the
    threshold (T grows with N·K·u), so the test plants a NaN; the self-test reports per-bit rates."""
    workload, ctx = make(dtype, table_path)
    low = dtype in ("bfloat16", "float16")
    for seed in range(4):
        spec = FaultSpec(
            "nan" if low else "bitflip", "operand_b_encoded", seed, bit=None if low else SIGN[dtype]
        )
        outcome = run(workload, ctx, seed, spec)
        assert outcome.status == STATUS_MISMATCH
        assert outcome.detail["bad_rows"] > 1


@pytest.mark.parametrize("dtype", list(SHAPES))
def test_negative_control_on_the_unencoded_operand_stays_silent(dtype, table_path):
    """A flip in A before the GEMM is consistent (C and the checksum both use it): the row check is blind."""
    workload, ctx = make(dtype, table_path)
    for seed in range(4):
        for bit in (0, EXP_HIGH[dtype], SIGN[dtype]):
            outcome = run(workload, ctx, seed, FaultSpec("bitflip", "operand_a", seed, bit=bit))
            assert ctx.injected is not None and outcome.status == STATUS_OK


def test_a_table_without_this_device_means_a_fresh_calibration_not_a_weaker_check(tmp_path):
    """No entry for this CPU in the named file: the unit calibrates itself, says so, stays silent on
    clean cases and still catches exponent flips with the V-ABFT threshold."""
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"schema": calibrate.SCHEMA, "entries": []}))
    workload, ctx = make("float32", str(path))
    assert any("calibrated on this unit" in n for n in ctx.notes)
    assert run(workload, ctx, 1).status == STATUS_OK
    outcome = run(workload, ctx, 1, FaultSpec("bitflip", "output", 3, bit=29))
    assert outcome.status == STATUS_MISMATCH and outcome.detail["threshold_source"] in ("fresh", "cache")
    assert outcome.mismatches[0].check == "vabft_float32"


def test_k_beyond_the_calibrated_range_scales_e_max(table_path):
    workload, _ = make("float32", table_path, shapes=[[8, 8192, 8]])
    entry = calibrate.lookup(
        calibrate.load_table(table_path), device_model(torch.device("cpu")), "float32", "float32"
    )
    found = workload.thresholds[0]
    assert found.source == "file"
    assert found.e_max == pytest.approx(entry["e_max"] * (8192 / entry["k_max"]) ** 0.5)


def test_digest_and_ops_are_deterministic(table_path):
    workload, ctx = make("float32", table_path, repeats=[2])
    first, again = run(workload, ctx, 3), run(workload, ctx, 3)
    assert first.digest == again.digest and first.digest
    m, k, n = SHAPES["float32"]
    assert first.ops == 2.0 * m * n * k * 2


def test_dtypes_cycle_by_occurrence(table_path):
    cls = load("gemm_fp")
    params = {**cls.spec.defaults, **cls.spec.tiny, "calibration": table_path}
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=1, params=params)
    workload = cls(params)
    workload.prepare(ctx)
    seen = []
    for occ in range(4):
        ctx.begin_case(None)
        seen.append(
            workload.run(ctx, Case(index=occ, workload="gemm_fp", seed=occ, occurrence=occ)).detail["dtype"]
        )
    assert seen == params["dtypes"]


def test_bad_parameters_are_rejected():
    cls = load("gemm_fp")
    with pytest.raises(ValueError, match="dtypes"):
        cls({"dtypes": ["int8"]})
    with pytest.raises(ValueError, match="one entry per dtype"):
        cls({"repeats": [1]})
    with pytest.raises(ValueError, match="inputs"):
        cls({"inputs": "cauchy"})


def test_reuse_product_is_a_selftest_switch_not_a_parameter():
    """Profiles cannot turn on product reuse: only `for_selftest` does, and a run recomputes every product."""
    cls = load("gemm_fp")
    assert "reuse_product" not in SPECS["gemm_fp"].defaults
    assert not cls(SPECS["gemm_fp"].tiny).reuse_product
    assert cls.for_selftest(SPECS["gemm_fp"].tiny).reuse_product


def test_reuse_product_recomputes_when_an_operand_changed(table_path):
    """Self-test mode must not hide an operand fault behind the remembered product."""
    workload, ctx = make("float32", table_path, selftest=True)
    assert run(workload, ctx, 2).status == STATUS_OK
    hit = run(workload, ctx, 2, FaultSpec("bitflip", "operand_b_encoded", 5, bit=31))
    assert hit.status == STATUS_MISMATCH
    assert run(workload, ctx, 2).status == STATUS_OK
