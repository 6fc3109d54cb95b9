"""`gemm_int8`'s catalogue entry, its paths and shape limits (torch-free; the torch code is
workload.py; the checks' own limits are sdcscan.checks.limits)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sdcscan.checks.limits import CHECK_KERNELS, CHUNK_ROWS, MAX_N_MOD2_32, SCHEMES, max_exact_k
from sdcscan.checks.limits import MAX_N_WEIGHTED as MAX_N
from sdcscan.outcomes import CONSENSUS, INVARIANT
from sdcscan.workloads.params import Choice, Int, ListOf, Number, Shape
from sdcscan.workloads.workload_spec import Coverage, PlainOp, Quality, WorkloadSpec

PATHS = ("auto", "unsigned", "signed")  # which one "auto" takes on a device: int_mm_path.py
# torch 2.13's CPU `_int_mm` with a uint8 A and k = 1 returns uninitialised memory (seen on an AMD EPYC
# with AVX-512 VNNI; k >= 2 verified exact there for m 1..33, n 8..24): a one-term dot product is no
# test of anything, so such shapes are refused rather than worked around.
MIN_K = 2
MAX_K = max_exact_k()  # beyond it a u8·s8 dot product overflows int32
# MAX_N (the checks' MAX_N_WEIGHTED): the position-weighted checksum rows must fit their digits
MAX_M = CHUNK_ROWS - 1  # one repeat's rows at least are summed together, exactly, in fp64


def _rules(p: Mapping[str, Any]) -> tuple[str, str] | None:
    for i, (m, _, n) in enumerate(p["shapes"]):
        if n > MAX_N or m > MAX_M:
            return "shapes", f"item [{i}] needs n <= {MAX_N} and m <= {MAX_M} (got m={m}, n={n})"
    if p["scheme"] == "mod2_32":
        for i, (_, _, n) in enumerate(p["shapes"]):
            if n > MAX_N_MOD2_32:
                return (
                    "shapes",
                    f"item [{i}] n must be at most {MAX_N_MOD2_32} with scheme mod2_32 (got {n})",
                )
    return None


def _memory(p: Mapping[str, Any]) -> int:
    """Every shape's int8 weights (kept for the run), the uint8 activation pool (at least the largest
    GEMM's activations) and the largest int32 product."""
    shapes = p["shapes"]
    weights = sum(n * k for _, k, n in shapes)
    activations = max(m * k for m, k, _ in shapes)
    return int(weights + activations + max(4 * m * n for m, _, n in shapes))


def _plain_ops(p: Mapping[str, Any], device: Any) -> list[PlainOp]:
    """`torch._int_mm` at each shape, with the A type the workload itself takes on `device`."""
    from sdcscan.workloads.gemm_int8.int_mm_path import takes_signed_path  # imports torch

    signed = takes_signed_path(p["path"], device)
    ops = []
    for shape in p["shapes"]:
        per_gemm = 2.0 * math.prod(shape)
        repeats = max(1, math.ceil(p["ops_per_case"] / per_gemm))
        ops.append(PlainOp("int_mm", "int8" if signed else "uint8", tuple(shape), per_gemm * repeats))
    return ops


# What a pass proves (sdcscan.proof; README "How to read pass").
COVERAGE = Coverage(
    op="multiply-add",
    per_op=0.5,  # ops count 2 per multiply-add (2·m·n·k per GEMM)
    evidence="invariant",
    detection=1.0,
    applies={"scheme": "mod2_32"},
    why="mod 2^32: every hardware fault model at the output and in the encoded weights is floored at 1.0 "
    "(exact row, column and weighted checks); mod 127 is not bounded: 7- and 8-bit bursts of its "
    "checksum word are a blind spot (198/200 measured)",
)


SPEC = WorkloadSpec(
    name="gemm_int8",
    description=(
        "u8×s8→s32 GEMMs (torch._int_mm) with exact ABFT row (mod 2^32 or 127), column and "
        "position-weighted row checksums"
    ),
    evidence=(INVARIANT, CONSENSUS),
    quality=Quality.PROD,
    defaults={
        "scheme": "mod2_32",
        # (m, k, n): DLRM MLP layers, batch rows m from 1 (inference) to 128
        "shapes": [
            [1, 3200, 800],
            [16, 512, 1024],
            [32, 2048, 1024],
            [64, 512, 512],
            [64, 1024, 1024],
            [128, 1024, 512],
        ],
        "ops_per_case": 2.0e8,  # GEMMs repeat (fresh activations) until 2mnk·repeats reaches this
        "path": "auto",
        "check_kernel": "auto",
    },
    fault_sites=("output", "encoded", "operand"),
    # 2: operands from per-worker pools (issue 10), no longer drawn whole per case; 3: one pool view
    # per repeat, outputs digested by fingerprints; 4: pools and offsets from the counter generator
    # (drawn on the unit's device), and the s8 x s8 route checks and digests its own product; 5: the
    # activations are whole tagged rows, and the product has row-tag columns (issue 44); 6: on a GPU the
    # product is padded to a multiple of 32 columns (int8.row_multiple), not 8
    data_version=6,
    tiny={"shapes": [[1, 64, 40], [20, 32, 24]], "ops_per_case": 1.0e5},
    params={
        "scheme": Choice(SCHEMES),
        "shapes": ListOf(Shape(k=Int(MIN_K, MAX_K))),
        "ops_per_case": Number(0.0, low_open=True, high=1e16),  # a GPU case: ~5e14 (an H100's second)
        "path": Choice(PATHS),
        # the block sums by torch ops or by one fused kernel (sdcscan/checks/int8_block.py): the same
        # integers; "auto" takes the kernel on a GPU (sdcscan/checks/triton_kernels.py)
        "check_kernel": Choice(CHECK_KERNELS),
    },
    rules=(_rules,),
    memory=_memory,
    coverage=COVERAGE,
    plain_ops=_plain_ops,
)
