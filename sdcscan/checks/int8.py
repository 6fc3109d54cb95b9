"""Exact ABFT for int8 GEMM (u8 activations × s8 weights → s32): checksum rows, three checks, CUDA shapes.

The weight W (n, k) gets extra rows so that every row of C_ext = A @ W_ext.T satisfies identities
(Li et al. §IV; docs/abft.md §1.1). Everything here is exact integer arithmetic: no tolerance, no false
positives. Functions take tensors on any device and never choose one.

Three checks, all on every output row of every repeat (docs/abft.md §1.3 says what each one sees):
    row: Σ_{j<n} C[i, j] against the row checksum columns, modulo 2^32 or 127 (the scheme).
    column: Σ_i C[i, j] summed over every row of every repeat of a case, exactly in int64, against
        W[j, :] · Σ_i A[i, :]. It sees any fault confined to one row (swaps, compensating pairs, paired
        high-bit flips, row offsets) that a modular row sum cancels.
    weighted row: Σ_{j<n} (j + 1)·C[i, j], exactly, against position-weighted checksum columns. It sees
        any fault confined to one column, swapped columns, and the "rectangle" (+δ, −δ in two rows and
        two columns) that plain row and column sums both cancel.
The exact sums are fp64 sums of int32 words (one conversion of a block of C serves both): every word
is at most 2^31 in magnitude, so sums of fewer than 2^22 such words (a weight counting as that many)
stay below 2^53 and never round, in any order and on any device (CUDA has no int64 matmul; on CPU an
int64 multiply-and-sum is 2–4× slower).

Row checksum schemes:
    mod2_32: three checksum rows hold the column sums r = Σ_j W[j, :] as balanced base-255 digits
        d0 + 255·d1 + 255²·d2 (each digit in [-127, 127], so it fits int8). Then, for every row i,
            Σ_{j<n} C[i, j] ≡ C[i, n] + 255·C[i, n+1] + 255²·C[i, n+2]   (mod 2^32),
        and the left side is a cheap int32 sum that wraps. Base 255 rather than 256 (bytes): the
        digit weights are odd, so a flip of bit b of a checksum word moves the identity by odd·2^b,
        never 0 mod 2^32 (with 256, bits ≥ 24 of C[:, n+1] and ≥ 16 of C[:, n+2] were invisible).
    mod127: the paper's single row chk = (−r) mod 127, so Σ_{j≤n} C[i, j] ≡ 0 (mod 127), summed in int64.
        127 is prime and 2^b mod 127 ≠ 0, so every single-bit flip of an output word is seen; errors
        that are multiples of 127 are not.
After them come the weighted checksum rows, u = Σ_j (j + 1)·W[j, :] in balanced base-255 digits, then
optionally the row-tag readers, then zero rows up to a multiple of 8 (cuBLAS needs it, and it is faster
on CPU); C's padding columns must be zero, which is checked too.

Row tags (issue 44): the three checks above are blind to rows written at each other's addresses (two
rows exchanged, a stuck row-address bit): a row's checksums move with it and no column sum changes.
So each row of the activations carries its own index, as base-128 digits in columns of its own beyond
the data (`tagged_width`), and the weight a reader row per digit (1 in that column, 0 elsewhere): the
product copies every row's tag into its own columns of C. A row found under another row's tag was
moved; the check is exact, a single comparison per digit, and every row moved is caught.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sdcscan.checks import int8_block

# The sums of a block, and what they are made with, are int8_block's; named here too, as this module's API.
from sdcscan.checks.int8_block import column_sums as column_sums
from sdcscan.checks.int8_block import position_weights
from sdcscan.checks.int8_block import row_sum_coefficients as row_sum_coefficients

# The digits, schemes and size limits, torch-free in sdcscan.checks.limits (the workload catalogue
# validates gemm_int8's parameters against them); named here too, as this module's API.
from sdcscan.checks.limits import (
    CHUNK_ROWS,
    DIGIT_BASE,
    DIGIT_MAX,
    MAX_N_MOD2_32,
    MAX_N_WEIGHTED,
    N_DIGITS,
    SCHEMES,
    digits_needed,
    weighted_magnitude,
)
from sdcscan.checks.limits import INT32_MAX as INT32_MAX
from sdcscan.checks.limits import MAX_WEIGHTED_DIGITS as MAX_WEIGHTED_DIGITS
from sdcscan.checks.limits import max_exact_k as max_exact_k

ROW_MULTIPLE = 8
# W_ext's rows (C_ext's width) and its columns (the tagged width: the GEMM's inner dimension) on a GPU: a
# multiple of 32. On an H200 (torch 2.11, CUDA 13) `_int_mm` at m = k = 8192 took 1.20 ms 8,192, 8,224
# or 8,256 wide and 3.72 ms 8,200 wide, 0.63-0.64 ms 4,096, 4,112 or 4,160 wide and 1.90 ms 4,104 wide: a
# dimension 8 more than a multiple of 16 gets a kernel three times slower (scripts/bench_int_mm_width.py,
# README "On a GPU"). gemm_int8's inner dimension was such a one (8,192 data and 2 tag columns, padded to
# 8,200), and its products ran at 2.83 ms, not 1.2, in a CUTLASS "align4" kernel (scripts/profile_case.py).
# CPUs keep 8: their kernels showed no such step, and every padding column is one more to multiply.
GPU_ROW_MULTIPLE = 32
ACTIVATION_CHUNK = 128  # rows of u8 activations whose sum fits int16: 128·255 = 32,640
# Base-128 digits of activation sums are u8 in [0, 127]: valid activations even on saturating kernels.
ACTIVATION_DIGIT_BASE = 128
CUDA_MIN_M = 17  # cuBLAS int8 path in torch._int_mm requires m > 16
CUDA_PAD_M = 32  # pad skinny activations to this many rows


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each kind of row of W_ext (column of C_ext) lies: data, row checksum, weighted, zeros."""

    n: int
    scheme: str
    row_digits: int
    weighted_digits: int
    n_ext: int
    tags: int = 0  # row-tag digits (their reader rows come after the weighted rows)

    @property
    def weighted_start(self) -> int:
        return self.n + self.row_digits

    @property
    def tag_start(self) -> int:
        return self.weighted_start + self.weighted_digits

    @property
    def pad_start(self) -> int:
        return self.tag_start + self.tags


@dataclass(frozen=True, slots=True)
class RowCheck:
    """Per-row verdict of one verification. All fields are (m,) tensors.

    bad: True where the row breaks its identity or a padding column is non-zero.
    data_sum: the data side, Σ_{j<n} C[i, j] reduced mod 2^32 (mod2_32) or mod 127.
    checksum: what the checksum columns say that sum must be, reduced the same way.
    pad_nonzero: True where a padding column of C is not zero.
    """

    bad: torch.Tensor
    data_sum: torch.Tensor
    checksum: torch.Tensor
    pad_nonzero: torch.Tensor


@dataclass(frozen=True, slots=True)
class RowsCheck:
    """Both per-row checks of a block of output rows, and the block's exact column sums.

    row: the modular row check (with the padding columns).
    weighted_bad, weighted_sum, weighted_checksum: (rows,) the exact position-weighted row check.
    column_sums: (n,) int64 exact Σ_i C[i, j] over the block's rows, for check_columns.
    fingerprint: () int64 `digest.fingerprint_words` of the block, for the case's digest.
    tag_bad: (rows,) True where a row's tag is not its own (all False without tags).
    tags, expected_tags: (rows,) float64 the tag values the rows of C carry (`tag_places`) and the
        ones they should: integers below 2^53, exact.
    """

    row: RowCheck
    weighted_bad: torch.Tensor
    weighted_sum: torch.Tensor
    weighted_checksum: torch.Tensor
    column_sums: torch.Tensor
    tag_bad: torch.Tensor
    tags: torch.Tensor
    expected_tags: torch.Tensor
    fingerprint: torch.Tensor

    @property
    def bad(self) -> torch.Tensor:
        """(rows,) True where any per-row check fails."""
        return self.row.bad | self.weighted_bad | self.tag_bad


@dataclass(frozen=True, slots=True)
class ColumnCheck:
    """The exact column check of a case: (n,) tensors, int64 sums over every row of every repeat."""

    bad: torch.Tensor
    data_sum: torch.Tensor
    expected: torch.Tensor


def checksum_rows(scheme: str) -> int:
    """How many row checksum rows a scheme appends to the weight (the weighted rows come on top)."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown int8 ABFT scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    return N_DIGITS if scheme == "mod2_32" else 1


def row_multiple(device: torch.device) -> int:
    """What W_ext's rows are padded to a multiple of on `device` (anything but a CPU: a GPU, or the meta
    device the cost model counts a GPU's case on)."""
    return ROW_MULTIPLE if device.type == "cpu" else GPU_ROW_MULTIPLE


def layout(n: int, scheme: str, tags: int = 0, multiple: int = ROW_MULTIPLE) -> Layout:
    """The row layout of W_ext for a weight of n rows (and `tags` row-tag readers), padded with zero rows
    to a multiple of `multiple` (itself a multiple of ROW_MULTIPLE).

    Raises:
        ValueError: unknown scheme, or n beyond MAX_N_WEIGHTED.
    """
    rows = checksum_rows(scheme)
    if not 1 <= n <= MAX_N_WEIGHTED:
        raise ValueError(f"int8 ABFT: n must be in [1, {MAX_N_WEIGHTED}] for the weighted checksum, got {n}")
    weighted = digits_needed(weighted_magnitude(n))
    if multiple % ROW_MULTIPLE:
        raise ValueError(f"int8 ABFT: the row multiple must be a multiple of {ROW_MULTIPLE}, got {multiple}")
    return Layout(n, scheme, rows, weighted, _round_up(n + rows + weighted + tags, multiple), tags)


def extended_rows(n: int, scheme: str, tags: int = 0, multiple: int = ROW_MULTIPLE) -> int:
    """n_ext: data rows plus checksum rows (and tag readers), rounded up to a multiple of `multiple`."""
    return layout(n, scheme, tags, multiple).n_ext


def tags_needed(rows: int) -> int:
    """Base-128 digits that tag each of `rows` activation rows with its index (at least one)."""
    return max(1, -(-max(rows - 1, 1).bit_length() // 7))


def tagged_width(k: int, tags: int, multiple: int = ROW_MULTIPLE) -> int:
    """Columns of a tagged activation row: k data, `tags` tag digits, zeros up to a multiple of `multiple`
    (the GEMM's inner dimension: `row_multiple` of the device)."""
    return _round_up(k + tags, multiple) if tags else k


def row_tags(rows: torch.Tensor, tags: int) -> torch.Tensor:
    """(len, tags) uint8 base-128 digits of row indices `rows` (int64): each in [0, 127], a valid
    activation also on kernels restricted to A <= 127, least significant first."""
    shifts = 7 * torch.arange(tags, dtype=torch.int64, device=rows.device)
    return ((rows.unsqueeze(1) >> shifts) & (ACTIVATION_DIGIT_BASE - 1)).to(torch.uint8)


def tag_places(tags: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(tags,) float64 place values 128^t of the tag digits: tag columns @ places is the row index."""
    return float(ACTIVATION_DIGIT_BASE) ** torch.arange(tags, dtype=torch.float64, device=device)


def signed_tag_shift(tags: int) -> int:
    """What the s8 × s8 route's words (digit − 128) take off a tag's value: 128·Σ_t 128^t."""
    return int(128 * sum(ACTIVATION_DIGIT_BASE**t for t in range(tags)))


def balanced_digits(r: torch.Tensor, count: int = N_DIGITS) -> torch.Tensor:
    """Write integers r (int64, any shape) as `count` balanced base-255 digits, int8, digit axis first.

    Raises:
        ValueError: some |r| is too large for `count` digits.
    """
    digits = []
    for _ in range(count):
        d = torch.remainder(r + DIGIT_MAX, DIGIT_BASE) - DIGIT_MAX  # in [-127, 127]
        digits.append(d.to(torch.int8))
        r = (r - d) // DIGIT_BASE  # exact division: r - d is a multiple of 255
    if bool((r != 0).any()):
        raise ValueError(f"sums too large for {count} base-255 digits (mod2_32 needs n <= {MAX_N_MOD2_32})")
    return torch.stack(digits)  # (count, *r.shape)


def weight_sums(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """r = Σ_j W[j, :] and u = Σ_j (j + 1)·W[j, :] of an (n, k) int8 weight, (k,) int64 each.

    One fp64 GEMM of (2, n) × (n, k): exact, because every product and partial sum is an integer of
    magnitude at most 128·n(n + 1)/2 < 2^53 (n <= MAX_N_WEIGHTED), whatever the summation order, and
    it is several times faster than an int64 reduction of W on CPU.
    """
    n = w.shape[0]
    coefficients = torch.stack(
        [torch.ones(n, dtype=torch.float64, device=w.device), position_weights(n, w.device).double()]
    )
    sums = (coefficients @ w.double()).to(torch.int64)
    return sums[0], sums[1]


def encode_weight(w: torch.Tensor, scheme: str, tags: int = 0, multiple: int = ROW_MULTIPLE) -> torch.Tensor:
    """Append the row checksum rows, the weighted checksum rows, the row-tag readers and zero padding
    to a weight.

    Args:
        w: (n, k) int8 weight; C = A @ w.T.
        scheme: "mod2_32" or "mod127".
        tags: row-tag digits the activations carry beyond their k data columns (0: none).
        multiple: n_ext and the tagged width are padded to multiples of it (`row_multiple` of the device).
    Returns:
        (n_ext, tagged_width(k, tags, multiple)) int8, contiguous, laid out as
        `layout(n, scheme, tags, multiple)` says; every row but a tag reader is 0 beyond column k, reader
        t is 1 at column k + t.
    Raises:
        ValueError: unknown scheme, or n too large for the scheme's digits.
    """
    n, k = w.shape
    lay = layout(n, scheme, tags, multiple)
    r, u = weight_sums(w)  # |r| <= 128·n, |u| <= weighted_magnitude(n)
    # mod2_32: (3, k) digits of r; mod127: (1, k) row (−r) mod 127, in [0, 126]
    chk = balanced_digits(r) if scheme == "mod2_32" else torch.remainder(-r, 127).to(torch.int8).unsqueeze(0)
    weighted = balanced_digits(u, lay.weighted_digits)
    pad = w.new_zeros(lay.n_ext - lay.tag_start, k)  # the tag readers' data columns too
    encoded = torch.cat([w, chk, weighted, pad])
    if not tags:
        return encoded.contiguous()
    wide = encoded.new_zeros(lay.n_ext, tagged_width(k, tags, multiple))
    wide[:, :k] = encoded
    readers = torch.arange(tags, device=w.device)
    wide[lay.tag_start + readers, k + readers] = 1
    return wide


def verify(
    c_ext: torch.Tensor,
    n: int,
    scheme: str,
    data_sum: torch.Tensor | None = None,
    tags: int = 0,
    pad_nonzero: torch.Tensor | None = None,
) -> RowCheck:
    """The modular row check: every row of C_ext = A @ W_ext.T against its row checksum columns.

    Args:
        c_ext: (m, n_ext) int32 product with an encoded weight of n data rows.
        n: number of data rows of the weight (data columns of C).
        scheme: the scheme the weight was encoded with.
        data_sum: (m,) int64 exact Σ_{j<n} C[i, j], where the caller has it (check_rows takes it from
            the block's sums); summed here otherwise.
        tags: the row-tag readers the weight has (their columns are no padding).
        pad_nonzero: (m,) True where a padding column is not zero, where the caller has it; found here
            otherwise.
    Returns:
        RowCheck; exact, so any bad row is a wrong result, never rounding.
    """
    lay = layout(n, scheme, tags)
    chk = c_ext[:, n : n + lay.row_digits].to(torch.int64)  # (m, rows)
    if pad_nonzero is None:
        pad_nonzero = (c_ext[:, lay.pad_start :] != 0).any(1)  # (m,)
    if data_sum is None:
        data_sum = c_ext[:, :n].sum(1, dtype=torch.int64)
    if scheme == "mod2_32":
        data = data_sum & 0xFFFFFFFF  # the int32 sum as it wraps, as a non-negative residue mod 2^32
        checksum = (chk[:, 0] + DIGIT_BASE * chk[:, 1] + DIGIT_BASE**2 * chk[:, 2]) & 0xFFFFFFFF
    else:
        data = torch.remainder(data_sum, 127)  # exact int64 sum: 2^32 ≢ 0 (mod 127)
        checksum = torch.remainder(-chk[:, 0], 127)
    return RowCheck((data != checksum) | pad_nonzero, data, checksum, pad_nonzero)


def check_rows(
    c_ext: torch.Tensor,
    lay: Layout,
    coefficients: torch.Tensor | None = None,
    expected_tags: torch.Tensor | None = None,
    fused: bool = False,
) -> RowsCheck:
    """Both per-row checks of a block of output rows (any number, e.g. several repeats stacked), and
    the block's column sums for check_columns and fingerprint for its digest.

    The block's sums (`int8_block`) by torch ops, a fixed handful of kernels per block whatever its
    size, or by the fused kernel, one read of the block; the same integers either way. The checksum
    and tag columns, a few per row, are read here.

    Args:
        c_ext: (rows, n_ext) int32 product, fewer than CHUNK_ROWS rows; it must not have wrapped
            (k <= max_exact_k()).
        lay: the layout of the weight the product was made with.
        coefficients: `row_sum_coefficients(lay.n)` on c_ext's device, built once by a caller that
            checks many blocks; built here otherwise.
        expected_tags: (rows,) float64 the tag value each row's product must carry: its activation
            row's index (less `signed_tag_shift` on the s8 × s8 route); needed when the layout has tags.
        fused: the sums by the fused kernel (`triton_kernels.unavailable` must find nothing in the way on
            c_ext's device).
    Returns:
        RowsCheck; exact, so any bad row is a wrong result, never rounding.
    Raises:
        ValueError: CHUNK_ROWS rows or more.
    """
    if c_ext.shape[0] >= CHUNK_ROWS:  # one limit on both paths: the torch path's fp64 sums need it
        raise ValueError(f"int8 ABFT: at most {CHUNK_ROWS - 1} rows per block for exact fp64 sums")
    if fused:
        sums = int8_block.fused(c_ext, lay.n, lay.pad_start)
    else:
        sums = int8_block.reference(c_ext, lay.n, lay.pad_start, coefficients)
    digits = c_ext[:, lay.weighted_start : lay.pad_start].to(torch.int64)
    weighted_checksum = digits[:, 0].clone()
    for t in range(1, lay.weighted_digits):  # Σ_t 255^t·digit_t, exact (see MAX_WEIGHTED_DIGITS)
        weighted_checksum += DIGIT_BASE**t * digits[:, t]
    if lay.tags:
        if expected_tags is None:
            raise ValueError("int8 ABFT: a tagged layout needs the rows' expected tags")
        # Each row's tag as one value (a new tensor: the block's buffer is reused), exact in fp64.
        tags = c_ext[:, lay.tag_start : lay.pad_start].double() @ tag_places(lay.tags, c_ext.device)
        tag_bad = tags != expected_tags
    else:
        tags = expected_tags = torch.zeros(c_ext.shape[0], dtype=torch.float64, device=c_ext.device)
        tag_bad = torch.zeros(c_ext.shape[0], dtype=torch.bool, device=c_ext.device)
    return RowsCheck(
        row=verify(c_ext, lay.n, lay.scheme, sums.rows, lay.tags, sums.pad_nonzero),
        weighted_bad=sums.weighted != weighted_checksum,
        weighted_sum=sums.weighted,
        weighted_checksum=weighted_checksum,
        column_sums=sums.columns,
        tag_bad=tag_bad,
        tags=tags,
        expected_tags=expected_tags,
        fingerprint=sums.fingerprint,
    )


def weighted_row_sums(data: torch.Tensor) -> torch.Tensor:
    """(rows,) int64 Σ_j (j + 1)·data[i, j] of int32 words held as fp64, exactly (`row_sum_coefficients`)."""
    return (data @ row_sum_coefficients(data.shape[1], data.device)[:, 1:]).to(torch.int64).sum(1)


def activation_sums(a: torch.Tensor) -> torch.Tensor:
    """(k,) int64 Σ over every row of u8 activations a (..., k): the A side of the column check.

    int16 sums of ACTIVATION_CHUNK rows (128·255 < 2^15: exact), then int64: twice as fast as int32 on CPU.
    """
    k = a.shape[-1]
    flat = a.reshape(-1, k)
    rows = flat.shape[0]
    whole = rows - rows % ACTIVATION_CHUNK
    total = torch.zeros(k, dtype=torch.int64, device=a.device)
    if whole:
        total += (
            flat[:whole].view(-1, ACTIVATION_CHUNK, k).sum(1, dtype=torch.int16).sum(0, dtype=torch.int64)
        )
    if whole < rows:
        total += flat[whole:].sum(0, dtype=torch.int16)
    return total


def activation_digits(s: torch.Tensor, max_value: int) -> torch.Tensor:
    """Base-128 digits of non-negative sums s (k,) <= max_value, as (count, k) u8 rows in [0, 127].

    Appended to the activations of one GEMM (the column checksum rows of classic ABFT), they come out
    multiplied by W_ext, exactly, for a few more rows of one GEMM per case instead of an fp64 or int64
    pass over W. Each digit row is a valid activation row, also on kernels restricted to A <= 127.
    """
    count = max(1, -(-max(max_value, 1).bit_length() // 7))
    shifts = 7 * torch.arange(count, dtype=torch.int64, device=s.device)
    return ((s.unsqueeze(0) >> shifts.unsqueeze(1)) & (ACTIVATION_DIGIT_BASE - 1)).to(torch.uint8)


def expected_column_sums(digit_products: torch.Tensor, n: int) -> torch.Tensor:
    """(n,) int64 W·s from the products P of activation_digits and W_ext: Σ_t 128^t·P[t, :n], exact."""
    total = digit_products[0, :n].to(torch.int64)
    for t in range(1, digit_products.shape[0]):
        total = total + ACTIVATION_DIGIT_BASE**t * digit_products[t, :n].to(torch.int64)
    return total


def row_prefix(rows: torch.Tensor) -> torch.Tensor:
    """(R + 1, k) int32 Q of (R, k) u8 activation rows: Q[r] = Σ_{r' < r} rows[r'], so the sums of the
    m rows from r0 are Q[r0 + m] − Q[r0] (`activation_sums_of_row_views`). Exact while R·255 < 2^31."""
    if rows.shape[0] * 255 >= 2**31:
        raise ValueError(f"int8 ABFT: {rows.shape[0]} activation rows are too many for int32 prefix sums")
    prefix = torch.zeros((rows.shape[0] + 1, rows.shape[1]), dtype=torch.int32, device=rows.device)
    prefix[1:] = rows.cumsum(0, dtype=torch.int32)
    return prefix


def activation_sums_of_row_views(prefix: torch.Tensor, starts: torch.Tensor, m: int) -> torch.Tensor:
    """(k,) int64 Σ over the (m, k) views of whole rows from each of `starts` ((R,) int64), from
    `row_prefix`: two gathers of R rows, whatever m."""
    return (prefix[starts + m] - prefix[starts]).sum(0, dtype=torch.int64)


def signed_activations(a_u8: torch.Tensor) -> torch.Tensor:
    """u8 activations as the s8 words of a − 128 (a ^ 0x80), for the s8 × s8 route."""
    return (a_u8 ^ 0x80).view(torch.int8)


def signed_column_shift(w_ext: torch.Tensor) -> torch.Tensor:
    """(n_ext,) int64 128·Σ_k W_ext[j, k]: what each row of activations shifted by −128 takes off each
    column of the product, so Σ_i C_s[i, j] = W[j, :]·Σ_i A[i, :] − rows·shift[j] (the column check of
    the s8 × s8 route). Every identity of the row checks is linear in A, so it holds for C_s as it is."""
    return w_ext.sum(1, dtype=torch.int64) * 128


def check_columns(data_sum: torch.Tensor, expected: torch.Tensor) -> ColumnCheck:
    """Compare the exact column sums of every output of a case with W·(Σ A): no modulus, no tolerance."""
    return ColumnCheck(data_sum != expected, data_sum, expected)


# --- CUDA host-side planning: torch._int_mm on CUDA takes int8 × int8 only, m > 16, k % 8 == 0, n % 8 == 0.


@dataclass(frozen=True, slots=True)
class CudaPlan:
    """Padded shape for the CUDA int8 GEMM: A (m_pad, k_pad) int8 × W_ext (n_ext, k_pad) int8."""

    m_pad: int
    k_pad: int
    n_ext: int


def plan_cuda(m: int, k: int, n_ext: int) -> CudaPlan:
    """Pad m above 16 and k to a multiple of 8; n_ext must already be a multiple of 8.

    Raises:
        ValueError: a non-positive dimension, or n_ext not a multiple of 8.
    """
    if min(m, k, n_ext) <= 0:
        raise ValueError(f"int8 GEMM shape must be positive, got m={m}, k={k}, n_ext={n_ext}")
    if n_ext % ROW_MULTIPLE:
        raise ValueError(f"n_ext={n_ext} must be a multiple of {ROW_MULTIPLE}; encode_weight pads it")
    return CudaPlan(m if m >= CUDA_MIN_M else CUDA_PAD_M, _round_up(k, ROW_MULTIPLE), n_ext)


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple
