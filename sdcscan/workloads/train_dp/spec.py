"""`train_dp`'s catalogue entry and the dtypes it runs (torch-free; the torch code is workload.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sdcscan.outcomes import CONSENSUS, INVARIANT
from sdcscan.workloads.params import Choice, Int, Number
from sdcscan.workloads.workload_spec import DTYPE_BYTES, Quality, WorkloadSpec

DTYPES = ("float32", "bfloat16")


def _memory(p: Mapping[str, Any]) -> int:
    """`depth` square layers with their gradients and AdamW's two moments, and every step's float32
    inputs."""
    return int(
        4 * DTYPE_BYTES[p["dtype"]] * p["depth"] * p["width"] ** 2 + 4 * p["steps"] * p["batch"] * p["width"]
    )


SPEC = WorkloadSpec(
    name="train_dp",
    description=(
        "deterministic data-parallel MLP training with AdamW; every rank hashes its parameters and "
        "optimizer state, a wrong hash names its rank or its hop"
    ),
    evidence=(INVARIANT, CONSENSUS),
    quality=Quality.BETA,
    defaults={
        "width": 64,
        "depth": 3,
        "batch": 32,
        # 6 steps: 80-130 ms per case with 4 gloo ranks on 2 cores, most of it collective latency
        "steps": 6,
        "hash_every": 3,  # steps between exchanges of state hashes (and at the case's end)
        "lr": 1e-3,
        "dtype": "float32",
    },
    # a parameter right after the optimizer step; `--inject R:update` strikes there on rank R alone
    fault_sites=("update",),
    tiny={"width": 16, "depth": 1, "batch": 8, "steps": 4, "hash_every": 2},
    params={
        "width": Int(1),
        "depth": Int(1),
        "batch": Int(1),  # 0: the loss of an empty batch is NaN
        "steps": Int(1),
        "hash_every": Int(1),
        "lr": Number(0.0, 1.0, low_open=True),  # as train's
        "dtype": Choice(DTYPES),
    },
    distributed=True,
    memory=_memory,
)
