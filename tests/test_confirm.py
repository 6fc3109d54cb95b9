"""Confirm before accusing (issue 44): gemm_fp's statistical threshold only nominates; an element is
wrong only beyond the bound correct arithmetic cannot exceed (sdcscan/checks/confirm.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from sdcscan.checks import confirm
from sdcscan.faults import FaultSpec
from sdcscan.outcomes import Case
from sdcscan.workloads.base import Context
from sdcscan.workloads.gemm_fp import workload as gemm_fp

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def _coherent(m: int, k: int, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs a statistical threshold was never calibrated on: smooth, same-sign 'learned filters' (rows
    of A) against periodic, offset 'images' (columns of B), so every dot product sums coherently."""
    t = torch.arange(k, dtype=torch.float64)
    a = torch.stack([1.0 + 0.5 * torch.sin(t / (3 + i)) for i in range(m)])
    b = torch.stack([2.0 + torch.cos(t * (j + 1) / 7) for j in range(n)], dim=1)
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inputs", ["coherent", "zero_mean"])
def test_no_element_of_a_clean_product_is_ever_beyond_the_bound(dtype: torch.dtype, inputs: str) -> None:
    g = torch.Generator().manual_seed(3)
    m, k, n = 48, 2048, 40
    if inputs == "coherent":
        a, b = _coherent(m, k, n, dtype)
    else:
        a, b = torch.randn(m, k, generator=g).to(dtype), torch.randn(k, n, generator=g).to(dtype)
    errors = confirm.product_errors(a, b, a @ b)
    assert not bool(errors.wrong.any())
    assert float((errors.error / errors.bound).max()) < 1.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_exponent_flip_or_a_nan_is_beyond_the_bound(dtype: torch.dtype) -> None:
    """The lowest exponent bit of an element (a factor of 2 or 1/2) and a NaN: both wrong, alone."""
    a, b = _coherent(16, 512, 24, dtype)
    c = a @ b
    exp0 = {torch.float32: 23, torch.float64: 52, torch.bfloat16: 7, torch.float16: 10}[dtype]
    words = {8: torch.int64, 4: torch.int32, 2: torch.int16}[c.element_size()]
    struck = c.clone()
    struck.view(words)[3, 5] ^= 1 << exp0
    wrong = confirm.product_errors(a, b, struck).wrong
    assert wrong.nonzero().tolist() == [[3, 5]]
    struck = c.clone()
    struck[7, 1] = float("nan")
    assert confirm.product_errors(a, b, struck).wrong.nonzero().tolist() == [[7, 1]]


def _ready(dtype: str) -> tuple[gemm_fp.GemmFp, Context]:
    params = {
        "dtypes": [dtype],
        "shapes": [[64, 512, 64]],
        "repeats": [3],
        "checkers": ["float64" if dtype in ("float32", "float64") else "float32"],
    }
    workload = gemm_fp.GemmFp(params)
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=5, params=params)
    workload.prepare(ctx)
    return workload, ctx


def _tighten(workload: gemm_fp.GemmFp, factor: float) -> None:
    """The pool's thresholds as an e_max `factor` times the unit's would set them: clean rounding then
    crosses them, as the clean products of real weights crossed the calibrated ones."""
    found, pool = workload.thresholds[0], workload.pools[0]
    assert found is not None and found.e_max is not None and pool is not None
    tight = replace(found, e_max=found.e_max * factor, e_mean=(found.e_mean or found.e_max) * factor)
    workload.pools[0] = gemm_fp._Pool.of(pool.a, pool.b, workload.p["checkers"][0], workload.p["c"], tight)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_clean_cases_whose_rounding_crosses_the_threshold_are_nominated_never_failed(dtype: str) -> None:
    """Residuals beyond the statistical threshold on clean products: the case is nominated (bad rows and
    columns counted) and passes, as no element is beyond the bound; the same cases with an exponent
    flip in the output fail, naming the element."""
    workload, ctx = _ready(dtype)
    _tighten(workload, 1e-4)
    nominated = 0
    for seed in range(4):
        ctx.begin_case(None)
        outcome = workload.run(ctx, Case(seed, "gemm_fp", seed, 0))
        nominated += outcome.detail["bad_rows"] + outcome.detail["bad_columns"]
        assert outcome.status == "ok" and outcome.detail["confirmed"] == 0 and not outcome.mismatches
    assert nominated > 0  # the threshold did fire: this is the case confirmation exists for
    exp0 = 23 if dtype == "float32" else 7
    for seed in range(4):
        ctx.begin_case(FaultSpec("bitflip", "output", seed, bit=exp0 + 1, repeat=1))
        outcome = workload.run(ctx, Case(seed, "gemm_fp", seed, 0))
        assert outcome.status == "mismatch" and outcome.detail["confirmed"] >= 1
        assert "beyond the" in outcome.mismatches[0].where and "(repeat 1)" in outcome.mismatches[0].where


def test_a_pool_changed_in_memory_after_prepare_is_still_a_finding() -> None:
    """The checks were encoded from the pool as drawn; a pool element changed later makes consistent but
    wrong products (each element agrees with fp64 of the changed operands), and the fp64 product fails
    its checksum: that line is the finding."""
    workload, ctx = _ready("float32")
    pool = workload.pools[0]
    assert pool is not None
    pool.b[100, :] *= 4.0  # a whole row of B scaled after its statistics were taken
    ctx.begin_case(None)
    outcome = workload.run(ctx, Case(0, "gemm_fp", 0, 0))
    assert outcome.status == "mismatch" and outcome.detail["confirmed"] >= 1
    assert "changed in memory since the checks were encoded" in outcome.mismatches[0].where
