"""Self-test declarations of `matmul_golden`: variants, the faults swept at its output, and their floors.

The golden is exact, so it needs no tolerance and no calibration: every output element whose value
differs from the integer reference is a mismatch. The self-test shows that this holds for every bit of
a word and for the fault models of how hardware fails (sdcscan/faults/hardware.py), whatever their layout.
Torch-free, like spec.py beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

# Bits of the output word compared: TF32 and fp8 slots' products come out in fp32.
_BITS = {
    "float32": 32, "float64": 64, "bfloat16": 16, "float16": 16, "tfloat32": 32, "float8_e4m3fn": 32,
    "float8_e5m2": 32,
}  # fmt: skip
# 64 x 256 x 64: room for warp-aligned runs and strides of 32 and 16 x 16 tiles; k·max_abs² = 16,384 keeps
# the products exact (< 2^24) with the default max_abs of 8.
_SHAPE = {"m": 64, "k": 256, "n": 64, "repeats": [1], "reference": "direct"}
# The fp8 slots' CPU speed depends on the class: about 0.14 GFLOP/s on a 2-vCPU AMX Xeon (a reference
# kernel), 34 GFLOP/s at 256 x 1024 x 256 on one thread of a 2-vCPU AVX-512-BF16 EPYC (torch 2.13.0):
# a smaller product, still with room for a warp's run and a 16 x 16 tile, every dimension a multiple of 16.
_FP8_SHAPE = {**_SHAPE, "m": 32, "k": 64, "n": 32}
HARDWARE_MODELS = (
    "burst:2", "burst:4", "burst:8", "run32", "stride32", "tile8", "tile16", "stuck0", "stuck1", "wrong_rows",
)  # fmt: skip


class SelftestMixin:
    """`selftest_variants`, `selftest_bits`, `selftest_floor` and `blind_spots` of the SelftestWorkload
    protocol for matmul_golden."""

    blind_spots: ClassVar[tuple[str, ...]] = (
        "a change that leaves every value equal (+0.0 and -0.0): outputs are compared by value with an exact "
        "golden, so any other change of any bit, anywhere, fails",
        "coverage rather than detection: operands are small integers, so every product and partial sum is "
        "an exact integer; a fault that shows only on fractional mantissas, large exponents, subnormals or "
        "non-finite inputs is never exercised (gemm_fp covers those)",
    )
    selftest_variants: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        dtype: {**(_FP8_SHAPE if dtype.startswith("float8") else _SHAPE), "dtypes": [dtype]}
        for dtype in _BITS
    }

    @classmethod
    def selftest_floor(cls, variant: str, site: str, bit: int | str) -> float | None:
        """1.0 for everything at the output: a value that differs from the exact golden is a mismatch."""
        return 1.0 if site == "output" else None

    @classmethod
    def selftest_bits(cls, variant: str, site: str) -> Sequence[int | str]:
        """Every bit of an output word, then the fault models of how hardware fails (random bits)."""
        return [*range(_BITS[variant]), *HARDWARE_MODELS] if site == "output" else []
