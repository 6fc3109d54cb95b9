"""`matmul_golden`'s catalogue entry, its dtypes and references, and the exactness limits
(torch-free; the torch code is workload.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sdcscan.checks.limits import (
    CHECK_KERNELS,
    FP8_DIMENSION_MULTIPLE,
    FP8_EXACT_INT,
    FP8_SLOTS,
    TF32_EXACT_INT,
    TF32_SLOT,
)
from sdcscan.outcomes import CONSENSUS, INVARIANT, REPEAT
from sdcscan.workloads.params import Choice, Int, ListOf, one_per_dtype
from sdcscan.workloads.workload_spec import Coverage, PlainOp, Quality, WorkloadSpec

# The fp8 slots (quick's plan for AVX-512-BF16 CPUs; no GPU plan yet) multiply fp8 operands into fp32
# (sdcscan.checks.fp8); the TF32 slot multiplies fp32 operands in TF32 (sdcscan.checks.tf32).
DTYPES = ("float32", "float64", "bfloat16", "float16", TF32_SLOT, *FP8_SLOTS)
REFERENCES = ("direct", "kronecker")
EXACT_LIMIT = 2**24  # k * max_abs^2 below it keeps every fp32 partial sum exact
# The `kronecker` pool: the larger of its two small int64 products may cost this many
# multiply-adds (about 0.1 s on one core); 8192 x 8192 x 8192 needs 128^3, about 2 million.
KRONECKER_MAX_OPS = 2**30


def golden_kronecker_split(m: int, k: int, n: int) -> tuple[tuple[int, int], ...]:
    """How the `kronecker` reference factors its shape: ((m1, m2), (k1, k2), (n1, n2)).

    Each dimension d is d1·d2 with d1 its largest divisor at most √d, so the pool's A = A1 ⊗ A2 (A1 is
    (m1, k1), A2 (m2, k2)) and B = B1 ⊗ B2 have the exact product (A1·B1) ⊗ (A2·B2), which costs
    m1·k1·n1 + m2·k2·n2 multiply-adds instead of m·k·n. Torch-free: the catalogue's rule uses it too.

    Raises:
        ValueError: the larger small product would cost more than KRONECKER_MAX_OPS (a dimension
            that is prime, or nearly so, leaves its whole length in one factor).
    """
    split = tuple(_near_root_split(d) for d in (m, k, n))
    (m1, m2), (k1, k2), (n1, n2) = split
    if max(m1 * k1 * n1, m2 * k2 * n2) > KRONECKER_MAX_OPS:
        raise ValueError(
            f"the kronecker reference needs m, k and n with divisors near their square roots; {m} x {k} x "
            f"{n} leaves a {m2} x {k2} x {n2} product, more than 2^30 multiply-adds (use sizes such as "
            "powers of two, or reference: direct)"
        )
    return split


def _near_root_split(d: int) -> tuple[int, int]:
    small = next(f for f in range(math.isqrt(d), 0, -1) if d % f == 0)
    return small, d // small


def _rules(p: Mapping[str, Any]) -> tuple[str, str] | None:
    if p["k"] * p["max_abs"] ** 2 >= EXACT_LIMIT:
        k, top = p["k"], p["max_abs"]
        return "k", f"k * max_abs^2 must be below 2^24 for exact fp32 partial sums (got {k} * {top}^2)"
    if TF32_SLOT in p["dtypes"] and p["max_abs"] > TF32_EXACT_INT:
        return "max_abs", f"TF32 holds integers up to {TF32_EXACT_INT} exactly (got max_abs {p['max_abs']})"
    if any(d in FP8_SLOTS for d in p["dtypes"]):
        if p["max_abs"] > FP8_EXACT_INT:
            return (
                "max_abs",
                f"the fp8 dtypes hold integers up to {FP8_EXACT_INT} exactly (got max_abs {p['max_abs']})",
            )
        if any(p[d] % FP8_DIMENSION_MULTIPLE for d in ("m", "k", "n")):
            return (
                "m",
                f"the fp8 dtypes need m, k and n multiples of {FP8_DIMENSION_MULTIPLE} (cuBLASLt's fp8 kernels)",
            )
    if p["reference"] == "kronecker":
        try:
            golden_kronecker_split(p["m"], p["k"], p["n"])
        except ValueError as err:
            return "reference", str(err)
    return one_per_dtype(p, ("repeats",))


def _memory(p: Mapping[str, Any]) -> int:
    """The pool operands and their exact product: int64 for `direct`, float32 for `kronecker`."""
    size = 8 if p["reference"] == "direct" else 4
    return int(size * (p["m"] * p["k"] + p["k"] * p["n"] + p["m"] * p["n"]))


def _plain_ops(p: Mapping[str, Any], device: object) -> list[PlainOp]:
    """One product per dtype slot, each at its repeats."""
    m, k, n = p["m"], p["k"], p["n"]
    return [
        PlainOp("matmul", dt, (m, k, n), 2.0 * m * k * n * reps)
        for dt, reps in zip(p["dtypes"], p["repeats"], strict=True)
    ]


# What a pass proves (sdcscan.proof; README "How to read pass").
COVERAGE = Coverage(
    op="multiply-add",
    per_op=0.5,  # flops: 2·m·n·k per product
    evidence="invariant",
    detection=1.0,
    why="every output value is compared with an exact integer golden: every fault model, every bit, 1.0",
)


SPEC = WorkloadSpec(
    name="matmul_golden",
    description=(
        "integer-valued matmuls in fp32/fp64/bf16/fp16/TF32 compared bit-exactly with an int64 reference"
    ),
    evidence=(INVARIANT, CONSENSUS, REPEAT),
    quality=Quality.PROD,
    defaults={
        "m": 256,
        "k": 1024,
        "n": 256,
        "max_abs": 8,
        "dtypes": ["float32", "float64", "bfloat16", "float16"],
        "repeats": [48, 16, 1, 1],  # per dtype, to give each case about 0.1-0.5 s of compute on one core
        # direct: random pool operands, their product by an int64 matmul on the CPU (m·k·n
        # multiply-adds: minutes at 8192^3); kronecker: Kronecker-structured ones whose exact
        # product is two small matmuls (GPU-sized shapes; golden_kronecker_split)
        "reference": "direct",
        "check_kernel": "auto",
    },
    fault_sites=("output",),
    data_version=3,  # 2: repeats digested by device-side fingerprints (issue 10); 3: permutations
    # from the counter generator, digest of the expected output and the bad elements found (issue 42)
    # dtypes with their repeats, so that tiny sizes fit a profile that lists other slots (quick adds TF32)
    tiny={"m": 16, "k": 64, "n": 16, "dtypes": list(DTYPES[:4]), "repeats": [2, 2, 1, 1]},
    params={
        "m": Int(1),
        "k": Int(1),
        "n": Int(1),
        "max_abs": Int(1),  # operands in [-max_abs, max_abs]; 0 would make them all zero
        "dtypes": ListOf(Choice(DTYPES)),  # cases cycle through them: empty divides by 0
        "repeats": ListOf(Int(1)),  # per dtype; 0 repeats compute nothing to compare
        "reference": Choice(REFERENCES),
        # the comparison by torch ops or by one fused kernel (sdcscan/checks/golden_compare.py); "auto"
        # takes the kernel on a GPU once a lent GPU has matched it (sdcscan/checks/triton_kernels.py)
        "check_kernel": Choice(CHECK_KERNELS),
    },
    rules=(_rules,),
    memory=_memory,
    coverage=COVERAGE,
    plain_ops=_plain_ops,
)
