"""Which plain operations each workload runs, at its own shapes, and how their rates combine (no torch).

A workload's efficiency is its achieved rate divided by the rate of the plain operation behind it
(fp32/fp64/bf16/fp16 matmul, int8 `torch._int_mm`, quantized EmbeddingBag lookups, the Linear layers
of `train`), timed unchecked and without set-up (`sdcscan.peaks.rates`). Which ops a workload runs is
stated by the workload itself (`WorkloadSpec.plain_ops` in its spec.py); `plain_ops` here fills in
its defaults and asks it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from sdcscan.workloads import SPECS
from sdcscan.workloads.workload_spec import OpKey, PlainOp

if TYPE_CHECKING:
    import torch


class PeakOp(OpKey):
    """One plain op of a workload's peak, timed (`rates.workload_peak`)."""

    ops_per_s: float
    source: str  # "cache" or "fresh"


class WorkloadPeak(TypedDict):
    """A workload's plain-op peak on a unit (`rates.workload_peak`): sent to the parent, in the journal."""

    peak_ops_per_s: float | None  # the ops' combined rate; None when any is unknown
    ops: list[PeakOp]
    error: str | None  # why the peak is unknown


def plain_ops(workload: str, params: Mapping[str, Any], device: torch.device) -> list[PlainOp]:
    """The plain ops `workload` runs with `params` (the profile's, defaults filled in) on `device`.

    Raises:
        KeyError: a workload that states no plain ops (a distributed one), or no such workload.
    """
    spec = SPECS[workload]
    if spec.plain_ops is None:
        raise KeyError(f"{workload} states no plain ops")
    return spec.plain_ops({**spec.defaults, **params}, device)


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
