"""matmul_golden's fused comparison kernel (sdcscan/checks/golden_compare_triton.py) counts, bit for bit,
the bad elements per row the torch comparison counts (issue 42): clean, under every self-test output
model, on values no product makes (NaN, infinities, signed zeros), on shapes that leave partial tiles,
and through whole matmul_golden cases.

The kernel runs here in Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest.py), the same
kernel source a GPU compiles (tests/test_fused_kernels_compile.py compiles it); a lent GPU repeats the
comparison compiled (scripts/check_fused.py). Without Triton installed these tests skip.
"""

from __future__ import annotations

import functools
import importlib.util

import pytest
import torch

from sdcscan.checks import golden_compare, golden_compare_triton, triton_kernels
from sdcscan.costmodel import budgets
from sdcscan.costmodel.cases import gpu_params
from sdcscan.costmodel.device_rates import H200
from sdcscan.faults import FaultSpec, corrupt_, from_label
from sdcscan.outcomes import Case
from sdcscan.workloads.base import Context
from sdcscan.workloads.matmul_golden.workload import MatmulGolden
from tests.helpers.tools import missing_tool

DTYPES = golden_compare.COVERED
SHAPES = [(1, 1), (16, 256), (40, 300), (17, 513)]  # one element; one whole tile; partial tiles both ways
NAMES = {
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.float32: "float32",
    torch.float64: "float64",
}


@pytest.fixture(autouse=True)
def _triton() -> None:
    if importlib.util.find_spec("triton") is None:
        missing_tool("Triton", "pip install -e '.[test]' on Linux x86_64")


def _expected(dtype: torch.dtype, m: int, n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-4096, 4097, (m, n), generator=g).to(dtype)  # integers, as a golden product is


def _counts(outputs: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the kernel's, torch's) bad elements per repeat and row."""
    kernel = torch.full(outputs.shape[:2], -1, dtype=torch.int64)
    reference = torch.full_like(kernel, -1)
    golden_compare.by_kernel(outputs, expected, kernel)
    golden_compare.by_torch(outputs, expected, reference)
    return kernel, reference


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_clean_block_counts_nothing_either_way(dtype: torch.dtype, shape: tuple[int, int]) -> None:
    expected = _expected(dtype, *shape)
    kernel, reference = _counts(expected.expand(3, *shape).clone(), expected)
    assert torch.equal(kernel, reference) and not reference.any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_self_test_output_model_is_counted_as_torch_counts_it(dtype: torch.dtype) -> None:
    """Every bit of a word and every hardware fault model, each struck into one of three repeats of a
    block whose shape leaves partial tiles: the same counts, row by row."""
    m, n = 40, 300
    expected = _expected(dtype, m, n)
    labels = MatmulGolden.selftest_bits(NAMES[dtype], "output")
    for i, label in enumerate(labels):
        outputs = expected.expand(3, m, n).clone()
        corrupt_(outputs[i % 3], from_label(label, "output", 1000 + i), columns=n)
        kernel, reference = _counts(outputs, expected)
        assert torch.equal(kernel, reference), label
    assert len(labels) > 16


def test_values_no_product_makes_are_judged_as_floats() -> None:
    """NaN differs from everything, NaN included; an infinity from a finite value; -0.0 equals +0.0."""
    for dtype in DTYPES:
        expected = _expected(dtype, 4, 300)
        expected[0, :3] = float("nan")
        expected[1, :2] = 0.0
        outputs = expected.expand(2, 4, 300).clone()
        outputs[1, 1, :2] = -0.0  # not bad
        outputs[1, 2, 299] = float("inf")  # bad
        outputs[1, 3, 0] = float("-inf")  # bad
        kernel, reference = _counts(outputs, expected)
        assert torch.equal(kernel, reference), dtype
        assert kernel.tolist() == [[3, 0, 0, 0], [3, 0, 1, 1]], dtype  # NaN never equals NaN


def test_the_trial_passes_here_and_a_kernel_that_disagrees_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The start-up trial passes in the interpreter; a kernel that compares 2-byte floats in their own
    format there (where a bf16 -0.0 then differs from +0.0) fails it, and a unit asking for the kernel
    gets the torch comparison and a note."""
    assert golden_compare.agrees_on_a_small_block(torch.device("cpu"))
    narrow = {**golden_compare_triton._COMPARED, torch.bfloat16: golden_compare_triton._FLOAT[torch.bfloat16]}
    monkeypatch.setattr(golden_compare_triton, "_COMPARED", narrow)
    assert not golden_compare.agrees_on_a_small_block(torch.device("cpu"))
    monkeypatch.setattr(golden_compare, "tried", functools.cache(golden_compare.agrees_on_a_small_block))
    workload, ctx = _prepared("fused")
    assert not workload.fused
    assert any("failed its start-up trial" in note for note in ctx.notes)


def test_the_operator_refuses_what_it_does_not_cover() -> None:
    expected = _expected(torch.float32, 4, 8)
    for outputs, exp in (
        (expected.expand(2, 4, 8), expected),  # not contiguous
        (expected.unsqueeze(0).clone(), expected.double()),  # dtypes differ
        (expected.int().unsqueeze(0).clone(), expected.int()),  # not a float
    ):
        with pytest.raises(ValueError, match="golden comparison"):
            torch.ops.sdcscan.golden_bad_partials(outputs, exp)


PARAMS = {"m": 48, "k": 64, "n": 272, "dtypes": ["float32", "float64", "bfloat16", "float16"]}


def _prepared(check_kernel: str) -> tuple[MatmulGolden, Context]:
    params = {**MatmulGolden.spec.defaults, **PARAMS, "repeats": [3, 2, 3, 3], "check_kernel": check_kernel}
    workload = MatmulGolden(params)
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=5, params=params)
    workload.prepare(ctx)
    return workload, ctx


def _case(check_kernel: str, armed: FaultSpec | None, occurrence: int) -> tuple[object, ...]:
    workload, ctx = _prepared(check_kernel)
    assert workload.fused is (check_kernel == "fused")
    ctx.begin_case(armed)
    out = workload.run(ctx, Case(occurrence, "matmul_golden", 4242 + occurrence, occurrence))
    detail = {k: v for k, v in out.detail.items() if k != "check_kernel"}
    assert out.detail["check_kernel"] == check_kernel
    return out.status, out.digest, [(m.where, m.expected, m.actual) for m in out.mismatches], detail


@pytest.mark.parametrize(
    ("occurrence", "label"),
    [(o, label) for o in (0, 2) for label in (None, 3, "any", "burst:4", "row_swap")] + [(3, "tile16")],
)
def test_a_matmul_golden_case_is_the_same_with_either_check_kernel(occurrence: int, label: object) -> None:
    """The shipped case, clean and with an output fault armed: the same verdict, digest and findings."""
    armed = None if label is None else from_label(label, "output", 77)  # type: ignore[arg-type]
    torch_case = _case("torch", armed, occurrence)
    assert _case("fused", armed, occurrence) == torch_case
    assert (torch_case[0] == "ok") == (label is None)


def test_a_gpu_takes_the_kernel_only_once_a_lent_gpu_matched_it() -> None:
    """Until scripts/check_fused.py has matched it on a GPU, "auto" keeps the torch comparison there."""
    assert "matmul_golden" not in triton_kernels.MATCHED_ON_A_GPU
    assert triton_kernels.choose("auto", torch.device("cuda"), "matmul_golden") == (False, "")


def test_the_kernel_reads_a_bf16_block_about_once_by_the_model() -> None:
    """Asked for, the comparison of the doctor profile's 8192^3 bf16 cases moves about one byte per output
    byte (torch's: 3.1) and takes a few percent of the GEMMs' time on an H200 (torch's: 7.2%)."""
    from sdcscan.costmodel.cases import model_workload

    params = gpu_params("doctor")["matmul_golden"]
    slot = params["dtypes"].index("bfloat16")
    fused, plain = (
        budgets.case_figures(cost, cost.cases[0], H200)
        for cost in (
            model_workload("matmul_golden", params, occurrences=[slot], kernels=kernels)
            for kernels in ("fused", "auto")
        )
    )
    assert fused.check_bytes / fused.output_bytes < 1.2 < 3.0 < plain.check_bytes / plain.output_bytes
    assert fused.check_s / fused.compute_s < budgets.CHECK_SHARE < plain.check_s / plain.compute_s
