"""V-ABFT row and column checks for floating-point GEMM: checksums, variance-based thresholds, localisation.

For `C = A @ B` with A (M, K) and B (K, N), the row identity is `Σ_j C_ij = A_i · (B · 1_N)`. In floating
point the two sides differ by rounding; V-ABFT (Gao, Hua, Chen) bounds that difference per row with a
threshold built from the mean and a variance bound of A's row and of B's rows, scaled by a per-platform
`e_max` (V-ABFT §3.4-3.5, with N and "k" mapped as in the authors' artifact: docs/abft.md §3.1). The
column check is the same identity with the roles of A and B swapped, `Σ_i C_ij = (1_Mᵀ A) · B_j`; a row
and a column that both fail name the corrupted element (two-sided localisation, docs/abft.md §3.5).

Pure maths: tensors in, tensors out. No device choice, no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sdcscan.checks.limits import (  # torch-free there: the catalogue and the calibration table read them
    SIGMA_C,
    gamma,
)


@dataclass(frozen=True, slots=True)
class OperandSummary:
    """What the threshold needs from the "B side" of a check, taken once before the GEMM ("offline").

    Attributes:
        n: entries per row of B, i.e. the number of output columns the row checksum adds up (N).
        s1: Σ_k |μB_k| over the K rows of B.
        s2: Σ_k σB_k², with σ² the Bhatia–Davis bound of row k.
        s3: Σ_k μB_k².
        s1_cols: Σ_j |Σ_k B_kj| / N, B's mass by columns on the scale of s1 (docs/abft.md §3.1a): the
            threshold's mean term takes the larger of the two.
    """

    n: int
    s1: float
    s2: float
    s3: float
    s1_cols: float = 0.0


@dataclass(frozen=True, slots=True)
class Encoding:
    """B encoded for the row check: its row sums in the checker's precision and its summary."""

    rowsum: torch.Tensor  # (K,) checker dtype: B · 1_N
    summary: OperandSummary
    abs_rowsum: torch.Tensor | None = None  # (K,) |B| · 1_N, only for the rigorous bound


@dataclass(frozen=True, slots=True)
class CheckResult:
    """Residuals, thresholds and the NaN-safe verdict per row (or per column)."""

    d: torch.Tensor  # (M,) checker dtype: Σ_j C_ij − A_i·(B·1)
    t: torch.Tensor  # (M,) float64 thresholds
    bad: torch.Tensor  # (M,) bool: ~(|d| <= t), so NaN and inf residuals fail

    def ratio(self) -> float:
        """max |d|/t over the checked rows: how close a clean case came to its threshold (inf if any fail)."""
        return float(self.ratio_tensor())

    def ratio_tensor(self) -> torch.Tensor:
        """`ratio` as a 0-dim float64 tensor where d lives: computing it does not wait for the device."""
        r = self.d.double().abs() / self.t.clamp_min(1e-300)
        return torch.nan_to_num(r, nan=math.inf).max() if r.numel() else r.new_zeros(())


def bhatia_davis(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row mean and the Bhatia–Davis variance bound `(max − μ)(μ − min)`, in float64.

    Args:
        x: (R, L) any float dtype.
    Returns:
        (μ, σ²), each (R,) float64. σ² ≥ the true variance of the row, which is what the threshold needs.
    """
    lo, hi = x.amin(dim=1), x.amax(dim=1)  # two vectorised passes: torch.aminmax is ~10x slower on CPU
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # no float64 copy of a large operand
    mu = x.sum(dim=1, dtype=acc).double() / x.shape[1]
    return mu, ((hi.double() - mu) * (mu - lo.double())).clamp_min(0.0)


def summarize(b: torch.Tensor) -> OperandSummary:
    """Summary of the rows of B (K rows of N entries each) for `vabft_threshold`.

    Args:
        b: (K, N) the operand on the right of the GEMM.
    """
    mu, var = bhatia_davis(b)
    acc = torch.float64 if b.dtype == torch.float64 else torch.float32
    s1_cols = float(b.sum(dim=0, dtype=acc).double().abs().sum()) / b.shape[1]
    return OperandSummary(
        n=b.shape[1], s1=float(mu.abs().sum()), s2=float(var.sum()), s3=float((mu * mu).sum()),
        s1_cols=s1_cols,
    )  # fmt: skip


def vabft_threshold(
    mu_a: torch.Tensor, var_a: torch.Tensor, summary: OperandSummary, e_max: float, c: float = SIGMA_C
) -> torch.Tensor:
    """V-ABFT threshold per row (V-ABFT §3.4; docs/abft.md §3.1, §3.1a)::

        T_i = e_max·( N·|μA_i|·max(S1, S1c) + c·sqrt(N·μA_i²·S2 + N²·σA_i²·S3) + c·sqrt(N)·σA_i·sqrt(S2) )

    S1c (`OperandSummary.s1_cols`) is sdcscan's: B's column sums can be large while its row means cancel
    (weights whose output channels have means of either sign), and then C_ij = K·μA_i·β_j + … carries
    a mean part that V-ABFT's S1 does not see. For operands of one sign S1c = S1 and T is V-ABFT's.

    Args:
        mu_a: (M,) float64 mean of each row of A.
        var_a: (M,) float64 Bhatia–Davis variance bound of each row of A.
        summary: the B side (`summarize(B)`), with N the number of columns summed.
        e_max: the calibrated relative error unit for this device, dtype and checker.
        c: number of standard deviations allowed.
    Returns:
        (M,) float64 thresholds for |D_i|.
    """
    n = float(summary.n)
    spread = torch.sqrt(n * mu_a * mu_a * summary.s2 + n * n * var_a * summary.s3)
    tail = math.sqrt(n) * torch.sqrt(var_a) * math.sqrt(summary.s2)
    s1 = max(summary.s1, summary.s1_cols)
    return e_max * (n * mu_a.abs() * s1 + c * spread + c * tail)


def encode(b: torch.Tensor, checker: torch.dtype, *, rigorous: bool = False) -> Encoding:
    """Encode B for the row check: B · 1_N in the checker's precision plus the threshold summary.

    Args:
        b: (K, N) the exact operand fed to the GEMM (bf16/fp16 operands are widened exactly).
        checker: dtype the checksums are computed in.
        rigorous: also keep |B| · 1_N for `rigorous_threshold`.
    """
    bc = b.to(checker)
    abs_rowsum = bc.abs().sum(dim=1) if rigorous else None
    return Encoding(rowsum=bc.sum(dim=1), summary=summarize(b), abs_rowsum=abs_rowsum)


def row_residual(a: torch.Tensor, c_out: torch.Tensor, rowsum: torch.Tensor) -> torch.Tensor:
    """D_i = Σ_j C_ij − A_i · (B · 1_N), in the dtype of `rowsum` (the checker's precision).

    Args:
        a: (M, K) operand as fed to the GEMM.  c_out: (M, N) result under test.  rowsum: (K,) B · 1_N.
    """
    # contiguous: a product with a transposed matrix (the column check's Bᵀ) sums K terms one after
    # another on MKL, with 3x the rounding of a product with contiguous rows (docs/abft.md §3.2)
    return c_out.to(rowsum.dtype).sum(dim=1) - a.to(rowsum.dtype).contiguous() @ rowsum


def failing(d: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """NaN-safe verdict: a residual fails unless it is provably within its threshold (inf/NaN fail)."""
    return ~(d.double().abs() <= t)


def row_check(
    a: torch.Tensor, c_out: torch.Tensor, enc: Encoding, e_max: float, c: float = SIGMA_C
) -> CheckResult:
    """The V-ABFT row check of `c_out = a @ b` against B's encoding.

    Args:
        a: (M, K) left operand.  c_out: (M, N) result under test.  enc: `encode(b, checker)`.
        e_max: calibrated error unit.  c: standard deviations allowed.
    """
    d = row_residual(a, c_out, enc.rowsum)
    mu, var = bhatia_davis(a)
    t = vabft_threshold(mu, var, enc.summary, e_max, c)
    return CheckResult(d=d, t=t, bad=failing(d, t))


def column_check(
    a: torch.Tensor,
    b: torch.Tensor,
    c_out: torch.Tensor,
    checker: torch.dtype,
    e_max: float,
    c: float = SIGMA_C,
) -> CheckResult:
    """The column check `Σ_i C_ij − (1ᵀA)·B_j`: the row check of Cᵀ = Bᵀ Aᵀ (roles swapped, N → M).

    Args:
        a: (M, K).  b: (K, N).  c_out: (M, N).  checker: dtype of the checksums.
    Returns:
        A CheckResult over the N columns.
    """
    return row_check(b.t(), c_out.t(), encode(a.t(), checker), e_max, c)


@dataclass(frozen=True, slots=True)
class Expected:
    """What the row and the column checksums of `C = A @ B` must be, and their thresholds, computed once
    per pair of operands; each repeat of the product then costs two reductions of C (`verify`)."""

    rows: torch.Tensor  # (M,) checker dtype: A_i · (B · 1_N)
    row_t: torch.Tensor  # (M,) float64
    cols: torch.Tensor  # (N,) checker dtype: (1_Mᵀ A) · B_j
    col_t: torch.Tensor  # (N,) float64


def expected(
    a: torch.Tensor, b: torch.Tensor, enc: Encoding, checker: torch.dtype, e_max: float, c: float = SIGMA_C
) -> Expected:
    """Row and column expectations of `a @ b`, with the row side from B's encoding `enc` (taken before
    any fault could touch B) and the column side from A and B as given.

    The arithmetic is that of `row_check` and `column_check`, expression for expression, so the values
    e_max was calibrated with are the values checked.
    """
    mu, var = bhatia_davis(a)
    row_t = vabft_threshold(mu, var, enc.summary, e_max, c)
    bt, enc_a = b.t(), encode(a.t(), checker)
    mu_b, var_b = bhatia_davis(bt)
    col_t = vabft_threshold(mu_b, var_b, enc_a.summary, e_max, c)
    cols = bt.to(checker).contiguous() @ enc_a.rowsum  # as row_residual computes it
    return Expected(a.to(checker).contiguous() @ enc.rowsum, row_t, cols, col_t)


def verify(c_out: torch.Tensor, exp: Expected) -> tuple[CheckResult, CheckResult]:
    """(row check, column check) of one product, or of a stack of them (R, M, N), against its
    expectations; NaN-safe. For a stack, d and bad are (R, M) and (R, N): one reduction per side for
    the whole stack, which is what makes checking small products cheap (few eager ops per repeat)."""
    c = c_out.to(exp.rows.dtype)  # one conversion shared by both sides (none when dtypes agree)
    d_rows = c.sum(dim=-1) - exp.rows
    d_cols = c.sum(dim=-2) - exp.cols
    return (
        CheckResult(d=d_rows, t=exp.row_t, bad=failing(d_rows, exp.row_t)),
        CheckResult(d=d_cols, t=exp.col_t, bad=failing(d_cols, exp.col_t)),
    )


@dataclass(frozen=True, slots=True)
class PoolStats:
    """What the checks of `A @ B` need of two operands and that no permutation changes, taken once.

    Cases that multiply `A[rows][:, inner] @ B[inner][:, cols]` for permutations rows, inner and cols
    (gemm_fp's operand pool) then need no statistics of their own: a row's mean, minimum and maximum do
    not depend on the order of its elements, so its V-ABFT threshold is the pool row's threshold, and
    the sums S1..S3 run over the inner index in any order. Only the float rounding of the means and
    sums may differ from a computation on the case's operands, by about one ulp of fp32 relative,
    which is far inside the margin of e_max.
    """

    row_t: torch.Tensor  # (M,) float64 threshold of each row of A @ B
    col_t: torch.Tensor  # (N,) float64 threshold of each column
    b_rowsum: torch.Tensor  # (K,) checker dtype: B · 1_N
    a_colsum: torch.Tensor  # (K,) checker dtype: 1_Mᵀ · A


def pool_stats(
    a: torch.Tensor, b: torch.Tensor, checker: torch.dtype, e_max: float, c: float = SIGMA_C
) -> PoolStats:
    """The statistics `expected` computes for `a @ b`, kept for `permuted_expected`."""
    enc_b, enc_a = encode(b, checker), encode(a.t(), checker)
    mu, var = bhatia_davis(a)
    mu_b, var_b = bhatia_davis(b.t())
    return PoolStats(
        row_t=vabft_threshold(mu, var, enc_b.summary, e_max, c),
        col_t=vabft_threshold(mu_b, var_b, enc_a.summary, e_max, c),
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
    `perms = (rows, inner, cols)` and `stats = pool_stats(A, B, ...)`: the pool's thresholds in the
    case's order, and the checksums of the case's own operands (two matrix-vector products)."""
    rows, inner, cols = perms
    checker = stats.b_rowsum.dtype
    return Expected(
        rows=a.to(checker) @ stats.b_rowsum[inner],
        row_t=stats.row_t[rows],
        cols=b.t().to(checker).contiguous() @ stats.a_colsum[inner],  # as row_residual computes it
        col_t=stats.col_t[cols],
    )


def rigorous_threshold(
    a: torch.Tensor, c_out: torch.Tensor, enc: Encoding, *, u_acc: float, u_chk: float, u_out: float
) -> torch.Tensor:
    """A worst-case bound on |D_i| valid for any summation order (docs/abft.md §3.3)::

        T_i = (γ_{K+2}(u_acc) + γ_{N+K+2}(u_chk))·|A_i|·(|B|·1) + (u_out + γ_{N}(u_chk))·Σ_j|C_ij|

    The first term covers the GEMM's own accumulation and the checker's GEMV; the second the rounding
    of each output to its dtype and the checker's row sum. It needs no calibration but detects less.

    Args:
        a: (M, K).  c_out: (M, N).  enc: `encode(b, checker, rigorous=True)`.
        u_acc: unit roundoff of the GEMM's accumulation.  u_chk: of the checker.  u_out: of C's dtype.
    """
    assert enc.abs_rowsum is not None, "encode(..., rigorous=True) keeps |B|·1"
    k, n = a.shape[1], enc.summary.n
    scale = a.to(torch.float64).abs() @ enc.abs_rowsum.to(torch.float64)  # (M,)
    out_abs = c_out.to(torch.float64).abs().sum(dim=1)  # (M,)
    return (gamma(k + 2, u_acc) + gamma(n + k + 2, u_chk)) * scale + (u_out + gamma(n, u_chk)) * out_abs


def localize(rows: CheckResult, cols: CheckResult, limit: int = 8) -> list[tuple[int, int | None]]:
    """Pair failing rows with failing columns: one failing row and one failing column name an element.

    Args:
        rows: row check over M rows.  cols: column check over N columns.  limit: pairs returned at most.
    Returns:
        (i, j) pairs where the failures intersect unambiguously (one row, or one column); (i, None) for
        each failing row where no column fails (an operand changed after encoding) or where several rows
        and several columns fail and the pairing is ambiguous.
    """
    bad_rows = rows.bad.nonzero().flatten().tolist()
    bad_cols = cols.bad.nonzero().flatten().tolist()
    if len(bad_rows) == 1 and bad_cols:
        return [(bad_rows[0], j) for j in bad_cols[:limit]]
    if len(bad_cols) == 1:
        return [(i, bad_cols[0]) for i in bad_rows[:limit]]
    return [(i, None) for i in bad_rows[:limit]]
