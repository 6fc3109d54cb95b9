"""`matmul_golden`: exact references, bitwise mismatch records with XOR masks."""

from __future__ import annotations

import pytest
import torch

from sdcscan.errors import ProfileError
from sdcscan.faults import FaultSpec, from_label
from sdcscan.outcomes import Case, Outcome
from sdcscan.profile import profile_from_data
from sdcscan.workloads import SPECS, base
from sdcscan.workloads.base import Context
from sdcscan.workloads.matmul_golden.spec import golden_kronecker_split
from sdcscan.workloads.matmul_golden.workload import (
    MAX_RECORDED,
    BadElements,
    MatmulGolden,
    bitwise_mismatches,
    golden_reference,
    kronecker_pool,
)

RUN_SEED = 5


def _prepared(params: dict) -> tuple[MatmulGolden, Context]:
    merged = {**SPECS["matmul_golden"].defaults, **params}
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=RUN_SEED, params=merged)
    workload = MatmulGolden(merged)
    workload.prepare(ctx)
    return workload, ctx


def _run(params: dict, fault: FaultSpec | None) -> Outcome:
    workload, ctx = _prepared(params)
    ctx.begin_case(fault)
    return workload.run(ctx, Case(index=0, workload="matmul_golden", seed=11, occurrence=0))


def test_golden_reference_matches_hand_worked_product():
    a = torch.tensor([[1, 2], [3, 4]])
    b = torch.tensor([[5, 6], [7, 8]])
    assert golden_reference(a, b).tolist() == [[19, 22], [43, 50]]


def test_low_precision_products_of_small_integers_are_exact_in_every_dtype():
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-8, 9, (32, 512), generator=g)
    b = torch.randint(-8, 9, (512, 24), generator=g)
    ref = golden_reference(a, b).to(torch.float32)
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        assert torch.equal(a.to(dtype) @ b.to(dtype), ref.to(dtype)), dtype


def test_bitwise_mismatches_record_index_values_and_xor_mask():
    expected = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float32)
    out = expected.clone()
    out[1, 0] = -3.0  # sign bit
    found, count = bitwise_mismatches(out, expected, "float32", repeat=2)
    assert count == 1
    (m,) = found
    assert m.where == "float32 out[1, 0] (repeat 2)"
    assert (m.expected, m.actual, m.mask) == ("3.0", "-3.0", "0x80000000")


def test_bitwise_mismatches_count_every_bad_element_but_record_a_few():
    expected = torch.zeros(64, 64, dtype=torch.float16)
    out = torch.ones(64, 64, dtype=torch.float16)
    found, count = bitwise_mismatches(out, expected, "float16", repeat=0)
    assert count == 64 * 64 and len(found) == 8
    assert found[0].mask == "0x3c00"


# --- the closed-form (Kronecker) reference for GPU-sized shapes


@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (4, 9, 6), (12, 18, 8), (30, 7, 20), (64, 256, 48)])
@pytest.mark.parametrize("max_abs", [1, 3, 8])
def test_kronecker_pool_product_is_the_exact_int64_product(m, k, n, max_abs):
    """(A1·B1) ⊗ (A2·B2) equals the int64 product of the expanded operands, square or not."""
    split = golden_kronecker_split(m, k, n)
    a, b, c = kronecker_pool(split, max_abs, torch.Generator().manual_seed(m * k * n), dtype=torch.int64)
    assert (a.shape, b.shape) == ((m, k), (k, n))
    assert torch.equal(c, golden_reference(a, b))
    assert int(a.abs().min()) > 0 and int(a.abs().max()) <= max_abs  # no zeros: no zero rows or columns
    assert int(b.abs().min()) > 0 and int(b.abs().max()) <= max_abs
    a32, b32, c32 = kronecker_pool(split, max_abs, torch.Generator().manual_seed(m * k * n))
    assert torch.equal(a32, a.float()) and torch.equal(b32, b.float()) and torch.equal(c32, c.float())


def test_kronecker_operands_use_the_whole_range_up_to_max_abs():
    """max_abs 8 splits into factors of at most 2 and 4: the expanded operands reach ±8."""
    a, b, _ = kronecker_pool(golden_kronecker_split(64, 64, 64), 8, torch.Generator().manual_seed(1))
    assert set(a.abs().unique().tolist()) == {1.0, 2.0, 3.0, 4.0, 6.0, 8.0} == set(b.abs().unique().tolist())


def test_kronecker_split_puts_each_dimension_near_its_square_root():
    assert golden_kronecker_split(8192, 8192, 8192) == ((64, 128), (64, 128), (64, 128))
    assert golden_kronecker_split(4096, 12288, 1) == ((64, 64), (96, 128), (1, 1))
    assert golden_kronecker_split(8191, 8192, 8192) == ((1, 8191), (64, 128), (64, 128))  # 134 M: allowed


def test_kronecker_refuses_shapes_whose_small_products_stay_large():
    """Two prime dimensions leave an 8191 x 8191 x 128 product: the workload, the catalogue's rule and
    the profile loader (exit 2) all refuse it; the direct reference takes the same shape."""
    shape = {"m": 8191, "k": 8191, "n": 8192, "max_abs": 2, "dtypes": ["float32"], "repeats": [1]}
    with pytest.raises(ValueError, match="divisors near their square roots"):
        golden_kronecker_split(8191, 8191, 8192)
    with pytest.raises(ValueError, match="matmul_golden: the kronecker reference"):
        MatmulGolden({**shape, "reference": "kronecker"})
    spec = SPECS["matmul_golden"]
    problem = spec.rules_problem({**spec.defaults, **shape, "reference": "kronecker"})
    assert problem is not None and problem[0] == "reference"
    assert spec.rules_problem({**spec.defaults, **shape}) is None
    doc = {
        "version": 1,
        "workloads": [{"name": "matmul_golden", "cuda_params": {**shape, "reference": "kronecker"}}],
    }
    with pytest.raises(ProfileError, match=r"cuda_params\.reference \(matmul_golden\): the kronecker") as err:
        profile_from_data(doc, label="p.yaml", default_name="p")
    assert err.value.exit_code == 2


def test_the_direct_reference_stays_the_default_and_draws_the_pool_it_always_drew():
    """CPU profiles compute the same data (digests) as before the kronecker option existed."""
    assert SPECS["matmul_golden"].defaults["reference"] == "direct"
    workload, _ = _prepared({"m": 16, "k": 64, "n": 24})
    g = torch.Generator().manual_seed(RUN_SEED ^ 0x5EED)
    a0 = torch.randint(-8, 9, (16, 64), generator=g, dtype=torch.int64)
    b0 = torch.randint(-8, 9, (64, 24), generator=g, dtype=torch.int64)
    assert workload.a0 is not None and workload.b0 is not None and workload.ref0 is not None
    assert torch.equal(workload.a0, a0.float()) and torch.equal(workload.b0, b0.float())
    assert torch.equal(workload.ref0, golden_reference(a0, b0).float())


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_a_kronecker_case_is_clean_and_sees_a_flipped_output_bit(dtype):
    params = {"m": 36, "k": 48, "n": 20, "reference": "kronecker", "dtypes": [dtype], "repeats": [3]}
    clean = _run(params, None)
    assert (clean.status, clean.detail["bad_elements"], clean.mismatches) == ("ok", 0, [])
    hit = _run(params, FaultSpec("bitflip", "output", seed=3, element=5 * 20 + 7, bit=-2, repeat=1))
    assert (hit.status, hit.detail["bad_elements"]) == ("mismatch", 1)
    assert hit.mismatches[0].where == f"{dtype} out[5, 7] (repeat 1)"


# --- device-side tally: one wait per case, the same outcome as a comparison per repeat


@pytest.mark.parametrize("every_repeat", [False, True])  # the CPU's way, and a GPU's
def test_tally_counts_every_repeat_and_records_the_first_bad_repeat(every_repeat: bool) -> None:
    """Counts add over repeats; records come from the first bad repeat, in row-major order, with masks."""
    expected = torch.arange(40, dtype=torch.float32).reshape(10, 4)
    tally = BadElements(expected, 3, every_repeat=every_repeat)
    tally.add(expected.clone(), 0)
    first = expected.clone()
    first[7, 1], first[2, 3] = float("nan"), -3.0  # row-major order: [2, 3] before [7, 1]
    tally.add(first, 1)
    later = expected.clone()
    later[0, 0] = 99.0
    tally.add(later, 2)
    found, count = tally.findings("float32")
    assert count == 3
    assert [m.where for m in found] == ["float32 out[2, 3] (repeat 1)", "float32 out[7, 1] (repeat 1)"]
    mask = hex(0x41300000 ^ 0xC0400000)  # 11.0 and -3.0
    assert (found[0].expected, found[0].actual, found[0].mask) == ("11.0", "-3.0", mask)


@pytest.mark.parametrize("every_repeat", [False, True])  # the CPU's way, and a GPU's
def test_tally_keeps_the_first_eight_bad_elements_across_rows(every_repeat: bool) -> None:
    expected = torch.zeros(64, 16, dtype=torch.float16)
    out = expected.clone()
    out[[3, 3, 9, 20, 21, 40, 41, 50, 60, 63], [0, 5, 1, 2, 3, 4, 5, 6, 7, 8]] = 1.0
    tally = BadElements(expected, 3, every_repeat=every_repeat)
    tally.add(expected.clone(), 0)
    tally.add(out, 1)
    found, count = tally.findings("float16")
    assert count == 10 and len(found) == MAX_RECORDED
    assert found[0].where == "float16 out[3, 0] (repeat 1)"
    assert found[-1].where == "float16 out[50, 6] (repeat 1)"  # the 8th of 10, in row-major order
    assert found[0].mask == "0x3c00"


@pytest.mark.parametrize("every_repeat", [False, True])  # the CPU's way, and a GPU's
def test_tally_of_clean_repeats_and_of_a_signed_zero_finds_nothing(every_repeat: bool) -> None:
    """+0.0 and -0.0 are one value, as they were to torch.equal: a kernel may sum -0.0 products to -0.0."""
    expected = torch.zeros(4, 4)
    tally = BadElements(expected, 3, every_repeat=every_repeat)
    tally.add(expected.clone(), 0)
    tally.add(-expected, 1)
    assert tally.findings("float32") == ([], 0)


@pytest.mark.parametrize("block", [1, 3, 7])
def test_blocks_of_repeats_give_the_outcome_of_a_check_per_repeat(
    monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """Repeats compared and fingerprinted in blocks of 1, 3 (the last one shorter) or all 7: the clean
    digest is one, and a flip in repeat 0, 2, 3 or 6 is counted and named at that repeat, in every block."""
    params = {"m": 36, "k": 48, "n": 20, "dtypes": ["float32"], "repeats": [7]}
    monkeypatch.setitem(base.CHECK_BLOCK_BYTES, "cpu", block * 36 * 20 * 4)
    clean = _run(params, None)
    assert (clean.status, clean.detail["bad_elements"]) == ("ok", 0)
    digests = {clean.digest}
    for repeat in (0, 2, 3, 6):
        hit = _run(params, FaultSpec("bitflip", "output", seed=3, element=4 * 20 + 9, bit=-2, repeat=repeat))
        assert (hit.status, hit.detail["bad_elements"]) == ("mismatch", 1)
        assert hit.mismatches[0].where == f"float32 out[4, 9] (repeat {repeat})"
        digests.add(hit.digest)
    assert len(digests) == 5
    monkeypatch.setitem(base.CHECK_BLOCK_BYTES, "cpu", 36 * 20 * 4)
    assert _run(params, None).digest == clean.digest  # blocks change no digest


@pytest.mark.parametrize("every_repeat", [False, True])  # the CPU's way, and a GPU's
def test_a_block_tally_equals_one_tally_per_repeat(every_repeat: bool) -> None:
    """add_block over a stack of 4 outputs (clean, bad, signed zero, bad) counts and records as 4 adds."""
    expected = torch.arange(-20, 20, dtype=torch.float32).reshape(10, 4)
    stack = expected.expand(4, 10, 4).clone()
    stack[1, 3, 2] = 7.5
    stack[2] = torch.where(expected == 0, -expected, expected)  # -0.0 where 0.0 is expected: no change
    stack[3, 0, 0] = float("nan")
    blocked, single = (
        BadElements(expected, 4, every_repeat=every_repeat),
        BadElements(expected, 4, every_repeat=every_repeat),
    )
    blocked.add_block(stack, 0)
    for r in range(4):
        single.add(stack[r], r)
    assert blocked.findings("float32") == single.findings("float32")
    assert blocked.findings("float32")[1] == 2


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_fault_model_of_the_selftest_fails_the_golden(dtype: str) -> None:
    """matmul_golden is swept by `sdcscan selftest`: every bit and fault model at its output fails the
    case whenever it changed a value (floor 1.0), and a clean case passes."""
    assert base.has_selftest(MatmulGolden) and MatmulGolden.negative_sites == ()
    params = dict(MatmulGolden.selftest_variants[dtype])
    workload, ctx = _prepared(params)
    labels = MatmulGolden.selftest_bits(dtype, "output")
    assert {"burst:8", "run32", "tile16", "stuck1", "wrong_rows"} <= set(labels)
    assert all(MatmulGolden.selftest_floor(dtype, "output", label) == 1.0 for label in labels)
    case = Case(index=0, workload="matmul_golden", seed=11, occurrence=0)
    ctx.begin_case(None)
    assert workload.run(ctx, case).status == "ok"
    for label in labels:
        for seed in range(2):
            ctx.begin_case(from_label(label, "output", seed))
            outcome = workload.run(ctx, case)
            assert ctx.injected is not None
            assert outcome.status == ("mismatch" if ctx.injected["value_changed"] else "ok"), (label, seed)


# --- fp8 slots (issue 44: the datapath H100/H200 inference and training run) ---------------------

FP8_SHAPE = {"m": 32, "k": 128, "n": 48, "max_abs": 8}


@pytest.mark.parametrize("slot", ["float8_e4m3fn", "float8_e5m2"])
def test_an_fp8_slot_is_exact_on_clean_cases_and_fails_a_struck_one(slot: str) -> None:
    """fp8 operands holding small integers multiply into fp32 exactly (the int64 golden, bit for bit), so a
    clean case passes with no tolerance; one flipped low mantissa bit of one output element fails it."""
    params = {**FP8_SHAPE, "dtypes": [slot], "repeats": [2]}
    clean = _run(params, None)
    assert clean.status == "ok" and clean.detail == {
        "dtype": slot,
        "bad_elements": 0,
        "check_kernel": "torch",
    }
    hit = _run(params, FaultSpec("bitflip", "output", seed=3, element=5 * 48 + 7, bit=0, repeat=1))
    assert hit.status == "mismatch" and hit.detail["bad_elements"] == 1
    assert hit.mismatches[0].where == f"{slot} out[5, 7] (repeat 1)"


def test_fp8_operands_hold_every_integer_the_rule_allows() -> None:
    from sdcscan.checks import fp8

    values = torch.arange(-8, 9, dtype=torch.float32).view(1, -1)
    for slot in fp8.OPERANDS:
        a8, b8 = fp8.operands(values, values.t(), slot)
        assert torch.equal(a8.float(), values) and torch.equal(b8.float(), values.t()), slot
        assert b8.stride() == (1, 1) or b8.t().is_contiguous()  # B column-major, as cuBLASLt wants
    assert not torch.equal(torch.tensor([9.0, 17.0]).to(torch.float8_e5m2).float(), torch.tensor([9.0, 17.0]))


def test_the_fp8_slots_rules_refuse_values_or_shapes_they_cannot_hold() -> None:
    spec = SPECS["matmul_golden"]
    good = {**spec.defaults, **FP8_SHAPE, "dtypes": ["float32", "float8_e5m2"], "repeats": [1, 1]}
    assert spec.rules_problem(good) is None
    problem = spec.rules_problem({**good, "max_abs": 9})
    assert problem is not None and problem[0] == "max_abs" and "up to 8" in problem[1]
    problem = spec.rules_problem({**good, "n": 40})
    assert problem is not None and "multiples of 16" in problem[1]
    assert spec.rules_problem({**good, "dtypes": ["float32", "float16"], "n": 40}) is None  # fp8 only


def test_the_fp8_plain_op_is_the_scaled_product() -> None:
    """Efficiency divides by the rate of the op the slot runs: the peak times `_scaled_mm` on fp8."""
    from sdcscan.peaks.rates import _matmul_call
    from sdcscan.workloads.workload_spec import PlainOp

    call, flops = _matmul_call(PlainOp("matmul", "float8_e4m3fn", (32, 64, 32), 1.0), torch.device("cpu"))
    out = call()
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == (32, 32)
    assert flops == 2.0 * 32 * 64 * 32


def test_an_fp8_slot_the_device_cannot_run_is_reported_not_covered_never_failed(monkeypatch) -> None:
    """Before sm_89 a GPU has no fp8 datapath: its fp8 cases check nothing, pass with no ops counted (the
    proof counts only checked work), and the unit's notes say which slot was not covered and why."""
    from sdcscan.checks import fp8

    def refuse(*_args: object, **_kwargs: object) -> torch.Tensor:
        raise RuntimeError(
            "torch._scaled_mm is only supported on CUDA devices with compute capability >= 9.0"
        )

    monkeypatch.setattr(fp8, "scaled_mm", refuse)
    params = {**FP8_SHAPE, "dtypes": ["float8_e5m2", "float32"], "repeats": [1, 1]}
    workload, ctx = _prepared(params)
    assert ctx.notes == [
        "matmul_golden: float8_e5m2 is not covered on this unit (torch._scaled_mm is only supported on CUDA "
        "devices with compute capability >= 9.0); its cases check nothing"
    ]
    ctx.begin_case(None)
    skipped = workload.run(ctx, Case(index=0, workload="matmul_golden", seed=11, occurrence=0))
    assert skipped.status == "ok" and skipped.ops == 0.0 and "uncovered" in skipped.detail
    ctx.begin_case(None)
    checked = workload.run(ctx, Case(index=1, workload="matmul_golden", seed=12, occurrence=1))
    assert checked.status == "ok" and checked.ops > 0 and checked.detail["dtype"] == "float32"
