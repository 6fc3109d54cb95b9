"""`gemm_fp`'s catalogue entry (torch-free; the torch code is workload.py, its self-test's
declarations selftest_spec.py).

Its dtypes, checkers and input distributions are the calibration table's (sdcscan.calibration.table),
and c is the V-ABFT check's (sdcscan.checks.limits): e_max is measured at that c, and a smaller c flags
clean rows."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sdcscan.calibration.table import CHECKERS as CALIBRATED_CHECKERS
from sdcscan.calibration.table import DISTRIBUTION_NAMES as INPUTS
from sdcscan.calibration.table import DTYPE_NAMES as DTYPES
from sdcscan.calibration.table import OUT_OF_RANGE
from sdcscan.checks.limits import CHECK_KERNELS, SIGMA_C
from sdcscan.outcomes import CONSENSUS, INVARIANT, REPEAT
from sdcscan.workloads.params import CalibrationPath, Choice, Int, ListOf, Number, Shape, one_per_dtype
from sdcscan.workloads.workload_spec import DTYPE_BYTES, Coverage, PlainOp, Quality, WorkloadSpec

# Checksum precisions any dtype is calibrated with (float32, float64)
CHECKERS = tuple(dict.fromkeys(c for checkers in CALIBRATED_CHECKERS.values() for c in checkers))
_DIGITS = {"bfloat16": 8, "float16": 11, "float32": 24, "float64": 53}  # significand bits


def _rules(p: Mapping[str, Any]) -> tuple[str, str] | None:
    found = one_per_dtype(p, ("shapes", "repeats", "checkers"))
    if found:
        return found
    for i, dtype in enumerate(p["dtypes"]):
        if p["inputs"] in OUT_OF_RANGE.get(
            dtype, ()
        ):  # its outputs round as subnormals: no threshold models it
            return (
                "inputs",
                f"{p['inputs']} is out of the range of dtypes item [{i}] {dtype}: leave out that dtype",
            )
    for i, (dtype, checker) in enumerate(zip(p["dtypes"], p["checkers"], strict=True)):
        if _DIGITS[checker] < _DIGITS[dtype]:  # checksums coarser than the data they check
            return "checkers", f"item [{i}] must be at least as precise as its dtype {dtype} (got {checker})"
    return None


def _memory(p: Mapping[str, Any]) -> int:
    """One dtype's pool operands and a case's product, for the largest of the dtypes."""
    return max(
        DTYPE_BYTES[dtype] * int(m * k + k * n + m * n)
        for dtype, (m, k, n) in zip(p["dtypes"], p["shapes"], strict=False)
    )


def _plain_ops(p: Mapping[str, Any], device: object) -> list[PlainOp]:
    """One GEMM per dtype slot, at its shape and repeats."""
    return [
        PlainOp("matmul", dt, tuple(shape), 2.0 * math.prod(shape) * reps)
        for dt, shape, reps in zip(p["dtypes"], p["shapes"], p["repeats"], strict=True)
    ]


# What a pass proves (sdcscan.proof; README "How to read pass").
COVERAGE = Coverage(
    op="multiply-add",
    per_op=0.5,
    evidence="invariant",
    detection=0.99,
    applies={"inputs": "abs_normal"},
    why="V-ABFT on |N|+0.5 inputs: warp runs, strides and tiles at the lowest exponent bit and stuck "
    "sign or exponent bits (every change at least a factor of 2) are floored at 0.99 in every dtype; "
    "changes within the rounding (random mantissa bits) and zero-mean inputs are reported, not floored",
)


SPEC = WorkloadSpec(
    name="gemm_fp",
    description=(
        "fp32/fp64/bf16/fp16 matmuls checked per row with V-ABFT thresholds; errors located to an element"
    ),
    evidence=(INVARIANT, CONSENSUS, REPEAT),
    quality=Quality.PROD,  # an hour of burnin on AVX-512 and on AVX2, every case ok (README)
    defaults={
        "dtypes": ["float32", "float64", "bfloat16", "float16"],
        # (m, k, n) per dtype: about 0.1-0.5 s per case on one AVX2 core (bf16/fp16 have no fast kernel there)
        "shapes": [[1024, 1024, 1024], [512, 1024, 512], [128, 1024, 256], [128, 1024, 256]],
        "repeats": [4, 4, 2, 2],
        "checkers": ["float64", "float64", "float32", "float32"],  # precision of the checksums per dtype
        "inputs": "abs_normal",  # calibration.DISTRIBUTIONS name; |N(0,1)|+0.5 (docs/abft.md §3.2)
        "c": SIGMA_C,
        "calibration": "",  # path of a calibration table; "" = the one shipped with sdcscan
        "check_kernel": "auto",
    },
    fault_sites=("output", "operand_b_encoded", "operand_a"),
    # 2: repeats digested by device-side fingerprints; 3: operands permuted from a per-worker pool;
    # 4: rows and columns permuted with their check tiles (vabft.tiled_permutation); 5: permutations
    # from the counter generator, drawn on the unit's device (issue 42)
    data_version=5,
    tiny={"shapes": [[16, 64, 16]] * 4, "repeats": [1, 1, 1, 1]},
    params={
        "dtypes": ListOf(Choice(DTYPES)),
        "shapes": ListOf(Shape()),
        "repeats": ListOf(Int(1)),  # 0 repeats compute no product to check
        "checkers": ListOf(Choice(CHECKERS)),
        "inputs": Choice(INPUTS),
        "c": Number(SIGMA_C),
        "calibration": CalibrationPath(),
        # a block's verdicts and fingerprints by torch ops or by one fused kernel
        # (sdcscan/checks/tile_verdicts.py); "auto" takes the kernel on a GPU (sdcscan/checks/triton_kernels.py)
        "check_kernel": Choice(CHECK_KERNELS),
    },
    rules=(_rules,),
    memory=_memory,
    coverage=COVERAGE,
    plain_ops=_plain_ops,
)
