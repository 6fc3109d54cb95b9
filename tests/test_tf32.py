"""matmul_golden's TF32 slot (issue 44): exact where the unit has the datapath, reported as not covered
where it has none (every CPU so far), never failed for lacking it.

A CPU cannot run TF32, so a unit that can is emulated here: operands cut to TF32's 10 mantissa bits
before an fp32 product, as a tensor core takes them. What the emulation stands in for is the hardware
only; the probe, the slot, its check and the self-test are the shipped code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch

from sdcscan.checks import tf32
from sdcscan.checks.limits import TF32_EXACT_INT, TF32_SLOT
from sdcscan.costmodel import counting
from sdcscan.costmodel.device_rates import H100, H200, XEON_AMX_CORE, _work_rate
from sdcscan.faults import FaultSpec
from sdcscan.outcomes import UNCOVERED, Case
from sdcscan.selftest.sweep import run_selftest
from sdcscan.workloads import SPECS
from sdcscan.workloads.base import Context
from sdcscan.workloads.matmul_golden.workload import MatmulGolden

PARAMS = {"m": 32, "k": 128, "n": 48, "max_abs": 8, "dtypes": [TF32_SLOT, "float32"], "repeats": [3, 1]}


def _prepared(params: dict[str, object]) -> tuple[MatmulGolden, Context]:
    merged = {**SPECS["matmul_golden"].defaults, **params}
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=5, params=merged)
    workload = MatmulGolden(merged)
    workload.prepare(ctx)
    return workload, ctx


def _cut_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 values with their 13 low mantissa bits cleared: TF32's 10-bit mantissa, cut toward zero."""
    return (x.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32).view(x.shape)


def _rounded_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 values rounded to the nearest TF32 value, ties to even."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x0FFF + ((bits >> 13) & 1)) & ~0x1FFF).view(torch.float32).view(x.shape)


@contextlib.contextmanager
def _emulated_tf32(_device: torch.device, *, wrong: bool = False) -> Iterator[None]:
    """Stand-in for `tf32.products` on a unit with TF32 tensor cores (`wrong`: a faulty one whose every
    product is off by one)."""
    real, real_method = torch.matmul, torch.Tensor.__matmul__

    def matmul(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        c = real(_cut_to_tf32(a), _cut_to_tf32(b), out=out)
        return c.add_(1.0) if wrong else c

    torch.matmul = matmul  # type: ignore[assignment]
    torch.Tensor.__matmul__ = matmul  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.matmul = real
        torch.Tensor.__matmul__ = real_method  # type: ignore[method-assign]


def _case(occurrence: int = 0) -> Case:
    return Case(index=occurrence, workload="matmul_golden", seed=11, occurrence=occurrence)


def test_tf32_holds_every_integer_up_to_its_limit_and_not_one_more() -> None:
    """The slot's exactness argument: integers |x| <= 2^11 keep their value in TF32, cut or rounded."""
    inside = torch.arange(-TF32_EXACT_INT, TF32_EXACT_INT + 1, dtype=torch.float32)
    for to_tf32 in (_cut_to_tf32, _rounded_to_tf32):
        assert torch.equal(to_tf32(inside), inside), to_tf32.__name__
        assert to_tf32(torch.tensor([TF32_EXACT_INT + 1.0])).item() != TF32_EXACT_INT + 1, to_tf32.__name__
        assert to_tf32(torch.tensor([tf32.PROBE])).item() == 1.0  # the probe's value: 1.0 in TF32


def test_a_cpu_has_no_tf32_datapath_so_its_slot_is_reported_not_covered_never_failed() -> None:
    workload, ctx = _prepared(PARAMS)
    assert ctx.notes == [
        "matmul_golden: tfloat32 is not covered on this unit (its fp32 matmul kept fp32 precision with TF32 "
        "allowed: no TF32 datapath); its cases check nothing"
    ]
    ctx.begin_case(FaultSpec("bitflip", "output", seed=3, element=7, bit=30, repeat=0))
    skipped = workload.run(ctx, _case(0))
    assert skipped.status == "ok" and skipped.ops == 0.0 and UNCOVERED in skipped.detail
    ctx.begin_case(None)
    checked = workload.run(ctx, _case(1))  # the unit's other slots still run and count
    assert checked.status == "ok" and checked.ops > 0 and checked.detail["dtype"] == "float32"


def test_where_the_unit_has_tf32_the_slot_is_exact_and_a_flipped_bit_fails_it(monkeypatch) -> None:
    entered: list[str] = []

    def recording(device: torch.device) -> contextlib.AbstractContextManager[None]:
        entered.append(device.type)
        return _emulated_tf32(device)

    monkeypatch.setattr(tf32, "products", recording)
    assert tf32.missing(torch.device("cpu"), 32, 128, 48) is None
    workload, ctx = _prepared(PARAMS)
    assert ctx.notes == []
    ctx.begin_case(None)
    entered.clear()
    clean = workload.run(ctx, _case())
    assert clean.status == "ok" and clean.ops == 2.0 * 32 * 128 * 48 * 3 and clean.detail["bad_elements"] == 0
    assert entered == ["cpu"] * 3  # every repeat's product taken with TF32 allowed
    for bit in (0, 22, 23, 31):  # the lowest mantissa bit, the highest, the exponent's lowest, the sign
        ctx.begin_case(FaultSpec("bitflip", "output", seed=3, element=5 * 48 + 7, bit=bit, repeat=2))
        hit = workload.run(ctx, _case())
        assert hit.status == "mismatch" and hit.detail["bad_elements"] == 1, bit
        assert hit.mismatches[0].where == "tfloat32 out[5, 7] (repeat 2)"


def test_a_unit_whose_tf32_products_are_wrong_is_failed_not_called_uncovered(monkeypatch) -> None:
    """The probe makes a slot uncovered only when the product kept fp32's precision: a unit that returns
    anything else has its cases judged, and a wrong product is a mismatch."""

    def faulty(device: torch.device) -> contextlib.AbstractContextManager[None]:
        return _emulated_tf32(device, wrong=True)

    monkeypatch.setattr(tf32, "products", faulty)
    assert tf32.missing(torch.device("cpu"), 16, 16, 16) is None
    workload, ctx = _prepared(PARAMS)
    ctx.begin_case(None)
    outcome = workload.run(ctx, _case())
    assert outcome.status == "mismatch" and outcome.detail["bad_elements"] == 3 * 32 * 48


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_the_tf32_switch_is_on_inside_the_slot_only(device: str) -> None:
    cuda_before = torch.backends.cuda.matmul.allow_tf32
    cpu_before = torch.backends.mkldnn.matmul.fp32_precision
    with tf32.products(torch.device(device)):
        if device == "cpu":
            assert torch.backends.mkldnn.matmul.fp32_precision == "tf32"
        else:
            assert tf32.allowed()
    assert torch.backends.cuda.matmul.allow_tf32 == cuda_before and not tf32.allowed()
    assert torch.backends.mkldnn.matmul.fp32_precision == cpu_before


def test_the_cost_model_counts_tf32_products_at_the_tf32_rate() -> None:
    """A GPU takes the slot's products at TF32's rate (495 TFLOP/s dense on an H100) where fp32's is 67:
    counted as fp32, the model would put a TF32 case at 7 times its length."""
    a = torch.empty((256, 512), device="meta")
    b = torch.empty((512, 128), device="meta")
    kinds = []
    for allowed in (False, True):
        with counting.counting() as counter, tf32.products(a.device) if allowed else contextlib.nullcontext():
            a @ b
        kinds.append({k.flop_dtype for k in counter.tally.kernels})
    assert kinds == [{"float32"}, {"float32/tf32"}]
    for gpu in (H100, H200):
        assert _work_rate(gpu, "float32/tf32") == pytest.approx(0.8 * 495e12)
    assert _work_rate(XEON_AMX_CORE, "float32/tf32") == _work_rate(XEON_AMX_CORE, "float32")


def test_the_rules_refuse_a_tf32_slot_with_integers_tf32_cannot_hold() -> None:
    spec = SPECS["matmul_golden"]
    good = {**spec.defaults, "k": 1, "dtypes": [TF32_SLOT], "repeats": [1], "max_abs": TF32_EXACT_INT}
    assert spec.rules_problem(good) is None
    problem = spec.rules_problem({**good, "max_abs": TF32_EXACT_INT + 1})
    assert problem is not None and problem[0] == "max_abs" and "up to 2048" in problem[1]
    assert spec.rules_problem({**good, "dtypes": ["float32"], "max_abs": TF32_EXACT_INT + 1}) is None


def test_the_selftest_skips_the_tf32_variant_on_a_cpu_and_says_so() -> None:
    result = run_selftest(["matmul_golden"], trials=1)
    variants = {row["variant"] for row in result["rows"]}
    assert TF32_SLOT not in variants and {"float32", "bfloat16"} <= variants
    assert (
        "matmul_golden tfloat32: not self-tested on this unit (its fp32 matmul kept fp32 precision with "
        "TF32 allowed: no TF32 datapath)"
    ) in result["notes"]


def test_where_the_unit_has_tf32_its_selftest_holds_every_floor(monkeypatch) -> None:
    monkeypatch.setattr(tf32, "products", _emulated_tf32)
    result = run_selftest(["matmul_golden"], trials=3)
    rows = [row for row in result["rows"] if row["variant"] == TF32_SLOT]
    assert len(rows) == 1 + 32 + 10  # the clean row, every bit of the fp32 word, the hardware models
    assert all(row["passed"] for row in rows), [row for row in rows if not row["passed"]]


def test_the_tf32_plain_op_is_an_fp32_product_taken_in_tf32(monkeypatch) -> None:
    """Efficiency divides by the rate of the op the slot runs: the peak times the product with TF32 on."""
    from sdcscan.peaks.rates import _matmul_call
    from sdcscan.workloads.workload_spec import PlainOp

    seen = []

    @contextlib.contextmanager
    def watched(device: torch.device) -> Iterator[None]:
        seen.append(device.type)
        yield

    monkeypatch.setattr(tf32, "products", watched)
    call, flops = _matmul_call(PlainOp("matmul", TF32_SLOT, (32, 64, 16), 1.0), torch.device("cpu"))
    out = call()
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == (32, 16)
    assert flops == 2.0 * 32 * 64 * 16 and seen == ["cpu"]
