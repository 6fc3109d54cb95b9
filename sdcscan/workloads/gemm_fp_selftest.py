"""Self-test declarations of `gemm_fp`: variants, the bits swept per fault site, and detection floors.

Kept apart from the workload so the workload module stays about the check; `sdcscan selftest` reads these
(the `SelftestWorkload` protocol in sdcscan/workloads/base.py; the sweep in sdcscan/workloads/selftest.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

# (bits per element, lowest exponent bit) per dtype; the sign is the top bit
_LAYOUT = {"float32": (32, 23), "float64": (64, 52), "bfloat16": (16, 7), "float16": (16, 10)}


def _variant(dtype: str, shape: list[int]) -> dict[str, Any]:
    return {
        "dtypes": [dtype],
        "shapes": [shape],
        "repeats": [1],
        "checkers": ["float64" if dtype == "float64" else "float32"],
    }


class SelftestMixin:
    """`selftest_variants`, `selftest_bits` and `selftest_floor` of the SelftestWorkload protocol for gemm_fp."""

    selftest_variants: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "float32": _variant("float32", [256, 1024, 256]),
        "float64": _variant("float64", [128, 512, 128]),
        "bfloat16": _variant("bfloat16", [128, 1024, 256]),  # the shape of the V-ABFT paper's Table 8
        "float16": _variant("float16", [128, 256, 128]),
    }

    @classmethod
    def selftest_bits(cls, variant: str, site: str) -> list[int | str]:
        """Every bit of C; sign and exponent bits of the encoded B; for the negative control on A, bits
        that keep A finite (flipping the exponent MSB of |x| < 2 overflows to inf, which is not a
        consistent error and the NaN-safe check rightly reports it)."""
        nbits, exp0 = _LAYOUT[variant]
        if site == "output":
            return list(range(nbits))
        if variant in ("bfloat16", "float16"):  # a GEMM per trial costs ~70 ms here: sample a random bit
            return ["any"] if site == "operand_b_encoded" else [exp0, nbits - 1]
        if site == "operand_b_encoded":
            return list(range(exp0, nbits))
        return [0, exp0 - 1, exp0, nbits - 3, nbits - 1]

    @classmethod
    def selftest_floor(cls, variant: str, site: str, bit: int | str) -> float | None:
        """Minimum detection fraction (None: report only): V-ABFT's published bf16 rates and the fp32 rates
        measured with a same-precision checker (docs/abft.md §3.4)."""
        exp0 = _LAYOUT[variant][1]
        if not isinstance(bit, int) or site not in ("output", "operand_b_encoded") or bit < exp0:
            return None  # mantissa bits: detection depends on the value, so it is reported, not required
        if site == "output" and variant == "bfloat16" and bit in (10, 11, 12, 13, 14):
            # V-ABFT (Gao, Hua, Chen) §6.5, Table 8, bf16 (128, 1024, 256): > 99% at bit 10, 100% at bits 11-14
            return 0.99 if bit == 10 else 1.0
        # sign and exponent bits: measured 96-100% for fp32 with a same-precision checker (docs/abft.md §3.4)
        return 0.96
