"""`train`'s catalogue entry and the dtypes it runs (torch-free; the torch code is workload.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sdcscan.outcomes import CONSENSUS, INVARIANT, REPEAT
from sdcscan.workloads.params import Choice, Int, Number
from sdcscan.workloads.workload_spec import DTYPE_BYTES, Quality, WorkloadSpec

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
)
