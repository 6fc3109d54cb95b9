"""The cost model's counting (sdcscan/costmodel/): silent where a GPU would not wait or work, firing where it
would, and the figures it predicts from the counts. The budgets themselves: tests/test_costmodel_budgets.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from sdcscan.checks.limits import FP8_SLOTS
from sdcscan.costmodel import budgets
from sdcscan.costmodel.cases import model_workload
from sdcscan.costmodel.counting import Tally, counting
from sdcscan.costmodel.device_rates import H200, predict
from sdcscan.workloads.gemm_int8.workload import GemmInt8

META = torch.device("meta")
INT8_PARAMS = {"shapes": [[256, 1024, 512]], "ops_per_case": 2.0 * 256 * 1024 * 512 * 12}  # 12 repeats


def _tally(body: Callable[[], Any]) -> Tally:
    with counting() as counter:
        body()
    return counter.tally


@pytest.mark.parametrize("slot", ["float8_e4m3fn", "float8_e5m2"])
def test_an_fp8_product_into_out_is_one_kernel_of_its_fp8_flops(slot: str) -> None:
    """matmul_golden's fp8 slots write `_scaled_mm` into `out=`, which has no Meta kernel in torch 2.13:
    the model still counts one product, its FLOPs at B's fp8 type (not its fp32 scales')."""
    from sdcscan.checks import fp8

    def body() -> None:
        a8, b8 = fp8.operands(torch.ones(32, 64, device=META), torch.ones(64, 16, device=META), slot)
        out = torch.empty(32, 16, device=META)
        assert fp8.scaled_mm(a8, b8, out=out) is out

    products = [k for k in _tally(body).kernels if k.op == "_scaled_mm"]
    assert [(k.flops, k.flop_dtype) for k in products] == [(2.0 * 32 * 64 * 16, slot)]


def test_an_fp8_repeat_of_matmul_golden_launches_its_product_and_nothing_else() -> None:
    """The unit scale `_scaled_mm` takes is made once in prepare, not a kernel per repeat (issue 44): an
    fp8 repeat costs what an fp32 one does."""
    params = {"m": 64, "k": 128, "n": 64, "dtypes": ["float32", *FP8_SLOTS], "repeats": [4, 4, 4]}
    assert budgets.kernels_per_repeat("matmul_golden", params) == {0: 1.0, 1: 1.0, 2: 1.0}


def test_device_work_launches_kernels_and_never_waits() -> None:
    """Products, reductions, copies within the device and views: kernels, no wait, no host work."""

    def body() -> None:
        a, b = torch.ones(64, 32, device=META), torch.ones(32, 16, device=META)
        c = a @ b
        c.sum(0).add_(1)
        c.t()[2:].clone()

    tally = _tally(body)
    assert tally.host_waits == 0 and not tally.host_ops
    assert tally.ops()["mm"] == 1 and len(tally.kernels) == 6  # 2 ones, mm, sum, add_, clone; views free


@pytest.mark.parametrize(
    ("why", "read"),
    [
        ("item", lambda t: t.sum().item()),
        ("item", lambda t: bool(t.any())),
        ("item", lambda t: int(t[0])),
        ("copy to host", lambda t: t.tolist()),
        ("copy to host", lambda t: t.cpu()),
        ("torch.equal", lambda t: torch.equal(t, t)),
        ("nonzero", lambda t: t.nonzero()),
        ("blocking copy to device", lambda t: torch.arange(4).to(META)),
        ("torch.tensor(..., device=)", lambda t: torch.tensor([1, 255, 65025], device=META)),
    ],
)
def test_every_read_of_a_device_value_and_every_blocking_copy_is_a_host_wait(
    why: str, read: Callable[[torch.Tensor], object]
) -> None:
    """Each of these stops a GPU's queue: counted once, under its name."""
    tally = _tally(lambda: read(torch.ones(8, device=META)))
    assert tally.waits == {why: 1}


def test_a_clean_case_reads_zeros_false_and_all_true() -> None:
    """With no data on the meta device a read answers as a clean case would."""
    t = torch.ones(8, device=META)
    with counting():
        assert t.sum().item() == 0 and not bool(t.any()) and bool(t.all())
        assert t.tolist() == [0.0] * 8 and torch.equal(t, t) and t.nonzero().shape == (0, 1)


def test_host_tensor_work_is_counted_with_its_bytes() -> None:
    """An operation on CPU tensors is the host's work, not a kernel."""
    tally = _tally(lambda: torch.arange(1000, dtype=torch.int64).sum())
    assert not tally.kernels and sum(tally.host_ops.values()) == 2
    assert tally.host_bytes == 8000 + 8000 + 8  # arange writes, sum reads and writes


def test_bytes_count_each_distinct_element_once_and_products_their_flops() -> None:
    """A (64, 32) @ (32, 16) fp32 product: 2·64·32·16 FLOPs, its operands read and its output written; a
    stride-0 expanded input counts its distinct elements; an int8 product counts as int8."""
    a, b = torch.empty(64, 32, device=META), torch.empty(32, 16, device=META)
    tally = _tally(lambda: (a @ b, a + torch.empty(1, 32, device=META).expand(64, 32)))
    mm, add = tally.kernels
    assert (mm.flops, mm.flop_dtype, mm.read, mm.written) == (
        65536.0,
        "float32",
        (64 * 32 + 32 * 16) * 4,
        64 * 16 * 4,
    )
    assert add.read == (64 * 32 + 32) * 4
    i8 = torch.empty(64, 32, dtype=torch.int8, device=META)
    (int_mm,) = _tally(lambda: torch._int_mm(i8, i8.t())).kernels
    assert int_mm.flops == 2.0 * 64 * 32 * 64 and int_mm.flop_dtype == "int8"


def test_predicted_times_follow_bytes_or_flops_whichever_is_longer() -> None:
    """A copy is memory-bound, a large product compute-bound, a tiny kernel costs its launch, a wait its
    drain."""
    big = torch.empty(1 << 26, device=META)
    copy = predict(_tally(lambda: big.clone()), H200)
    assert copy.kernels_s == pytest.approx(8 * (1 << 26) / H200.bytes_per_s)
    a = torch.empty(4096, 4096, dtype=torch.bfloat16, device=META)
    product = predict(_tally(lambda: a @ a), H200)
    assert product.kernels_s == pytest.approx(2 * 4096**3 / H200.matrix_flops_per_s["bfloat16"])
    tiny = predict(_tally(lambda: torch.empty(1, device=META).add_(1).item()), H200)
    assert tiny.kernels_s == H200.kernel_s and tiny.waits_s == H200.wait_s


def test_the_shipped_int8_case_waits_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """gemm_int8 as it ships: one wait in a case. The same case with a read of every repeat's output (the
    mutation the budget tests exist for) waits once per repeat more, and the model sees each one."""
    clean = model_workload("gemm_int8", {**GemmInt8.spec.defaults, **INT8_PARAMS})
    assert [c.host_waits for c in clean.cases] == [1]
    shipped = GemmInt8._mm

    def reads_each_repeat(self: GemmInt8, a: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
        shipped(self, a, w, out)
        bool(out.any())

    monkeypatch.setattr(GemmInt8, "_mm", reads_each_repeat)
    mutated = model_workload("gemm_int8", {**GemmInt8.spec.defaults, **INT8_PARAMS})
    assert [c.host_waits for c in mutated.cases] == [1 + 12]
    assert mutated.cases[0].host_waits > budgets.WAITS_PER_CASE


def test_a_per_repeat_python_loop_shows_in_the_kernels_per_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old weighted row sums were a 16-step loop of GEMVs: a loop like it in every repeat adds 16
    kernels a repeat, past the workload's budget."""
    params = {**GemmInt8.spec.defaults, **INT8_PARAMS}
    before = budgets.kernels_per_repeat("gemm_int8", params)[0]
    shipped = GemmInt8._mm

    def sixteen_gemvs(self: GemmInt8, a: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
        shipped(self, a, w, out)
        weights = torch.ones(out.shape[1], dtype=torch.float64, device=out.device)
        for chunk in out.double().tensor_split(16, dim=1):
            chunk @ weights[: chunk.shape[1]]

    monkeypatch.setattr(GemmInt8, "_mm", sixteen_gemvs)
    after = budgets.kernels_per_repeat("gemm_int8", params)[0]
    assert after - before == pytest.approx(18)  # the fp64 copy, the weights and 16 GEMVs
    assert before <= budgets.KERNELS_PER_REPEAT["gemm_int8"] < after


def test_a_sum_that_widens_its_input_is_charged_the_copy_torch_makes() -> None:
    """torch's sum converts its input to the result's dtype first (a meta kernel does not show it): a bool
    mask summed into int64 costs a copy of 8 bytes an element; count_true's uint8 groups widen only
    1/128 of it; bf16 summed into fp32 is spared on a GPU, and a sum in its own dtype copies nothing."""
    from sdcscan.checks.masks import count_true

    rows, n = 64, 8192

    def copies(body: Callable[[torch.Tensor], object], dtype: torch.dtype = torch.bool) -> list[int]:
        tally = _tally(lambda: body(torch.ones(rows, n, dtype=dtype, device=META)))
        return [k.read + k.written for k in tally.kernels if k.op == "_to_copy"]

    assert copies(lambda m: m.sum(-1)) == [rows * n * 9]
    assert max(copies(lambda m: count_true(m))) <= rows * n // 128 * 9
    assert copies(lambda t: t.sum(-1, dtype=torch.float32), torch.bfloat16) == []
    assert copies(lambda t: t.sum(-1), torch.float32) == []


def test_an_elementwise_op_rereads_a_broadcast_operand_too_large_for_the_cache() -> None:
    """A block of outputs compared with one expected product: beyond the L2 cache each output re-reads
    it from memory; a small one is read once."""
    from sdcscan.costmodel.counting import CACHE_BYTES

    def read(m: int, n: int, count: int) -> int:
        tally = _tally(lambda: torch.ones(count, m, n, device=META) != torch.ones(m, n, device=META))
        return next(k.read for k in tally.kernels if k.op == "ne")

    big = 8192  # 8192^2 fp32: 268 MB, beyond the cache
    assert big * big * 4 > CACHE_BYTES
    assert read(big, big, 4) == 2 * 4 * big * big * 4  # four outputs, and the expected four times
    assert read(64, 64, 4) == 5 * 64 * 64 * 4  # four outputs, and the expected once
