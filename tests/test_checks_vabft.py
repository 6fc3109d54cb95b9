"""V-ABFT maths against hand-worked tiny examples."""

from __future__ import annotations

import math

import pytest
import torch

from sdcscan.checks import vabft


def _result(d: list[float], t: list[float]) -> vabft.CheckResult:
    dt, tt = torch.tensor(d, dtype=torch.float64), torch.tensor(t, dtype=torch.float64)
    return vabft.CheckResult(d=dt, t=tt, bad=vabft.failing(dt, tt))


def test_bhatia_davis_gives_mean_and_variance_bound_per_row():
    """Row [1, 2, 3]: μ = 2, σ² ≤ (3 − 2)(2 − 1) = 1; a constant row has bound 0."""
    mu, var = vabft.bhatia_davis(torch.tensor([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]]))
    assert mu.tolist() == [2.0, 5.0] and var.tolist() == [1.0, 0.0]
    assert mu.dtype == var.dtype == torch.float64


def test_summarize_adds_up_the_rows_of_b():
    """B rows [1, 3] and [2, 2]: μ = (2, 2), σ² = (1, 0) → S1 = 4, S2 = 1, S3 = 8, N = 2."""
    s = vabft.summarize(torch.tensor([[1.0, 3.0], [2.0, 2.0]]))
    assert (s.n, s.s1, s.s2, s.s3) == (2, 4.0, 1.0, 8.0)


def test_threshold_matches_the_formula_worked_by_hand():
    """μA = 2, σA² = 1, N = 2, S = (4, 1, 8), c = 2.5: T = 16 + 2.5·√40 + 2.5·√2·1·1."""
    s = vabft.OperandSummary(n=2, s1=4.0, s2=1.0, s3=8.0)
    t = vabft.vabft_threshold(
        torch.tensor([2.0], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64), s, 1.0
    )
    assert t.item() == pytest.approx(16 + 2.5 * math.sqrt(40) + 2.5 * math.sqrt(2))
    t2 = vabft.vabft_threshold(
        torch.tensor([2.0], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64), s, 1e-6
    )
    assert t2.item() == pytest.approx(t.item() * 1e-6)


def test_row_residual_is_zero_for_an_exact_product_and_shows_a_corruption():
    """A = [[1, 2], [3, 4]], B = I: Σ_j C_ij − A_i·(B·1) is 0, then +5 after C[0, 1] += 5."""
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    b = torch.eye(2)
    enc = vabft.encode(b, torch.float32)
    assert enc.rowsum.tolist() == [1.0, 1.0]
    c = a @ b
    assert vabft.row_residual(a, c, enc.rowsum).tolist() == [0.0, 0.0]
    c[0, 1] += 5
    assert vabft.row_residual(a, c, enc.rowsum).tolist() == [5.0, 0.0]


def test_failing_is_nan_safe():
    """NaN and inf residuals fail; |d| equal to the threshold passes."""
    r = _result([math.nan, math.inf, 1.0, -3.0, 0.0], [1.0] * 5)
    assert r.bad.tolist() == [True, True, False, True, False]
    assert r.ratio() == math.inf


def test_row_and_column_checks_locate_one_corrupted_element():
    """A flipped sign in C[2, 1] fails row 2 and column 1 only, and localize pairs them."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(6, 32, generator=g) + 0.5, torch.rand(32, 5, generator=g) + 0.5
    c = a @ b
    c[2, 1] = -c[2, 1]
    rows = vabft.row_check(a, c, vabft.encode(b, torch.float64), 1e-6)
    cols = vabft.column_check(a, b, c, torch.float64, 1e-6)
    assert rows.bad.nonzero().flatten().tolist() == [2]
    assert cols.bad.nonzero().flatten().tolist() == [1]
    assert vabft.localize(rows, cols) == [(2, 1)]


def test_localize_without_a_failing_column_names_rows_only():
    """Rows fail but no column does (operand changed after encoding): (i, None) per failing row."""
    rows, cols = _result([9.0, 0.0, 9.0], [1.0] * 3), _result([0.0, 0.0], [1.0] * 2)
    assert vabft.localize(rows, cols) == [(0, None), (2, None)]
    several = _result([9.0, 9.0], [1.0] * 2)
    assert vabft.localize(rows, several) == [(0, None), (2, None)]  # ambiguous pairing
    assert vabft.localize(_result([9.0, 0.0], [1.0, 1.0]), several) == [(0, 0), (0, 1)]


def test_gamma_is_highams_bound():
    assert vabft.gamma(2, 0.25) == 1.0
    assert vabft.gamma(4, 0.25) == math.inf


def test_rigorous_threshold_worked_by_hand():
    """A = [[1, −2]], B = [[1, 1], [1, −1]]: |A|·(|B|·1) = 6, Σ|C| = |−1| + |3| = 4."""
    a, b = torch.tensor([[1.0, -2.0]]), torch.tensor([[1.0, 1.0], [1.0, -1.0]])
    c = a @ b
    enc = vabft.encode(b, torch.float32, rigorous=True)
    u = 2.0**-24
    t = vabft.rigorous_threshold(a, c, enc, u_acc=u, u_chk=u, u_out=u)
    expected = (vabft.gamma(4, u) + vabft.gamma(6, u)) * 6 + (u + vabft.gamma(2, u)) * 4
    assert t.item() == pytest.approx(expected)


def test_clean_random_gemm_stays_below_a_calibrated_threshold():
    """fp32 with an fp64 checker: a clean 64×512×64 product is well inside T at e_max = 4e-7 (docs/abft.md §3.2)."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(64, 512, generator=g), torch.randn(512, 64, generator=g)
    r = vabft.row_check(a, a @ b, vabft.encode(b, torch.float64), 4e-7)
    assert not r.bad.any() and r.ratio() < 1.0


@pytest.mark.parametrize(
    ("dtype", "checker", "e_max"),
    [(torch.float32, torch.float32, 1e-7), (torch.bfloat16, torch.float32, 1e-3)],
)
def test_a_permuted_pool_expects_what_the_case_operands_give(dtype, checker, e_max):
    """Thresholds from the pool's statistics, permuted, agree with statistics taken from the permuted
    operands to a few fp32 ulps; the checksums are the case's own. Heavy-tailed, zero-mean operands drawn
    here (not by the workload's sampler), with an outlier column."""
    g = torch.Generator().manual_seed(11)
    a = (torch.randn(48, 96, generator=g) * torch.rand(48, 96, generator=g) ** -0.5).to(dtype)
    b = torch.randn(96, 40, generator=g).to(dtype)
    b[:, 7] *= 50
    stats = vabft.pool_stats(a, b, checker, e_max)  # ~4x what these operands need
    perms = tuple(torch.randperm(size, generator=g) for size in (48, 96, 40))
    rows, inner, cols = perms
    pa, pb = a[rows][:, inner], b[inner][:, cols]
    fast = vabft.permuted_expected(stats, pa, pb, perms)
    full = vabft.expected(pa, pb, vabft.encode(pb, checker), checker, e_max)
    for got, want in ((fast.row_t, full.row_t), (fast.col_t, full.col_t)):
        assert torch.allclose(got, want, rtol=1e-5, atol=0)
    assert torch.allclose(fast.rows, full.rows, rtol=1e-5) and torch.allclose(fast.cols, full.cols, rtol=1e-5)
    # the expectations are of the permuted product: a clean one passes, a flipped element fails
    out = pa @ pb
    assert not any(bool(c.bad.any()) for c in vabft.verify(out, fast))
    out[5, 9] = -out[5, 9] * 4
    row_check, col_check = vabft.verify(out, fast)
    assert row_check.bad.nonzero().flatten().tolist() == [
        5
    ] and col_check.bad.nonzero().flatten().tolist() == [9]


def test_verify_of_a_stack_is_verify_of_each_product():
    g = torch.Generator().manual_seed(3)
    a, b = torch.rand(16, 32, generator=g) + 0.5, torch.rand(32, 24, generator=g) + 0.5
    exp = vabft.expected(a, b, vabft.encode(b, torch.float32), torch.float32, 1e-6)
    outs = torch.stack([a @ b] * 3)
    outs[1, 2, 3] += 1.0
    rows, cols = vabft.verify(outs, exp)
    assert rows.d.shape == (3, 16) and cols.d.shape == (3, 24)
    for r in range(3):
        one_rows, one_cols = vabft.verify(outs[r], exp)
        assert torch.equal(rows.bad[r], one_rows.bad) and torch.equal(cols.bad[r], one_cols.bad)
    assert rows.bad.nonzero().tolist() == [[1, 2]] and cols.bad.nonzero().tolist() == [[1, 3]]
