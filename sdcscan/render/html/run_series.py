"""A run's cases as series over time: each unit's throughput and efficiency per workload, and where its
case outcomes fell, binned so that a 10,000 s burn-in of a 192-core host draws in a few hundred kB.

Time: a unit runs its cases one after another, so the end of its k-th case is the sum of the seconds of
its first k cases (the report keeps each case's seconds, not its clock time; the small gaps between
cases are not counted). Throughput: the report keeps, per unit and workload, the ops and seconds of all
its cases together, and each case's seconds; a case's ops are not kept, and a workload's case sizes
vary (matmul_golden cycles through shapes). A bin's rate is therefore the workload's mean ops per case
times the bin's cases over their seconds: exact over the run, an estimate per bin that is good when a
bin holds many cases, which is what a burn-in gives. Efficiency is that rate over the unit's measured
plain-op peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sdcscan.outcomes import STATUS_ERROR, STATUS_MISMATCH, STATUS_OK, unit_order
from sdcscan.report.document import Report, Unit

MAX_POINTS = 24_000  # points of one throughput chart over all its units
MAX_CELLS = 30_000  # bins of the outcome strip over all units
MAX_BINS = 120  # bins of one unit's throughput series
MAX_OUTCOME_BINS = 400
CASES_PER_BIN = 4  # fewest cases a throughput bin should hold on average, where the run allows
MIN_BINS = 6  # points of a throughput series when the run is too short for CASES_PER_BIN
DISPUTED = "disputed"  # the case's digest differs from its cohort's majority (or there is none): `disputes`
SEVERITY = {STATUS_OK: 0, STATUS_ERROR: 1, DISPUTED: 2, STATUS_MISMATCH: 3}  # a bin shows its worst case


@dataclass(frozen=True, slots=True)
class UnitSeries:
    """One unit's rate of one workload in each time bin (None: no case of it there)."""

    unit: str
    verdict: str
    rates: tuple[float | None, ...]
    peak: float | None  # ops/s of the plain op, when measured


@dataclass(frozen=True, slots=True)
class WorkloadSeries:
    workload: str
    ops_unit: str
    bin_s: float
    units: tuple[UnitSeries, ...]


@dataclass(frozen=True, slots=True)
class Segment:
    """Consecutive bins of one unit with one worst status: [first, last] bins, its cases, notable cases."""

    first: int
    last: int
    status: str
    cases: int
    bad: tuple[tuple[int, str], ...]  # (case index, workload) of mismatching or erroring cases, a few


@dataclass(frozen=True, slots=True)
class OutcomeStrip:
    bin_s: float
    bins: int
    rows: tuple[tuple[str, str, tuple[Segment, ...]], ...]  # (unit, verdict, segments)
    # (unit, seconds into its cases, why): where an invalid unit stopped (a case hung, the worker died,
    # it never became ready): the case it was in has no outcome, so it is marked where its cases end
    stopped: tuple[tuple[str, float, str], ...] = ()


def ordered_units(report: Report) -> list[Unit]:
    return sorted(report["units"], key=lambda u: unit_order(u["id"]))


def _ends(seconds: list[float]) -> list[float]:
    """The end of each case, in seconds since the unit's first case started."""
    out, t = [], 0.0
    for s in seconds:
        t += s if isinstance(s, int | float) and math.isfinite(s) and s > 0 else 0.0
        out.append(t)
    return out


def span_s(report: Report) -> float:
    """The longest unit's summed case seconds: the time axis of every chart of the run."""
    longest = max(
        (_ends(u["cases"]["seconds"])[-1] for u in report["units"] if u["cases"]["seconds"]), default=0.0
    )
    return longest if longest > 0 else 1.0


def throughput_series(report: Report) -> list[WorkloadSeries]:
    """Per workload, each unit's rate in each time bin (module docstring: how a bin's rate is estimated)."""
    units = ordered_units(report)
    span = span_s(report)
    out = []
    for workload in sorted({w for u in units for w in (u.get("throughput") or {})}):
        taking = [u for u in units if workload in (u.get("throughput") or {})]
        counts = sorted(int(u["throughput"][workload]["cases"]) for u in taking)
        typical = counts[len(counts) // 2]
        # CASES_PER_BIN cases a bin where the run has them; a short run still gets a few points.
        wanted = max(typical // CASES_PER_BIN, min(typical, MIN_BINS))
        bins = max(1, min(MAX_BINS, MAX_POINTS // max(len(taking), 1), wanted))
        series = tuple(_unit_rates(u, workload, span, bins) for u in taking)
        ops_unit = str(taking[0]["throughput"][workload]["ops_unit"]) if taking else ""
        out.append(WorkloadSeries(workload, ops_unit, span / bins, series))
    return out


def _unit_rates(u: Unit, workload: str, span: float, bins: int) -> UnitSeries:
    t = (u.get("throughput") or {})[workload]
    seconds_total, cases_total = float(t.get("seconds") or 0.0), float(t["cases"])
    mean_ops = t["ops_per_s"] * seconds_total / cases_total if cases_total > 0 else 0.0
    n, secs = [0] * bins, [0.0] * bins
    c = u["cases"]
    for end, s, w in zip(_ends(c["seconds"]), c["seconds"], c["workload"], strict=False):
        if w == workload:
            i = min(bins - 1, int((end - s / 2) / span * bins))
            n[i] += 1
            secs[i] += s
    rates = tuple(
        mean_ops * k / sec if k and sec > 0 and mean_ops > 0 else None for k, sec in zip(n, secs, strict=True)
    )
    peak = t.get("peak_ops_per_s")
    return UnitSeries(
        u["id"], u["verdict"], rates, peak if isinstance(peak, int | float) and peak > 0 else None
    )


def outcome_strip(report: Report) -> OutcomeStrip:
    """Each unit's cases in time bins, each bin showing its worst status, runs of equal bins merged."""
    units = ordered_units(report)
    span = span_s(report)
    most = max((len(u["cases"]["index"]) for u in units), default=1)
    bins = max(1, min(MAX_OUTCOME_BINS, MAX_CELLS // max(len(units), 1), most))
    disputed = disputed_cases(report)
    rows = tuple((u["id"], u["verdict"], _segments(u, span, bins, disputed)) for u in units)
    stopped = tuple(
        (u["id"], min(span, sum(u["cases"]["seconds"])), u["reason"] or "")
        for u in units
        if u["verdict"] == "invalid" and u["reason"]
    )
    return OutcomeStrip(span / bins, bins, rows, stopped)


def disputed_cases(report: Report) -> set[tuple[str, int]]:
    """(unit, case) of every digest a dispute names against its majority; every unit named when the
    cohort has no majority (two units that disagree: each is a suspect until re-tests settle it)."""
    out: set[tuple[str, int]] = set()
    for d in report.get("disputes") or []:
        index, majority = d.get("index"), d.get("majority")
        if index is None:
            continue
        out.update(
            (unit, index) for unit, digest in d["digests"].items() if majority is None or digest != majority
        )
    return out


def _segments(u: Unit, span: float, bins: int, disputed: set[tuple[str, int]]) -> tuple[Segment, ...]:
    c = u["cases"]
    worst: list[str | None] = [None] * bins
    cases = [0] * bins
    bad: list[list[tuple[int, str]]] = [[] for _ in range(bins)]
    for end, s, recorded, index, w in zip(
        _ends(c["seconds"]), c["seconds"], c["status"], c["index"], c["workload"], strict=False
    ):
        status = DISPUTED if recorded == STATUS_OK and (u["id"], index) in disputed else recorded
        # A case colours every bin its time overlaps (a long case leaves no gap); it is counted, and
        # named when it failed, in the bin of its middle.
        first = min(bins - 1, int((end - s) / span * bins))
        last = max(first, min(bins - 1, math.ceil(end / span * bins) - 1))
        for i in range(first, last + 1):
            if worst[i] is None or SEVERITY.get(status, 1) > SEVERITY.get(worst[i] or STATUS_OK, 0):
                worst[i] = status
        i = min(bins - 1, int((end - s / 2) / span * bins))
        cases[i] += 1
        if status != STATUS_OK and len(bad[i]) < 5:
            bad[i].append((index, w))
    out: list[Segment] = []
    for i, found in enumerate(worst):
        if found is None:
            continue
        prev = out[-1] if out else None
        if prev is not None and prev.status == found and prev.last == i - 1:
            out[-1] = Segment(prev.first, i, found, prev.cases + cases[i], (prev.bad + tuple(bad[i]))[:5])
        else:
            out.append(Segment(i, i, found, cases[i], tuple(bad[i])))
    return tuple(out)
