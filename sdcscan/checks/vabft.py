"""V-ABFT row and column checks for floating-point GEMM: checksums and variance-based thresholds.

For `C = A @ B` with A (M, K) and B (K, N), the row identity is `Σ_j C_ij = A_i · (B · 1_N)`. In floating
point the two sides differ by rounding; V-ABFT (Gao, Hua, Chen) bounds that difference per row with a
threshold built from the means and variances of A's row and of B's rows, scaled by a per-platform
`e_max` (V-ABFT §3.4-3.5, with N and "k" mapped as in the authors' artifact: docs/abft.md §3.1). The
column check is the same identity with the roles of A and B swapped, `Σ_i C_ij = (1_Mᵀ A) · B_j`. A
failing line only nominates its repeat: gemm_fp names a wrong element once fp64 confirms it
(sdcscan/checks/confirm.py, issue 44), so these thresholds never convict on their own.

Two departures from V-ABFT, both for sensitivity (issue 32, docs/abft.md §3.1b): each row is checked in
tiles of `limits.TILE` (8) columns (and each column in tiles of 8 rows), so a checksum adds up 8 outputs' rounding
instead of N's; and the threshold's spread term is the second moment of the products a tile adds up, not
V-ABFT's product of Bhatia–Davis variance bounds, whose overestimate depends on each distribution's
extremes and scales, so that one e_max covering all distributions was loose on all but the worst.

Pure maths: tensors in, tensors out. No device choice, no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sdcscan.checks import counter_rng
from sdcscan.checks.limits import (  # torch-free there: the catalogue and the calibration table read them
    SIGMA_C,
    gamma,
    tile_width,
)


def checksums(x: torch.Tensor, dtype: torch.dtype | None = None, *, dim: int = -1) -> torch.Tensor:
    """The checksums of each line of x along `dim` (-1: its rows; -2: its columns), in `dtype`: its tiles'
    sums (accumulated in `dtype`, x's own when None; `sum_converts` says where torch copies x for that),
    then its total. Both are summed into one tensor: no concatenated copy (issue 42)."""
    dim %= x.dim()
    size = x.shape[dim]
    w = tile_width(size)
    count = size // w
    tiles = x.reshape(*x.shape[:dim], count, w, *x.shape[dim + 1 :])
    if count == 1:
        return tiles.sum(dim=dim + 1, dtype=dtype)
    shape = list(x.shape)
    shape[dim] = count + 1
    out = x.new_empty(shape, dtype=dtype or x.dtype)
    torch.sum(tiles, dim=dim + 1, dtype=dtype, out=out.narrow(dim, 0, count))
    torch.sum(out.narrow(dim, 0, count), dim=dim, keepdim=True, out=out.narrow(dim, count, 1))
    return out


def checksum_widths(n: int) -> list[int]:
    """Outputs added up by each of `checksums`' sums of a line of n: the tiles', then the line's."""
    w = tile_width(n)
    return [w] * (n // w) + ([n] if n > w else [])


@dataclass(frozen=True, slots=True)
class OperandSummary:
    """What the threshold needs from the "B side" of a check, taken once before the GEMM ("offline"),
    per tile of B's columns.

    Per checksum t (the tiles of `checksums`, then the whole line):

    Attributes:
        n: (checksums,) float64: the number of outputs checksum t adds up (its columns).
        s1: (checksums,) float64: Σ_k |μB_kt| over the K rows of B, μ over checksum t's columns.
        s1_cols: (checksums,) float64: Σ_{j in t} |Σ_k B_kj| / n, B's mass by columns on the scale of s1
            (docs/abft.md §3.1a): the threshold's mean term takes the larger of the two.
        squares: (K, checksums) float64: Σ_{j in t} B_kj², for the threshold's second-moment term.
    """

    n: torch.Tensor
    s1: torch.Tensor
    s1_cols: torch.Tensor
    squares: torch.Tensor


@dataclass(frozen=True, slots=True)
class Encoding:
    """B encoded for the row check: its tiles' row sums in the checker's precision and its summary."""

    rowsum: torch.Tensor  # (K, tiles) checker dtype: B's rows summed over each tile of columns
    summary: OperandSummary
    abs_rowsum: torch.Tensor | None = None  # (K, tiles) the same of |B|, only for the rigorous bound


@dataclass(frozen=True, slots=True)
class CheckResult:
    """Residuals, thresholds and the NaN-safe verdict per tile of each row (or column): (..., lines, tiles)."""

    d: torch.Tensor  # checker dtype: Σ_{j in tile} C_ij − A_i·(B·1_tile)
    t: torch.Tensor  # float64 thresholds
    bad: torch.Tensor  # bool: ~(|d| <= t), so NaN and inf residuals fail
    # |d| at its largest over a stack's repeats, shaped as t (`judged`): the ratio then divides one
    # repeat's worth of residuals instead of every repeat's, with the same result
    peak: torch.Tensor | None = None

    def ratio(self) -> float:
        """max |d|/t over the checked tiles: how close a clean case came to its threshold (inf if any fail)."""
        return float(self.ratio_tensor())

    def ratio_tensor(self) -> torch.Tensor:
        """`ratio` as a 0-dim float64 tensor where d lives: computing it does not wait for the device.

        |d| / t is divided in float64 inside the kernel (t is float64), and a NaN residual makes the max
        NaN, read as inf. Dividing the peak over repeats gives the same bits as dividing every repeat's
        |d| and taking the max: a correctly rounded division by a positive t keeps the order of |d|."""
        if not self.d.numel():
            return self.t.new_zeros(())
        magnitude = self.d.abs() if self.peak is None else self.peak
        return torch.nan_to_num(torch.amax(magnitude / self.t.clamp_min(1e-300)), nan=math.inf)

    def failing_lines(self) -> torch.Tensor:
        """(..., lines) bool: the rows (or columns) with a failing tile."""
        return self.bad.any(dim=-1)


def summarize(b: torch.Tensor) -> OperandSummary:
    """Summary of the rows of B (K rows of N entries each), per tile of its columns, for `vabft_threshold`.

    Args:
        b: (K, N) the operand on the right of the GEMM.
    """
    b64 = b.to(torch.float64)  # float64: squares of fp32 values may overflow fp32
    widths = torch.tensor(checksum_widths(b.shape[1]), dtype=torch.float64, device=b.device)
    return OperandSummary(
        n=widths,
        s1=(checksums(b64) / widths).abs().sum(dim=0),
        s1_cols=checksums(b64.sum(dim=0).abs()) / widths,
        squares=checksums(b64.square()),
    )


def threshold_terms(
    a: torch.Tensor, summary: OperandSummary, c: float = SIGMA_C
) -> tuple[torch.Tensor, torch.Tensor]:
    """The threshold's two terms per row of A and checksum of B's columns, each (M, checksums) float64
    (V-ABFT §3.4, as changed in docs/abft.md §3.1a-b)::

        mean_it   = n_t·|μA_i|·max(S1_t, S1c_t)
        moment_it = c·sqrt(Σ_k A_ik²·Σ_{j in t} B_kj²)

    with n_t the number of outputs checksum t adds up. The mean term is V-ABFT's, the rounding that
    drifting partial sums collect; S1c (`OperandSummary.s1_cols`) is sdcscan's: B's column sums can be
    large while its row means cancel (weights whose output channels have means of either sign), and then
    C_ij = K·μA_i·β_j + … carries a mean part that V-ABFT's S1 does not see. The second-moment term
    replaces V-ABFT's product of Bhatia–Davis variance bounds: rounding errors of random sign add up
    with the size of the terms they round, and the products' squares give that size for any spread of
    scales across rows, columns and channels.
    """
    a64 = a.to(torch.float64)
    mean = summary.n * a64.mean(dim=1).abs()[:, None] * torch.maximum(summary.s1, summary.s1_cols)
    return mean, c * torch.sqrt(a64.square() @ summary.squares)


def vabft_threshold(
    a: torch.Tensor, summary: OperandSummary, e_max: float, c: float = SIGMA_C, *, e_mean: float | None = None
) -> torch.Tensor:
    """T_it = e_mean·mean_it + e_max·moment_it (`threshold_terms`): each term with its own calibrated
    coefficient, since how much a device's rounding fills each differs per dtype and kernel (one
    coefficient for both is the worst of the two on every input; `e_mean` None means e_max).

    Args:
        a: (M, K) the operand on the left of the GEMM.
        summary: the B side (`summarize(B)`).
        e_max: the calibrated coefficient of the second-moment term.
        c: number of standard deviations allowed.
        e_mean: the calibrated coefficient of the mean term.
    Returns:
        (M, checksums) float64 thresholds for |D_it|.
    """
    mean, moment = threshold_terms(a, summary, c)
    return (e_max if e_mean is None else e_mean) * mean + e_max * moment


def encode(b: torch.Tensor, checker: torch.dtype, *, rigorous: bool = False) -> Encoding:
    """Encode B for the row check: B's rows summed per tile in the checker's precision, and its summary.

    Args:
        b: (K, N) the exact operand fed to the GEMM (bf16/fp16 operands are widened exactly).
        checker: dtype the checksums are computed in.
        rigorous: also keep |B|'s tile sums for `rigorous_threshold`.
    """
    bc = b.to(checker)
    abs_rowsum = checksums(bc.abs()) if rigorous else None
    return Encoding(rowsum=checksums(bc), summary=summarize(b), abs_rowsum=abs_rowsum)


def row_residual(a: torch.Tensor, c_out: torch.Tensor, rowsum: torch.Tensor) -> torch.Tensor:
    """D_it = Σ_{j in tile t} C_ij − A_i · (B · 1_t), in the dtype of `rowsum` (the checker's precision).

    Args:
        a: (M, K) operand as fed to the GEMM.  c_out: (M, N) result under test.  rowsum: (K, tiles).
    Returns:
        (M, tiles).
    """
    # contiguous: a product with a transposed matrix (the column check's Bᵀ) sums K terms one after
    # another on MKL, with 3x the rounding of a product with contiguous rows (docs/abft.md §3.2)
    return checksums(c_out, rowsum.dtype) - a.to(rowsum.dtype).contiguous() @ rowsum


def tiled_permutation(size: int, seed: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """A random permutation of range(size) that keeps each tile's members together (tiles in a random
    order, members in a random order within each): a tile's sum and statistics are the same before and
    after, so thresholds taken once on a pool of operands hold for any case permuted from it.

    Drawn on `device` from `seed` by the counter generator: the same permutation on every device."""
    w = tile_width(size)
    order = counter_rng.permutation(seed, size // w, device)
    keys = counter_rng.words(seed ^ 0x711E, size, device).view(size // w, w)
    within = torch.sort(keys, dim=1, stable=True).indices
    return (order[:, None] * w + within).flatten()


@dataclass(frozen=True, slots=True)
class Expected:
    """What the row and the column tile checksums of `C = A @ B` must be, and their thresholds, computed
    once per pair of operands; each repeat of the product then costs two reductions of C (`verify`)."""

    rows: torch.Tensor  # (M, tiles of N) checker dtype: A_i · (B · 1_t)
    row_t: torch.Tensor  # (M, tiles of N) float64
    cols: torch.Tensor  # (N, tiles of M) checker dtype: (1_tᵀ A) · B_j
    col_t: torch.Tensor  # (N, tiles of M) float64


def expected(
    a: torch.Tensor,
    b: torch.Tensor,
    enc: Encoding,
    checker: torch.dtype,
    e_max: float,
    c: float = SIGMA_C,
    *,
    e_mean: float | None = None,
) -> Expected:
    """Row and column expectations of `a @ b`, with the row side from B's encoding `enc` (taken before
    any fault could touch B) and the column side from A and B as given.

    The column side is the row side of Cᵀ = Bᵀ Aᵀ (roles swapped, N → M), computed as `row_residual`
    does, so the values e_max was calibrated with are the values checked.
    """
    row_t = vabft_threshold(a, enc.summary, e_max, c, e_mean=e_mean)
    bt, enc_a = b.t(), encode(a.t(), checker)
    col_t = vabft_threshold(bt, enc_a.summary, e_max, c, e_mean=e_mean)
    cols = bt.to(checker).contiguous() @ enc_a.rowsum  # as row_residual computes it
    return Expected(a.to(checker).contiguous() @ enc.rowsum, row_t, cols, col_t)


def sum_converts(source: torch.dtype, result: torch.dtype, device: torch.device) -> bool:
    """Whether torch's `sum(x, dtype=result)` first copies x into `result`'s dtype: always when they
    differ, except half and bfloat16 summed into float32 on a GPU, which its kernels widen as they read
    (ATen's `make_reduction_from_out_ty`; on a CPU the profiler shows the `aten::to` for both). The cost
    model's meta device stands for a GPU."""
    if source == result:
        return False
    widened_as_read = source in (torch.float16, torch.bfloat16) and result == torch.float32
    return not (device.type in ("cuda", "meta") and widened_as_read)


def verify(c_out: torch.Tensor, exp: Expected) -> tuple[CheckResult, CheckResult]:
    """(row check, column check) of one product, or of a stack of them (R, M, N), against its
    expectations; NaN-safe. For a stack, d and bad are (R, M, tiles) and (R, N, tiles): one reduction per
    side for the whole stack, which is what makes checking small products cheap (few eager ops per repeat)."""
    checker = exp.rows.dtype  # both sides read C once each, accumulating in the checker's precision
    if sum_converts(c_out.dtype, checker, c_out.device):
        c_out = c_out.to(checker)  # each side's sum would make this copy: one serves both
    d_rows = checksums(c_out, checker).sub_(exp.rows)  # in place: the sums are this call's own
    # the column side's tiles, summed in place (no transposed copy of C)
    d_cols = checksums(c_out, checker, dim=-2).transpose(-1, -2).sub_(exp.cols)
    return judged(d_rows, exp.row_t), judged(d_cols, exp.col_t)


def judged(d: torch.Tensor, t: torch.Tensor) -> CheckResult:
    """The check of residuals d (one product's, or a stack's (R, lines, tiles)) against thresholds t:
    |d| taken once for the verdict and for its peak over the repeats, which `ratio_tensor` divides
    (on a GPU each pass over d costs as much as a quarter of reading a bf16 output, issue 42)."""
    magnitude = d.abs()
    stacked = tuple(range(d.dim() - t.dim()))
    peak = torch.amax(magnitude, dim=stacked) if stacked else magnitude  # amax keeps NaN
    # NaN-safe: a residual fails unless it is provably within its threshold (inf and NaN fail); compared
    # in float64 inside the kernel (t is float64), where |d| is exact in any float format
    return CheckResult(d=d, t=t, bad=~(magnitude <= t), peak=peak)


@dataclass(frozen=True, slots=True)
class PoolStats:
    """What the checks of `A @ B` need of two operands and that tiled permutations do not change, taken once.

    Cases that multiply `A[rows][:, inner] @ B[inner][:, cols]` for `tiled_permutation`s rows and cols
    and any permutation inner (gemm_fp's operand pool) then need no statistics of their own: a row's
    mean and variance do not depend on the order of its elements, a tile keeps its members, and the sums
    S1..S3 run over the inner index in any order. So a case's thresholds are the pool's, reordered. Only
    the float rounding of the means and sums may differ from a computation on the case's operands, by
    about one ulp of fp32 relative, which is far inside the margin of e_max.
    """

    row_t: torch.Tensor  # (M, tiles of N) float64 threshold of each row tile of A @ B
    col_t: torch.Tensor  # (N, tiles of M) float64 threshold of each column tile
    b_rowsum: torch.Tensor  # (K, tiles of N) checker dtype: B's rows summed per tile
    a_colsum: torch.Tensor  # (K, tiles of M) checker dtype: A's columns summed per tile


def pool_stats(
    a: torch.Tensor,
    b: torch.Tensor,
    checker: torch.dtype,
    e_max: float,
    c: float = SIGMA_C,
    *,
    e_mean: float | None = None,
) -> PoolStats:
    """The statistics `expected` computes for `a @ b`, kept for `permuted_expected`."""
    enc_b, enc_a = encode(b, checker), encode(a.t(), checker)
    return PoolStats(
        row_t=vabft_threshold(a, enc_b.summary, e_max, c, e_mean=e_mean),
        col_t=vabft_threshold(b.t(), enc_a.summary, e_max, c, e_mean=e_mean),
        b_rowsum=enc_b.rowsum,
        a_colsum=enc_a.rowsum,
    )


def permuted_expected(
    stats: PoolStats,
    a: torch.Tensor,
    b: torch.Tensor,
    perms: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
) -> Expected:
    """Expectations of `a @ b` for `a = A[rows][:, inner]` and `b = B[inner][:, cols]`, with
    `perms = (rows, inner, cols)` (rows and cols from `tiled_permutation`) and `stats = pool_stats(A, B,
    ...)`: the pool's thresholds in the case's order, and the checksums of the case's own operands (two
    skinny matrix products)."""
    rows, inner, cols = perms
    row_tiles, col_tiles = _checksum_order(rows), _checksum_order(cols)
    checker = stats.b_rowsum.dtype
    return Expected(
        rows=a.to(checker) @ stats.b_rowsum[inner][:, col_tiles],
        row_t=stats.row_t[rows][:, col_tiles],
        cols=b.t().to(checker).contiguous() @ stats.a_colsum[inner][:, row_tiles],  # as row_residual does
        col_t=stats.col_t[cols][:, row_tiles],
    )


def _checksum_order(perm: torch.Tensor) -> torch.Tensor:
    """The pool's checksum at each of a `tiled_permutation`'s: its tiles moved, the total last."""
    w = tile_width(perm.numel())
    order = perm.view(-1, w)[:, 0] // w
    if order.numel() == 1:
        return order
    return torch.cat([order, order.new_full((1,), order.numel())])  # the total stays where it was: last


def rigorous_threshold(
    a: torch.Tensor, c_out: torch.Tensor, enc: Encoding, *, u_acc: float, u_chk: float, u_out: float
) -> torch.Tensor:
    """A worst-case bound on |D_it| valid for any summation order (docs/abft.md §3.3)::

        T_it = (γ_{K+2}(u_acc) + γ_{n+K+2}(u_chk))·|A_i|·(|B|·1_t) + (u_out + γ_{n}(u_chk))·Σ_{j in t}|C_ij|

    with n the tile's width. The first term covers the GEMM's own accumulation and the checker's GEMV;
    the second the rounding of each output to its dtype and the checker's tile sum. It needs no
    calibration but detects less.

    Args:
        a: (M, K).  c_out: (M, N).  enc: `encode(b, checker, rigorous=True)`.
        u_acc: unit roundoff of the GEMM's accumulation.  u_chk: of the checker.  u_out: of C's dtype.
    Returns:
        (M, tiles) float64.
    """
    assert enc.abs_rowsum is not None, "encode(..., rigorous=True) keeps |B|'s tile sums"
    k, widths = a.shape[1], [int(n) for n in enc.summary.n.tolist()]
    scale = a.to(torch.float64).abs() @ enc.abs_rowsum.to(torch.float64)  # (M, checksums)
    out_abs = checksums(c_out.to(torch.float64).abs())  # (M, checksums)
    acc = torch.tensor([gamma(k + 2, u_acc) + gamma(n + k + 2, u_chk) for n in widths], dtype=torch.float64)
    out = torch.tensor([u_out + gamma(n, u_chk) for n in widths], dtype=torch.float64)
    return acc * scale + out * out_abs
