"""`embbag_int8`'s catalogue entry, its modes and limits (torch-free; the torch code is workload.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sdcscan.checks.limits import CHECK_KERNELS
from sdcscan.outcomes import CONSENSUS, INVARIANT
from sdcscan.workloads.params import Choice, Flag, Int, ListOf
from sdcscan.workloads.workload_spec import Coverage, PlainOp, Quality, WorkloadSpec

MODES = ("exact", "realistic")
MAX_POOLING = (2**16 - 1) // 3  # 21,845: pooling[1] * 3 < 2^16
FOUR_BIT_DIM_MULTIPLE = 8  # torch's CUDA 4-bit kernel needs D % 8 == 0 (CPU: D even)


def _rules(p: Mapping[str, Any]) -> tuple[str, str] | None:
    low, high = p["pooling"]
    if high < 1 or low > high:
        return (
            "pooling",
            f"must be [min, max] lookups per bag with min <= max and max >= 1 (got [{low}, {high}])",
        )
    if 4 in p["bits"] and p["dim"] % FOUR_BIT_DIM_MULTIPLE:
        return "dim", f"must be a multiple of {FOUR_BIT_DIM_MULTIPLE} with 4-bit tables (got {p['dim']})"
    return None


def _memory(p: Mapping[str, Any]) -> int:
    """The int32 id pool of one batch and its float32 output (the table's rows fit themselves to
    memory in `prepare`, so `rows` is not counted)."""
    return int(4 * p["bags"] * p["pooling"][1] + 4 * p["bags"] * p["dim"])


def _plain_ops(p: Mapping[str, Any], device: object) -> list[PlainOp]:
    """One batch of `bags` bags per bit width: widths are cycled case by case with the same number of
    lookups (equal weights), and a case's `repeats` batches look up at that batch's rate."""
    low, high = p["pooling"]
    return [
        PlainOp("embedding_bag", f"int{bits}", (p["rows"], p["dim"], p["bags"], low, high), 1.0)
        for bits in p["bits"]
    ]


# What a pass proves (sdcscan.proof; README "How to read pass").
COVERAGE = Coverage(
    op="pooled element",
    per_op=1.0,
    times="dim",  # a lookup pools one row of `dim` elements
    evidence="invariant",
    detection=0.99,
    why="the lower of its modes' floors: exact mode holds 1.0 for bursts, wrong rows and stuck signs, "
    "realistic mode 0.99 for wrong rows and layout models at an exponent bit; several elements of one "
    "bag that cancel on the 2^-7 grid are exact mode's blind spot",
)


SPEC = WorkloadSpec(
    name="embbag_int8",
    description=(
        "8- and 4-bit rowwise-quantized EmbeddingBag (FBGEMM) with per-bag checksums of the intended rows"
    ),
    evidence=(INVARIANT, CONSENSUS),
    quality=Quality.PROD,
    defaults={
        "mode": "exact",
        "rows": 1_000_000,  # scaled down when memory is short (see EmbbagInt8.prepare)
        "dim": 64,  # a multiple of 4: the CUDA kernel needs it
        "bags": 32768,
        # batches of `bags` bags per case, each at its own offset in the id pool: more lookups per
        # case without a larger pool (the pool holds one batch's ids)
        "repeats": 1,
        "pooling": [20, 100],  # lookups per bag, min and max
        "weighted": False,  # per-sample weights (small integers in exact mode)
        "bits": [8, 4],  # table bit width per case, cycled by case occurrence
        "check_kernel": "auto",
    },
    # table: the quantized bytes of one row the case pools, restored after the case (the table is
    # shared by all cases). fetch: the hashed row ids the op reads, while the check uses the intended
    # ones (a wrong-row fetch). indices: raw sparse ids before `% rows`; both the lookup and the
    # checksum use the hashed id, so the check cannot see it (a negative control for the selftest).
    # Every site strikes batch 0 of a case (with `repeats` > 1).
    fault_sites=("output", "table", "fetch", "indices"),
    data_version=3,  # 2: row ids and weights from per-worker pools, outputs digested by fingerprints;
    # 3: bag lengths from a per-worker pool and offsets from the counter generator (issue 42)
    tiny={"rows": 2048, "dim": 16, "bags": 16, "pooling": [1, 8]},
    params={
        "mode": Choice(MODES),
        "rows": Int(1),
        "dim": Int(4, multiple_of=4),
        "bags": Int(1),
        "repeats": Int(1),
        "pooling": ListOf(Int(0, MAX_POOLING), length=2),  # max 0: every bag empty
        "weighted": Flag(),
        "bits": ListOf(Int(4, 8, multiple_of=4)),  # 8 or 4; cases cycle through them
        # exact mode's check by torch ops or by one fused kernel (sdcscan/checks/embbag/exact_fused.py):
        # the same flags; "auto" takes the kernel on a GPU (sdcscan/checks/triton_kernels.py)
        "check_kernel": Choice(CHECK_KERNELS),
    },
    rules=(_rules,),
    memory=_memory,
    coverage=COVERAGE,
    plain_ops=_plain_ops,
)
