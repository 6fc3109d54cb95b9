"""Which plain operations each workload runs, at its own shapes, and how their rates combine (no torch).

A workload's efficiency is its achieved rate divided by the rate of the plain operation behind it
(fp32/fp64/bf16/fp16 matmul, int8 `torch._int_mm`, quantized EmbeddingBag lookups, the Linear layers
of `train`), timed unchecked and without set-up (`sdcscan.peaks.rates`). Which ops a workload runs is
stated here (`plain_ops`), keyed by workload name, so the workload classes stay as they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from sdcscan.workloads import SPECS

if TYPE_CHECKING:
    import torch


class OpKey(TypedDict):
    """What identifies a plain op in the peak cache."""

    op: str  # PlainOp.kind
    dtype: str
    shape: list[int]


class PeakOp(OpKey):
    """One plain op of a workload's peak, timed (`rates.workload_peak`)."""

    ops_per_s: float
    source: str  # "cache" or "fresh"


class WorkloadPeak(TypedDict):
    """A workload's plain-op peak on a unit (`rates.workload_peak`): sent to the parent, in the journal."""

    peak_ops_per_s: float | None  # the ops' combined rate; None when any is unknown
    ops: list[PeakOp]
    error: str | None  # why the peak is unknown


@dataclass(frozen=True)
class PlainOp:
    """One plain operation a workload runs, and how much of the workload's work goes through it.

    kind: "matmul" (dtype), "int_mm" (dtype "uint8" or "int8": A's type; B is int8) or
    "embedding_bag" (dtype "int8"/"int4": the table's bit width). shape: (m, k, n) for the GEMMs;
    (rows, dim, bags, min pooling, max pooling) for EmbeddingBag. weight: the workload's ops through
    this op per cycle of its cases, to combine several ops' peaks into one (see `combined_rate`).
    """

    kind: str
    dtype: str
    shape: tuple[int, ...]
    weight: float

    def key(self) -> OpKey:
        """What identifies the op in the cache (the weight is the workload's, not the op's)."""
        return {"op": self.kind, "dtype": self.dtype, "shape": list(self.shape)}

    def label(self) -> str:
        return f"{self.kind} {self.dtype} {'x'.join(map(str, self.shape))}"


def _params(workload: str, params: Mapping[str, Any]) -> dict[str, Any]:
    return {**SPECS[workload].defaults, **params}


def _matmul_golden_ops(p: dict[str, Any]) -> list[PlainOp]:
    m, k, n = p["m"], p["k"], p["n"]
    return [
        PlainOp("matmul", dt, (m, k, n), 2.0 * m * k * n * reps)
        for dt, reps in zip(p["dtypes"], p["repeats"], strict=True)
    ]


def _gemm_fp_ops(p: dict[str, Any]) -> list[PlainOp]:
    return [
        PlainOp("matmul", dt, tuple(shape), 2.0 * math.prod(shape) * reps)
        for dt, shape, reps in zip(p["dtypes"], p["shapes"], p["repeats"], strict=True)
    ]


def _gemm_int8_ops(p: dict[str, Any], device: torch.device) -> list[PlainOp]:
    from sdcscan.workloads.gemm_int8.int_mm_path import takes_signed_path  # imports torch

    signed = takes_signed_path(p["path"], device)  # the workload's own A type
    ops = []
    for shape in p["shapes"]:
        per_gemm = 2.0 * math.prod(shape)
        repeats = max(1, math.ceil(p["ops_per_case"] / per_gemm))
        ops.append(PlainOp("int_mm", "int8" if signed else "uint8", tuple(shape), per_gemm * repeats))
    return ops


def _embbag_ops(p: dict[str, Any]) -> list[PlainOp]:
    low, high = p["pooling"]
    # Bit widths are cycled case by case with the same number of lookups: equal weights. The op is one
    # batch of `bags` bags: a case's `repeats` batches look up at that batch's rate.
    return [
        PlainOp("embedding_bag", f"int{bits}", (p["rows"], p["dim"], p["bags"], low, high), 1.0)
        for bits in p["bits"]
    ]


def _train_ops(p: dict[str, Any]) -> list[PlainOp]:
    # Each Linear layer: forward x·Wᵀ, backward dY·W and dYᵀ·x, 2·batch·in·out flops each.
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


def plain_ops(workload: str, params: Mapping[str, Any], device: torch.device) -> list[PlainOp]:
    """The plain ops `workload` runs with `params` (the profile's, defaults filled in) on `device`.

    Raises:
        KeyError: a workload this module does not describe.
    """
    p = _params(workload, params)
    if workload == "gemm_int8":
        return _gemm_int8_ops(p, device)
    return {
        "matmul_golden": _matmul_golden_ops,
        "gemm_fp": _gemm_fp_ops,
        "embbag_int8": _embbag_ops,
        "train": _train_ops,
    }[workload](p)


def combined_rate(weighted: Sequence[tuple[float, float | None]]) -> float | None:
    """The rate of a workload whose ops go through several plain ops: total ops / total plain time.

    Args:
        weighted: (weight, rate) per op; the weight is the ops through it.
    Returns:
        Σ weight / Σ (weight / rate), or None when any rate is unknown (a partial peak would flatter).
    """
    if not weighted or any(rate is None or rate <= 0 for _, rate in weighted):
        return None
    total = sum(w for w, _ in weighted)
    return total / sum(w / rate for w, rate in weighted if rate)


def case_peak(workload: str, found: WorkloadPeak, occurrence: int) -> float | None:
    """The plain rate for one case: the op of its slot (workloads cycle dtypes, shapes or bit widths
    by occurrence, in `plain_ops` order), or every op for `train`, which runs them all in each case.

    `found` is `workload_peak`'s result. A few cases do not cover every slot evenly, so a benchmark
    of few cases divides by this, not by the workload's combined peak.
    """
    ops = found.get("ops") or []
    if found.get("error") or not ops:
        return None
    if workload == "train":
        return found.get("peak_ops_per_s")
    rate = ops[occurrence % len(ops)]["ops_per_s"]
    return float(rate) if rate else None
