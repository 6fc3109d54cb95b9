"""Self-test declarations of `gemm_fp`: variants, the bits swept per fault site, and detection floors.

Kept apart from the workload so the workload module stays about the check; `sdcscan selftest` reads these
(the `SelftestWorkload` protocol in sdcscan/workloads/base.py; the sweep in sdcscan/selftest/sweep.py).
Torch-free, like spec.py beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

# Coordinated changes a row check alone cannot see (sdcscan.faults.MATRIX_KINDS), and one relative error
# per decade: what the row and column checks catch together, and from what size on.
MATRIX_MODELS = (
    "swap_in_row", "swap_columns", "pair_in_row", "row_offset:0.01", "column_offset:0.01",
    "relerr:0.1", "relerr:0.01", "relerr:0.001", "relerr:0.0001",
)  # fmt: skip
# (bits per element, lowest exponent bit) per dtype; the sign is the top bit
_LAYOUT = {"float32": (32, 23), "float64": (64, 52), "bfloat16": (16, 7), "float16": (16, 10)}
# Fault models of how hardware fails (sdcscan/faults/hardware.py): the XOR layout models at the lowest
# exponent bit (every element they strike doubles or halves: the smallest change an exponent bit makes);
# the sign stuck at 1 and the exponent's top bit stuck at 0, the stuck bits that change every element of
# the paper's inputs (non-negative, |C| ≥ 2: the outputs of a case share their sign, exponent and
# leading mantissa bits, so most other stuck bits change none of them or all alike); each also at a
# random bit; bursts of 2, 4 and 8 bits at a random place in one word; rows copied from other rows.
_XOR_MODELS = ("run32", "stride32", "tile8", "tile16")
_STUCK_MODELS = ("stuck0", "stuck1")
_OTHER_HARDWARE = ("burst:2", "burst:4", "burst:8", "wrong_rows")
# Floor of those at a fixed bit, on the non-negative inputs of the V-ABFT paper: every element an XOR
# model strikes moves by at least half its value, every element those stuck bits change by all of it, in
# one direction; so a row or column sum it touches moves by far more than its threshold, unless (XOR
# only) doubled and halved elements cancel to within rounding. At a random bit, in a burst
# (mantissa bits below the rounding escape, as one flip's do) and for copied rows (in bf16 two rows' sums
# can agree within its threshold) detection is reported only.
_HARDWARE_FLOOR = 0.99


def _floored_models(dtype: str) -> list[str]:
    nbits, exp0 = _LAYOUT[dtype]
    return [*(f"{kind}:{exp0}" for kind in _XOR_MODELS), f"stuck0:{nbits - 2}", f"stuck1:{nbits - 1}"]


def _hardware_models(dtype: str) -> list[str]:
    return [*_floored_models(dtype), *_XOR_MODELS, *_STUCK_MODELS, *_OTHER_HARDWARE]


def _variant(dtype: str, shape: list[int], inputs: str = "abs_normal") -> dict[str, Any]:
    return {
        "dtypes": [dtype],
        "shapes": [shape],
        "repeats": [1],
        "checkers": ["float64" if dtype == "float64" else "float32"],
        "inputs": inputs,
    }


# Floors of the matrix fault models per dtype, measured with `sdcscan selftest -w gemm_fp` (100 trials)
# and justified by the size of the change against the checks' rounding noise; None: report only.
# pair_in_row and the offsets move a row or column sum by ≥ 1% of its largest element times its length:
# far above rounding in every dtype. A swap moves two column sums by the difference of two elements and
# a relative error ε moves one row and one column by ε·|C_ij|: detectable only where that exceeds the
# output rounding of a whole row or column, which in bf16 (8 significant bits) it never does for one
# element within 10% (docs/abft.md §3.4, "blind spots").
_SURE = {"pair_in_row": 0.99, "row_offset:0.01": 0.99, "column_offset:0.01": 0.99, "relerr:0.1": 0.99}
_MODEL_FLOORS: dict[str, dict[str, float]] = {
    "float64": {**_SURE, "swap_in_row": 0.99, "swap_columns": 0.9, "relerr:0.01": 0.99, "relerr:0.001": 0.99,
                "relerr:0.0001": 0.99},
    # relerr:0.001 moves an output of the paper's inputs (about K·1.3²) by ~3x its row's threshold at the
    # self-calibrated e_max (docs/abft.md §3.2: 100% since issue 32; 12-16% before)
    "float32": {**_SURE, "swap_in_row": 0.9, "swap_columns": 0.9, "relerr:0.01": 0.99, "relerr:0.001": 0.99},
    "bfloat16": {k: v for k, v in _SURE.items() if k != "relerr:0.1"} | {"swap_columns": 0.9},
    "float16": {**_SURE, "swap_columns": 0.9},
}  # fmt: skip


class SelftestMixin:
    """`selftest_variants`, `selftest_bits` and `selftest_floor` of the SelftestWorkload protocol for gemm_fp."""

    blind_spots: ClassVar[tuple[str, ...]] = (
        "a change smaller than the output rounding of its row and column: one element's relative error "
        "below ~1e-3 (fp32), ~1e-1 (fp16), and in bf16 a 10% error or a swap of two similar elements",
        "bf16 on zero-mean data: a flip that sends an element below ~4x its row's rounding noise; even a "
        "threshold that knew that noise exactly catches only about 94% of exponent bits 10-14 at "
        "(128,1024,256) (tests/test_float_blind_spots.py); heavier tails and spread scales catch less: "
        "Student-t(3) 11% at bit 14, rows over three decades 16-18% at bits 10-13",
        "four changes forming a rectangle (+d, -d in two rows and two columns); A corrupted before the GEMM "
        "(the negative control)",
    )  # docs/abft.md §3.4a
    selftest_variants: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "float32": _variant("float32", [256, 1024, 256]),
        "float64": _variant("float64", [128, 512, 128]),
        "bfloat16": _variant("bfloat16", [128, 1024, 256]),  # the shape of the V-ABFT paper's Table 8
        # Zero-mean inputs: the clean rows must stay silent (0 FP is required); detection is reported only,
        # since a flip that shrinks an element already below its row's rounding noise cannot be seen.
        "bfloat16_zero_mean": _variant("bfloat16", [128, 1024, 256], inputs="normal"),
        "float16": _variant("float16", [128, 256, 128]),
    }

    @classmethod
    def selftest_bits(cls, variant: str, site: str) -> list[int | str]:
        """Every bit of C; sign and exponent bits of the encoded B; for the negative control on A, bits
        that keep A finite (flipping the exponent MSB of |x| < 2 overflows to inf, which is not a
        consistent error and the NaN-safe check rightly reports it)."""
        nbits, exp0 = _LAYOUT[_dtype(variant)]
        if site == "output":
            return [
                *range(nbits),
                *MATRIX_MODELS,
                f"double_flip:{nbits - 2}",
                *_hardware_models(_dtype(variant)),
            ]
        if _dtype(variant) in ("bfloat16", "float16"):  # ~70 ms a GEMM here: sample a random bit
            return ["any"] if site == "operand_b_encoded" else [exp0, nbits - 1]
        if site == "operand_b_encoded":
            return list(range(exp0, nbits))
        return [0, exp0 - 1, exp0, nbits - 3, nbits - 1]

    @classmethod
    def selftest_floor(cls, variant: str, site: str, bit: int | str) -> float | None:
        """Minimum detection fraction (None: report only): V-ABFT's published bf16 rates and the fp32 rates
        measured with a same-precision checker (docs/abft.md §3.4)."""
        dtype, exp0 = _dtype(variant), _LAYOUT[_dtype(variant)][1]
        if variant != dtype:
            return None  # zero-mean inputs: report only (see selftest_variants)
        if isinstance(bit, str) and bit != "any":
            if bit.startswith("double_flip"):
                return 0.96  # two exponent-MSB flips: as a single exponent flip
            if bit in _hardware_models(dtype):
                return _HARDWARE_FLOOR if bit in _floored_models(dtype) else None
            return _MODEL_FLOORS[dtype].get(bit)
        if not isinstance(bit, int) or site not in ("output", "operand_b_encoded") or bit < exp0:
            return None  # mantissa bits: detection depends on the value, so it is reported, not required
        if site == "output" and dtype == "bfloat16" and bit in (10, 11, 12, 13, 14):
            # V-ABFT (Gao, Hua, Chen) §6.5, Table 8, bf16 (128, 1024, 256): > 99% at bit 10, 100% at bits 11-14
            return 0.99 if bit == 10 else 1.0
        # sign and exponent bits: measured 96-100% for fp32 with a same-precision checker (docs/abft.md §3.4)
        return 0.96


def _dtype(variant: str) -> str:
    """The GEMM dtype of a variant ("bfloat16_zero_mean" → "bfloat16")."""
    return variant.removesuffix("_zero_mean")
