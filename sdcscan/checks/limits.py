"""What the checks accept, as plain numbers and names (no torch).

The workload catalogue validates parameters against these in the parent process, which never imports
torch; the checks themselves (`int8`, `vabft`, `embbag.packing`) import them from here, so each is
defined once.
"""

from __future__ import annotations

import math

# --- int8 (sdcscan.checks.int8: its docstring explains the digits) ---------------------------------

SCHEMES = ("mod2_32", "mod127")
DIGIT_BASE = 255
N_DIGITS = 3
DIGIT_MAX = 127  # balanced digits lie in [-127, 127]
MAX_N_MOD2_32 = DIGIT_MAX * (1 + DIGIT_BASE + DIGIT_BASE**2) // 128  # |r| <= 128·n must fit 3 digits
# Weighted checksum digits: at most 5, so that the int64 sum Σ_t 255^t·C[i, t] of int32 words stays below
# 2^31·Σ_{t<5} 255^t < 2^63 and is exact, whatever the words hold.
MAX_WEIGHTED_DIGITS = 5
INT32_MAX = 2**31 - 1
FP64_EXACT = 2**53  # every integer of smaller magnitude is a double, so such sums never round
WORD = 2**31  # |an int32 word| <= WORD
CHUNK_ROWS = FP64_EXACT // WORD  # 2^22: fewer int32 words than this sum exactly in fp64


def digits_needed(magnitude: int) -> int:
    """Fewest balanced base-255 digits that hold every integer of |value| <= magnitude (at least 1)."""
    count, largest = 1, DIGIT_MAX
    while largest < magnitude:
        count, largest = count + 1, largest * DIGIT_BASE + DIGIT_MAX
    return count


def weighted_magnitude(n: int) -> int:
    """Largest |u| of the weighted column sums u = Σ_j (j + 1)·W[j, :] of an int8 weight with n rows."""
    return 128 * n * (n + 1) // 2


def _max_weighted_n() -> int:
    n = 1
    while digits_needed(weighted_magnitude(2 * n)) <= MAX_WEIGHTED_DIGITS:
        n *= 2
    while digits_needed(weighted_magnitude(n + 1)) <= MAX_WEIGHTED_DIGITS:
        n += 1
    return n


MAX_N_WEIGHTED = _max_weighted_n()  # 91,778: past it the weighted checksum needs a sixth digit


def max_exact_k(a_max: int = 255, w_min: int = -128, w_max: int = 127) -> int:
    """Largest k for which every dot product of k terms a·w (0 <= a <= a_max, w_min <= w <= w_max) fits int32.

    u8 × s8 gives 65,793 (= 2^31 // 32,640); beyond it C itself wraps and mod127 no longer holds
    (mod2_32 still does: wrapping is a ring homomorphism onto Z/2^32).
    """
    lo, hi = a_max * w_min, a_max * w_max  # extreme products, lo <= 0 <= hi
    return min(2**31 // -lo if lo else INT32_MAX, INT32_MAX // hi if hi else INT32_MAX)


# --- embbag (sdcscan.checks.embbag.packing) --------------------------------------------------------

BITS = (8, 4)  # 8-bit rows (fp32 scale, bias) and 4-bit rows (fp16 scale, bias)

# --- V-ABFT (sdcscan.checks.vabft) ----------------------------------------------------------------

SIGMA_C = 2.5  # c in the threshold: how many (bounded) standard deviations of rounding error to allow
TILE = 8  # outputs per checksum: columns per row tile, rows per column tile (where the size divides)


def tile_width(n: int) -> int:
    """Outputs per tile of a line of `n`: TILE where it divides n, else the whole line (one tile)."""
    return TILE if n % TILE == 0 else n


# --- V-ABFT's arithmetic (sdcscan.checks.vabft; docs/abft.md §3.3) -------------------------------------

# Unit roundoff u = 2^-p of each float format gemm_fp computes or checks in (IEEE 754; bfloat16 keeps
# 8 significand bits): half the distance from 1 to the next float.
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}


def e_max_ceiling(*, k: int, width: int, u_acc: float, u_chk: float, u_out: float) -> float:
    """The largest coefficient (e_max, e_mean) any correct device may be given, from the arithmetic alone
    (docs/abft.md §3.3)::

        (γ_{K+2}(u_acc) + γ_{n+K+2}(u_chk) + u_out + γ_{n}(u_chk))·n,   n = tile_width(width)

    The sum is the coefficient of `rigorous_threshold`, which bounds a tile's |D| for any summation
    order by that coefficient times Σ_k|A_ik|·Σ_{j in t}|B_kj| (plus Σ|C| for the outputs' rounding).
    For operands of one sign the threshold's mean term is that magnitude. For zero-mean ones its
    second-moment term is the outputs' typical size, and n outputs of similar size add up to sqrt(n)
    times their root sum of squares: a measurement should need at most the coefficient times sqrt(n).
    The ceiling allows another sqrt(n) (2.8 for tiles of 8) for the margin and for outputs of unequal
    size. A coefficient above it accepts more than rounding produces: the measurement saw errors.

    Args:
        width: the longer of M and N, whose tiles set n.
    """
    n = tile_width(width)
    return (gamma(k + 2, u_acc) + gamma(n + k + 2, u_chk) + u_out + gamma(n, u_chk)) * n


def gamma(n: int, u: float) -> float:
    """γ_n = n·u / (1 − n·u), Higham's bound for n roundings (inf when n·u ≥ 1)."""
    return n * u / (1.0 - n * u) if n * u < 1.0 else math.inf


# --- fp8 (sdcscan.checks.fp8) ----------------------------------------------------------------------

FP8_SLOTS = ("float8_e4m3fn", "float8_e5m2")  # matmul_golden dtypes: A and B in fp8, the output in fp32
FP8_EXACT_INT = 8  # every integer |x| <= 8 is exact in e5m2 (two mantissa bits), and in e4m3
FP8_DIMENSION_MULTIPLE = 16  # cuBLASLt's fp8 kernels want m, k and n multiples of 16

# --- TF32 (sdcscan.checks.tf32) ----------------------------------------------------------------------

TF32_SLOT = "tfloat32"  # matmul_golden dtype: fp32 operands and output, the product taken in TF32
TF32_EXACT_INT = 2**11  # TF32 keeps 10 of fp32's 23 mantissa bits: every integer |x| <= 2^11 is exact

# How a workload's check takes its sums (its `check_kernel`): torch ops, or one fused Triton kernel
# (sdcscan/checks/triton_kernels.py) that gives the same bits in one read of the outputs; "auto" takes
# the kernel on a GPU where Triton compiles it, the torch ops elsewhere.
CHECK_KERNELS = ("auto", "torch", "fused")
