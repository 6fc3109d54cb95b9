"""Fleet statistics that need no digests: slow units (robust z-score).

Thresholds come from the fleet itself (median and MAD of peers), not from per-model constants:
DCGM's fixed thresholds missed a GPU running three times slower (DCGM #122). Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Any

from sdcscan.fleet.findings import Collector
from sdcscan.fleet.model import HostReport

MAD_TO_SIGMA = 0.6745  # robust z = 0.6745 (x - median) / MAD (Iglewicz and Hoaglin)

Sample = tuple[float, HostReport, str, str]  # (ops_per_s, report, unit id, ops unit)


def robust_z(x: float, med: float, mad: float) -> float:
    """Robust z-score of `x`; -inf/+inf when the MAD is 0 and `x` is off the median."""
    if mad > 0:
        return MAD_TO_SIGMA * (x - med) / mad
    if x == med:
        return 0.0
    return -math.inf if x < med else math.inf


def slow_findings(
    reports: list[HostReport], col: Collector, *, z: float, drop: float, min_units: int
) -> None:
    """Add `slow` findings: per (profile, cohort, workload), units far below their peers' median.

    A unit is slow on a workload when its robust z-score is below `-z` AND its throughput is at least
    `drop` (a fraction) below the median: the z-score alone would flag tiny, irrelevant differences
    in a very uniform fleet. Profiles are kept apart because they may size a workload differently.

    Args:
        reports: de-duplicated reports.
        col: where findings go.
        z: robust z-score threshold (positive).
        drop: fraction below the median, e.g. 0.10.
        min_units: fewest samples needed to judge a (profile, cohort, workload).
    """
    slow: dict[tuple[int, str], list[dict[str, Any]]] = {}
    owner: dict[int, HostReport] = {}
    for (_, cohort, workload), group in sorted(_samples(reports).items(), key=lambda kv: kv[0]):
        if len(group) < min_units:
            continue
        for r, unit, ev in _slow_in_group(group, z=z, drop=drop):
            owner[id(r)] = r
            slow.setdefault((id(r), unit), []).append({"cohort": cohort, "workload": workload, **ev})
    for (rid, unit), hits in slow.items():
        worst = max(hits, key=lambda h: (h["drop"] or 0.0, h["workload"]))
        ev = {**worst, "workloads": sorted(h["workload"] for h in hits)}
        col.add(owner[rid], unit, "slow", ev, tiebreak=worst["drop"] or 0.0)


def _samples(reports: list[HostReport]) -> dict[tuple[str, str, str], list[Sample]]:
    """Throughput samples by (profile sha256, cohort, workload)."""
    samples: dict[tuple[str, str, str], list[Sample]] = {}
    for r in reports:
        for u in r.units:
            for workload, ops, ops_unit in u.throughput:
                if math.isfinite(ops):
                    samples.setdefault((r.plan[0], u.cohort, workload), []).append((ops, r, u.unit, ops_unit))
    return samples


def _slow_in_group(
    group: list[Sample], *, z: float, drop: float
) -> list[tuple[HostReport, str, dict[str, Any]]]:
    """(report, unit, evidence) of the samples of one group that are slow against its median and MAD."""
    values = [s[0] for s in group]
    med = median(values)
    mad = median([abs(v - med) for v in values])
    out = []
    for ops, r, unit, ops_unit in group:
        score = robust_z(ops, med, mad)
        if score < -z and ops <= med * (1.0 - drop):
            ev = {
                "ops_per_s": ops,
                "ops_unit": ops_unit,
                "median_ops_per_s": med,
                "drop": round(1.0 - ops / med, 4) if med else None,
                "z": round(score, 2) if math.isfinite(score) else None,
                "peers": len(group),
            }
            out.append((r, unit, ev))
    return out
