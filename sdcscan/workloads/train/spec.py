"""`train`'s catalogue entry and the dtypes it runs (torch-free; the torch code is workload.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sdcscan.outcomes import CONSENSUS, INVARIANT, REPEAT
from sdcscan.workloads.params import Choice, Int, Number
from sdcscan.workloads.workload_spec import DTYPE_BYTES, Coverage, PlainOp, Quality, WorkloadSpec

DTYPES = ("float32", "float64", "bfloat16")  # weights, data and AdamW's state
# "bfloat16"/"float16": forward and loss under torch.autocast, so matmuls run on the matrix units at that
# precision while weights and AdamW's state stay float32
AUTOCAST = ("none", "bfloat16", "float16")


def _rules(p: Mapping[str, Any]) -> tuple[str, str] | None:
    if p["autocast"] != "none" and p["dtype"] != "float32":  # Train refuses it too
        return "autocast", (
            f"needs dtype float32 (got {p['dtype']}): autocast lowers float32 matmuls to "
            f"{p['autocast']}; it never lowers float64, and bfloat16 weights are low precision already"
        )
    return None


def _memory(p: Mapping[str, Any]) -> int:
    """Three Linear layers with their gradients and AdamW's two moments, and every step's inputs
    (drawn in float32 at the case's start)."""
    weights = p["inputs"] * p["hidden"] + p["hidden"] ** 2 + p["hidden"] * p["classes"]
    size = 4 if p["autocast"] != "none" else DTYPE_BYTES[p["dtype"]]
    return int(4 * size * weights + 4 * p["steps"] * p["batch"] * p["inputs"])


def _plain_ops(p: Mapping[str, Any], device: object) -> list[PlainOp]:
    """Each Linear layer: forward x·Wᵀ, backward dY·W and dYᵀ·x, 2·batch·in·out flops each."""
    b, dt = p["batch"], p["dtype"]
    layers = [(p["inputs"], p["hidden"]), (p["hidden"], p["hidden"]), (p["hidden"], p["classes"])]
    ops = []
    for fan_in, fan_out in layers:
        flops = 2.0 * b * fan_in * fan_out
        ops += [
            PlainOp("matmul", dt, (b, fan_in, fan_out), flops),
            PlainOp("matmul", dt, (b, fan_out, fan_in), flops),
            PlainOp("matmul", dt, (fan_in, b, fan_out), flops),
        ]
    return ops


# What a pass proves (sdcscan.proof; README "How to read pass").
COVERAGE = Coverage(
    op="multiply-add",
    per_op=0.5,  # 6 flops per weight and sample: 3 multiply-adds
    evidence="digest",
    detection=None,
    why="its digest proves nothing until compared with peers or a golden, and no self-test measures "
    "which corruptions of a training step reach it",
)


SPEC = WorkloadSpec(
    name="train",
    description=(
        "deterministic tiny MLP training with AdamW; digest of every step's loss, final weights and "
        "optimizer state"
    ),
    evidence=(INVARIANT, CONSENSUS, REPEAT),
    quality=Quality.PROD,
    defaults={
        "inputs": 64,
        "hidden": 128,
        "classes": 10,
        "batch": 64,
        "steps": 60,
        "lr": 1e-3,
        "dtype": "float32",
        # "bfloat16"/"float16": forward and loss under torch.autocast, so matmuls run on the matrix
        # units at that precision while weights and AdamW's state stay float32
        "autocast": "none",
    },
    fault_sites=("weight",),  # hidden-layer weight, half way through the case
    data_version=3,  # 2: on a GPU drawn on the device; 3: digested by device-side fingerprints
    tiny={"hidden": 16, "batch": 8, "steps": 6},
    params={
        "inputs": Int(1),  # 0: a Linear without inputs (its init divides by inputs)
        "hidden": Int(1),
        "classes": Int(2),  # 1: the loss is 0 and every gradient too, so backward checks nothing
        "batch": Int(1),  # 0: the loss of an empty batch is NaN, reported as a miscompute
        "steps": Int(1),
        # AdamW moves each weight by about lr per step; lr 1000 made the loss NaN (measured), and
        # a NaN loss is reported as a miscompute. lr <= 1 stayed finite for 3000 steps in every dtype.
        "lr": Number(0.0, 1.0, low_open=True),
        "dtype": Choice(DTYPES),
        "autocast": Choice(AUTOCAST),
    },
    rules=(_rules,),
    memory=_memory,
    coverage=COVERAGE,
    plain_ops=_plain_ops,
)
