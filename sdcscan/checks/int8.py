"""Exact ABFT for int8 GEMM (u8 activations × s8 weights → s32): checksum rows, row verification, CUDA shapes.

The weight W (n, k) gets extra rows so that every row of C_ext = A @ W_ext.T satisfies an identity
(Li et al. §IV; docs/abft.md §1.1). Everything here is integer arithmetic: no tolerance, no false
positives. Functions take tensors on any device and never choose one.

Schemes:
    mod2_32: three checksum rows hold the column sums r = Σ_j W[j, :] as balanced base-255 digits
        d0 + 255·d1 + 255²·d2 (each digit in [-127, 127], so it fits int8). Then, for every row i,
            Σ_{j<n} C[i, j] ≡ C[i, n] + 255·C[i, n+1] + 255²·C[i, n+2]   (mod 2^32),
        and the left side is a cheap int32 sum that wraps. Base 255 rather than 256 (bytes): the
        digit weights are odd, so a flip of bit b of a checksum word moves the identity by odd·2^b,
        never 0 mod 2^32 (with 256, bits ≥ 24 of C[:, n+1] and ≥ 16 of C[:, n+2] were invisible).
    mod127: the paper's single row chk = (−r) mod 127, so Σ_{j≤n} C[i, j] ≡ 0 (mod 127), summed in int64.
        127 is prime and 2^b mod 127 ≠ 0, so every single-bit flip of an output word is seen; errors
        that are multiples of 127 are not.
Rows are zero-padded to a multiple of 8 (cuBLAS needs it, and it is faster on CPU); C's padding
columns must be zero, which is checked too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SCHEMES = ("mod2_32", "mod127")
DIGIT_BASE = 255
N_DIGITS = 3
DIGIT_MAX = 127  # balanced digits lie in [-127, 127]
MAX_N_MOD2_32 = DIGIT_MAX * (1 + DIGIT_BASE + DIGIT_BASE**2) // 128  # |r| <= 128·n must fit 3 digits
ROW_MULTIPLE = 8
INT32_MAX = 2**31 - 1
CUDA_MIN_M = 17  # cuBLAS int8 path in torch._int_mm requires m > 16
CUDA_PAD_M = 32  # pad skinny activations to this many rows


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


def checksum_rows(scheme: str) -> int:
    """How many checksum rows a scheme appends to the weight."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown int8 ABFT scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    return N_DIGITS if scheme == "mod2_32" else 1


def extended_rows(n: int, scheme: str) -> int:
    """n_ext: data rows plus checksum rows, rounded up to a multiple of ROW_MULTIPLE."""
    return _round_up(n + checksum_rows(scheme), ROW_MULTIPLE)


def max_exact_k(a_max: int = 255, w_min: int = -128, w_max: int = 127) -> int:
    """Largest k for which every dot product of k terms a·w (0 <= a <= a_max, w_min <= w <= w_max) fits int32.

    u8 × s8 gives 65,793 (= 2^31 // 32,640); beyond it C itself wraps and mod127 no longer holds
    (mod2_32 still does: wrapping is a ring homomorphism onto Z/2^32).
    """
    lo, hi = a_max * w_min, a_max * w_max  # extreme products, lo <= 0 <= hi
    return min(2**31 // -lo if lo else INT32_MAX, INT32_MAX // hi if hi else INT32_MAX)


def balanced_digits(r: torch.Tensor) -> torch.Tensor:
    """Write integers r (int64, any shape) as N_DIGITS balanced base-255 digits, int8, digit axis first.

    Raises:
        ValueError: some |r| is too large for N_DIGITS digits.
    """
    digits = []
    for _ in range(N_DIGITS):
        d = torch.remainder(r + DIGIT_MAX, DIGIT_BASE) - DIGIT_MAX  # in [-127, 127]
        digits.append(d.to(torch.int8))
        r = (r - d) // DIGIT_BASE  # exact division: r - d is a multiple of 255
    if bool((r != 0).any()):
        raise ValueError(f"column sums too large for 3 base-255 digits: n must be <= {MAX_N_MOD2_32}")
    return torch.stack(digits)  # (N_DIGITS, *r.shape)


def encode_weight(w: torch.Tensor, scheme: str) -> torch.Tensor:
    """Append checksum rows and zero padding to a weight.

    Args:
        w: (n, k) int8 weight; C = A @ w.T.
        scheme: "mod2_32" or "mod127".
    Returns:
        (n_ext, k) int8, contiguous: w, the checksum rows, then zero rows up to a multiple of 8.
    """
    n, k = w.shape
    r = w.sum(0, dtype=torch.int64)  # (k,) column sums; |r| <= 128·n
    if scheme == "mod2_32":
        chk = balanced_digits(r)  # (3, k)
    else:
        checksum_rows(scheme)  # validates the name
        chk = torch.remainder(-r, 127).to(torch.int8).unsqueeze(0)  # (1, k), in [0, 126]
    pad = w.new_zeros(extended_rows(n, scheme) - n - chk.shape[0], k)
    return torch.cat([w, chk, pad]).contiguous()


def verify(c_ext: torch.Tensor, n: int, scheme: str) -> RowCheck:
    """Check every row of C_ext = A @ W_ext.T against its checksum columns.

    Args:
        c_ext: (m, n_ext) int32 product with an encoded weight of n data rows.
        n: number of data rows of the weight (data columns of C).
        scheme: the scheme the weight was encoded with.
    Returns:
        RowCheck; exact, so any bad row is a wrong result, never rounding.
    """
    rows = checksum_rows(scheme)
    chk = c_ext[:, n : n + rows].to(torch.int64)  # (m, rows)
    pad_nonzero = (c_ext[:, n + rows :] != 0).any(1)  # (m,)
    if scheme == "mod2_32":
        data = c_ext[:, :n].sum(1, dtype=torch.int32).to(torch.int64) & 0xFFFFFFFF  # wraps mod 2^32
        weights = torch.tensor([1, DIGIT_BASE, DIGIT_BASE**2], dtype=torch.int64, device=c_ext.device)
        checksum = (chk * weights).sum(1) & 0xFFFFFFFF  # & on int64 is the non-negative residue
    else:
        data = torch.remainder(c_ext[:, :n].sum(1, dtype=torch.int64), 127)  # int64: 2^32 ≢ 0 (mod 127)
        checksum = torch.remainder(-chk[:, 0], 127)
    return RowCheck((data != checksum) | pad_nonzero, data, checksum, pad_nonzero)


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


def signed_operands(
    a_u8: torch.Tensor, w_ext: torch.Tensor, plan: CudaPlan
) -> tuple[torch.Tensor, torch.Tensor]:
    """u8 activations as s8 (a ^ 0x80 is the bit pattern of a − 128), both operands zero-padded to `plan`.

    Zero padding of k contributes 0 to every dot product because W's padding is zero; padded rows of A
    give extra rows of C that the caller drops.
    """
    m, k = a_u8.shape
    a_s8 = (a_u8 ^ 0x80).view(torch.int8)  # (m, k)
    a_pad = a_s8.new_zeros(plan.m_pad, plan.k_pad)
    a_pad[:m, :k] = a_s8
    w_pad = w_ext.new_zeros(plan.n_ext, plan.k_pad)
    w_pad[:, :k] = w_ext
    return a_pad, w_pad


def unsigned_correction(w_ext: torch.Tensor) -> torch.Tensor:
    """(n_ext,) int32: 128 · Σ_k W_ext[j, k], so that A_u8 @ W.T = (A_u8 − 128) @ W.T + correction."""
    return w_ext.sum(1, dtype=torch.int32) * 128


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple
