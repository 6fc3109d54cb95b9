"""V-ABFT maths against hand-worked tiny examples."""

from __future__ import annotations

import math

import pytest
import torch

from sdcscan.checks import vabft


def _result(d: list[float], t: list[float]) -> vabft.CheckResult:
    """A check of len(d) lines of one tile each."""
    dt, tt = (torch.tensor(x, dtype=torch.float64).view(-1, 1) for x in (d, t))
    return vabft.judged(dt, tt)


def test_tiles_are_eight_wide_where_eight_divides_the_line_else_the_whole_line():
    assert [vabft.tile_width(n) for n in (8, 16, 256, 12, 5, 1)] == [8, 8, 8, 12, 5, 1]
    x = torch.arange(32.0).view(2, 16)
    assert vabft.checksums(x).tolist() == [[28.0, 92.0, 120.0], [156.0, 220.0, 376.0]]
    assert vabft.checksums(torch.ones(3, 5)).tolist() == [[5.0]] * 3
    # columns: tiles of 8 rows, then the whole column
    assert vabft.checksums(x.t(), dim=-2).tolist() == [[28.0, 156.0], [92.0, 220.0], [120.0, 376.0]]


@pytest.mark.parametrize("size", [8, 64, 40, 12])
def test_a_tiled_permutation_moves_whole_tiles(size):
    """A permutation of range(size) whose every tile holds one tile of the original, all tiles differing."""
    perm = vabft.tiled_permutation(size, size)
    assert sorted(perm.tolist()) == list(range(size))
    w = vabft.tile_width(size)
    members = {frozenset(p // w for p in tile) for tile in perm.view(-1, w).tolist()}
    assert all(len(m) == 1 for m in members) and len(members) == size // w
    assert perm.tolist() != list(range(size))  # seeded: this one moves something


def test_summarize_adds_up_the_rows_of_b():
    """B rows [1, 3] and [2, 2] (one tile of 2): S1 = |2| + |2| = 4, S1c = (|1 + 2| + |3 + 2|) / 2 = 4,
    squares per row 1 + 9 = 10 and 4 + 4 = 8."""
    s = vabft.summarize(torch.tensor([[1.0, 3.0], [2.0, 2.0]]))
    assert (s.n, s.s1.tolist(), s.s1_cols.tolist(), s.squares.tolist()) == (2, [4.0], [4.0], [[10.0], [8.0]])


def test_threshold_matches_the_formula_worked_by_hand():
    """A = [[1, 3]] (μ = 2) against that B: mean term 2·|2|·4 = 16, second moment 1·10 + 9·8 = 82, so
    T = 16 + 2.5·√82, linear in e_max."""
    s = vabft.summarize(torch.tensor([[1.0, 3.0], [2.0, 2.0]]))
    a = torch.tensor([[1.0, 3.0]])
    t = vabft.vabft_threshold(a, s, 1.0)
    assert t.shape == (1, 1) and t.item() == pytest.approx(16 + 2.5 * math.sqrt(82))
    assert vabft.vabft_threshold(a, s, 1e-6).item() == pytest.approx(t.item() * 1e-6)


def test_threshold_is_per_tile_of_columns_and_for_the_whole_row():
    """B with 16 columns: two tiles, each with its own statistics, then the whole row; a tile of zeros
    gets nothing from the other tile."""
    b = torch.zeros(4, 16)
    b[:, 8:] = 1.0
    a = torch.tensor([[1.0, -1.0, 2.0, -2.0]])  # μ = 0: the mean term vanishes
    summary = vabft.summarize(b)
    assert summary.n.tolist() == [8.0, 8.0, 16.0]
    t = vabft.vabft_threshold(a, summary, 1.0)
    assert t.shape == (1, 3) and t[0, 0].item() == 0.0
    assert t[0, 1].item() == t[0, 2].item() == pytest.approx(2.5 * math.sqrt((1 + 1 + 4 + 4) * 8))


def test_checksums_are_the_tiles_then_the_line():
    x = torch.arange(32.0).view(2, 16)
    assert vabft.checksums(x).tolist() == [[28.0, 92.0, 120.0], [156.0, 220.0, 376.0]]
    assert vabft.checksums(torch.ones(3, 5)).tolist() == [[5.0]] * 3  # one tile: no total besides
    assert vabft.checksum_widths(24) == [8, 8, 8, 24] and vabft.checksum_widths(5) == [5]


def test_an_offset_spread_over_a_row_is_caught_by_the_whole_row_not_by_its_tiles():
    """δ on each of 256 elements of a row: every tile of 8 holds 8δ, within its rounding, the row 256δ."""
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(64, 1024, generator=g), torch.randn(1024, 256, generator=g)
    c = a @ b
    exp = vabft.expected(a, b, vabft.encode(b, torch.float64), torch.float64, 1e-6)
    assert not vabft.verify(c, exp)[0].bad.any()
    tile_t = float(exp.row_t[5, :-1].min())
    c[5] += tile_t / 16  # half a tile's threshold per tile of 8, 16 tile thresholds over the row
    rows = vabft.verify(c, exp)[0]
    assert not rows.bad[5, :-1].any() and bool(rows.bad[5, -1])


def test_row_residual_is_zero_for_an_exact_product_and_shows_a_corruption():
    """A = [[1, 2], [3, 4]], B = I: Σ_j C_ij − A_i·(B·1) is 0, then +5 after C[0, 1] += 5."""
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    b = torch.eye(2)
    enc = vabft.encode(b, torch.float32)
    assert enc.rowsum.tolist() == [[1.0], [1.0]]
    c = a @ b
    assert vabft.row_residual(a, c, enc.rowsum).tolist() == [[0.0], [0.0]]
    c[0, 1] += 5
    assert vabft.row_residual(a, c, enc.rowsum).tolist() == [[5.0], [0.0]]


def test_failing_is_nan_safe():
    """NaN and inf residuals fail; |d| equal to the threshold passes."""
    r = _result([math.nan, math.inf, 1.0, -3.0, 0.0], [1.0] * 5)
    assert r.failing_lines().tolist() == [True, True, False, True, False]
    assert r.ratio() == math.inf


def test_row_and_column_checks_locate_one_corrupted_element():
    """A flipped sign in C[2, 1] fails row 2 and column 1 only."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(6, 32, generator=g) + 0.5, torch.rand(32, 5, generator=g) + 0.5
    c = a @ b
    c[2, 1] = -c[2, 1]
    expect = vabft.expected(a, b, vabft.encode(b, torch.float64), torch.float64, 1e-6)
    rows, cols = vabft.verify(c, expect)  # the checks gemm_fp runs
    assert rows.failing_lines().nonzero().flatten().tolist() == [2]
    assert cols.failing_lines().nonzero().flatten().tolist() == [1]


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
    rows, cols = vabft.verify(
        a @ b, vabft.expected(a, b, vabft.encode(b, torch.float64), torch.float64, 4e-7)
    )
    assert not rows.bad.any() and rows.ratio() < 1.0 and not cols.bad.any() and cols.ratio() < 1.0


@pytest.mark.parametrize(
    ("dtype", "checker", "e_max"),
    [(torch.float32, torch.float32, 1.5e-6), (torch.bfloat16, torch.float32, 8e-3)],
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
    perms = (
        vabft.tiled_permutation(48, 1),
        torch.randperm(96, generator=g),
        vabft.tiled_permutation(40, 2),
    )
    rows, inner, cols = perms
    pa, pb = a[rows][:, inner], b[inner][:, cols]
    fast = vabft.permuted_expected(stats, pa, pb, perms)
    full = vabft.expected(pa, pb, vabft.encode(pb, checker), checker, e_max)
    for got, want in ((fast.row_t, full.row_t), (fast.col_t, full.col_t)):
        assert torch.allclose(got, want, rtol=1e-5, atol=0)
    for got, want in ((fast.rows, full.rows), (fast.cols, full.cols)):  # sums of 8 in another order
        assert torch.allclose(got, want, rtol=0, atol=1e-5 * float(want.abs().max()))
    # the expectations are of the permuted product: a clean one passes, a flipped element fails
    out = pa @ pb
    assert not any(bool(c.bad.any()) for c in vabft.verify(out, fast))
    out[5, 9] = -out[5, 9] * 4
    row_check, col_check = vabft.verify(out, fast)
    assert row_check.failing_lines().nonzero().flatten().tolist() == [5]
    assert col_check.failing_lines().nonzero().flatten().tolist() == [9]
    assert row_check.bad[5].nonzero().flatten().tolist() == [1, 5]  # column 9's tile of 8, and the total


def test_verify_of_a_stack_is_verify_of_each_product():
    g = torch.Generator().manual_seed(3)
    a, b = torch.rand(16, 32, generator=g) + 0.5, torch.rand(32, 24, generator=g) + 0.5
    exp = vabft.expected(a, b, vabft.encode(b, torch.float32), torch.float32, 1e-6)
    outs = torch.stack([a @ b] * 3)
    outs[1, 2, 3] += 1.0
    rows, cols = vabft.verify(outs, exp)
    assert rows.d.shape == (3, 16, 4) and cols.d.shape == (3, 24, 3)  # tiles of 8, then the line
    for r in range(3):
        one_rows, one_cols = vabft.verify(outs[r], exp)
        assert torch.equal(rows.bad[r], one_rows.bad) and torch.equal(cols.bad[r], one_cols.bad)
    assert rows.failing_lines().nonzero().tolist() == [[1, 2]]
    assert cols.failing_lines().nonzero().tolist() == [[1, 3]]
    assert rows.bad[1, 2].tolist() == [True, False, False, True]  # column 3's tile, and the row's total


def test_where_torchs_sum_copies_its_input_into_a_wider_dtype() -> None:
    """`sum_converts`, as gemm_fp's verify and the cost model read it: a copy for every widening sum on a
    CPU (the profiler shows torch's `aten::to` inside `aten::sum`), none for half and bfloat16 into
    float32 on a GPU (or the model's meta device, which stands for one)."""
    from torch.profiler import ProfilerActivity, profile

    cpu, cuda, meta = (torch.device(d) for d in ("cpu", "cuda", "meta"))
    assert vabft.sum_converts(torch.float32, torch.float64, cpu)
    assert vabft.sum_converts(torch.float32, torch.float64, cuda)
    assert vabft.sum_converts(torch.bfloat16, torch.float32, cpu)
    assert not vabft.sum_converts(torch.bfloat16, torch.float32, cuda)
    assert not vabft.sum_converts(torch.float16, torch.float32, meta)
    assert vabft.sum_converts(torch.bool, torch.int64, meta)
    assert not vabft.sum_converts(torch.float64, torch.float64, cpu)
    for source, result in ((torch.float32, torch.float64), (torch.bfloat16, torch.float32)):
        x = torch.ones(4, 16, dtype=source)
        with profile(activities=[ProfilerActivity.CPU]) as p:
            x.sum(-1, dtype=result)
        assert ("aten::to" in {e.name for e in p.events()}) == vabft.sum_converts(source, result, cpu)
