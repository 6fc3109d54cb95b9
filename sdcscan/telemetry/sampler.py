"""Host and device telemetry sampled around a run: frequencies, temperatures, power, error counters.

A `Sampler` reads every source before the run, every `interval_s` during it (a daemon thread) and
after it, and keeps one streaming reduction per metric (`REDUCE`: max temperature, mean frequency,
last counter value), so a 10,000 s burn-in costs no more memory than a 60 s run. Gauges (a clock, a
temperature, a power) also keep a series of at most 2 × MAX_POINTS points: when it fills, neighbouring
points are merged by the metric's own reduction and each point covers twice the samples, so a two-hour
burn-in's clocks and temperatures can be drawn over time in the same bounded memory. Telemetry is
evidence beside the verdict, never a reason a run fails: a source that is missing or raises becomes
`null` values and a note. An increase of an uncorrectable-error counter during the run is a finding.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from sdcscan.events import CaseFinished, CaseStarted
from sdcscan.report.document import CaseStats, Finding, Metrics, MetricStats, Telemetry
from sdcscan.telemetry.nvml import NvmlSource
from sdcscan.telemetry.sources import (
    CORRECTED,
    UNCORRECTABLE,
    CpuSource,
    EdacSource,
    MceSource,
    Reading,
    Source,
    SourceUnavailable,
)
from sdcscan.timefmt import iso_utc
from sdcscan.units import Unit

DEFAULT_INTERVAL_S = 5.0
GPU_INTERVAL_S = 1.0  # with a GPU among the units: its utilisation is the share of the last second busy
HOST = "host"
# A unit's gauges that say how hard it worked: also reduced over the samples taken while it ran a case
# (`in_cases`: mean and max), so that start-up, re-run gaps and the wait for peers do not dilute them.
CASE_GAUGES = ("util_pct", "clock_sm_mhz", "power_w")

# How samples of one metric become one number (STYLE.md §8). Counters keep the last value; their
# before/after difference is reported as `delta`.
REDUCE: dict[str, str] = {
    "freq_mhz": "mean",
    "load_pct": "mean",
    "load_1m": "max",
    "cpu_temp_c": "max",
    "temp_c": "max",
    "power_w": "max",
    "util_pct": "mean",
    "power_limit_w": "min",  # the limit that held at some point: a lowered cap shows
    "clock_sm_mhz": "mean",
    "clock_mem_mhz": "mean",
    "throttle_reasons": "or",
    **{m: "last" for m in (*CORRECTED, *UNCORRECTABLE, "remapped_rows_pending", "remapped_rows_failure")},
}


MAX_POINTS = 120  # a gauge's series keeps MAX_POINTS to 2 x MAX_POINTS points (`_Acc`)
SERIES = ("mean", "max", "min")  # the reductions of gauges: they are drawn over time


def _reduced(how: str, values: Sequence[float]) -> float:
    """Several samples (or equally wide points) of one metric as one, by its own reduction."""
    if how == "max":
        return max(values)
    if how == "min":
        return min(values)
    return sum(values) / len(values)  # mean: points merged are equally wide, so this is exact


class _Acc:
    """Streaming reduction of one metric: before, after, the reduced value and, for a gauge, a series of
    bounded length, in O(1) memory."""

    __slots__ = ("before", "bucket", "count", "how", "last", "points", "stride", "value")

    def __init__(self, how: str) -> None:
        self.how, self.count = how, 0
        self.before: float | None = None
        self.last: float | None = None
        self.value: float | None = None
        self.points: list[float] = []  # each the reduction of `stride` samples
        self.bucket: list[float] = []  # samples of the point being filled
        self.stride = 1

    def add(self, v: float | None) -> None:
        if v is None:
            return
        if self.count == 0:
            self.before, self.value = v, v
        elif self.how == "max":
            self.value = max(self.value, v)  # type: ignore[type-var]
        elif self.how == "mean":
            self.value += (v - self.value) / (self.count + 1)  # type: ignore[operator]
        elif self.how == "or":  # throttle reasons: a bit set in any sample is reported
            self.value = float(int(self.value) | int(v))  # type: ignore[arg-type]
        else:
            self.value = v
        self.count += 1
        self.last = v
        if self.how in SERIES:
            self._point(v)

    def _point(self, v: float) -> None:
        self.bucket.append(v)
        if len(self.bucket) < self.stride:
            return
        self.points.append(_reduced(self.how, self.bucket))
        self.bucket = []
        if len(self.points) == 2 * MAX_POINTS:  # full: merge neighbours, each point now twice as wide
            self.points = [_reduced(self.how, self.points[i : i + 2]) for i in range(0, len(self.points), 2)]
            self.stride *= 2

    def to_dict(self, after_seen: bool, interval_s: float) -> MetricStats:
        out: MetricStats = {"before": self.before, "after": self.last if after_seen else None}
        out["value"] = round(self.value, 3) if isinstance(self.value, float) else self.value
        out["reduce"] = self.how
        if self.points or self.bucket:
            points = self.points + ([_reduced(self.how, self.bucket)] if self.bucket else [])
            # samples with no reading are left out, so a point's time is approximate where a source failed
            out["series"] = {"every_s": self.stride * interval_s, "points": [round(p, 3) for p in points]}
        if self.how == "last":
            before, last = self.before, self.last
            out["delta"] = last - before if after_seen and before is not None and last is not None else None
        return out


class _CaseAcc:
    """Mean and max of a unit's gauge over the samples taken while the unit ran a case."""

    __slots__ = ("count", "peak", "total")

    def __init__(self) -> None:
        self.count, self.total, self.peak = 0, 0.0, -math.inf

    def add(self, v: float) -> None:
        self.count += 1
        self.total += v
        self.peak = max(self.peak, v)

    def to_dict(self) -> CaseStats:
        return {"mean": round(self.total / self.count, 3), "max": round(self.peak, 3), "samples": self.count}


class CaseClock:
    """Which units are running a case, from the run's events: the `busy` of a Sampler. A unit is busy
    from CaseStarted to its CaseFinished (main pass and re-runs alike)."""

    def __init__(self) -> None:
        self._running: set[str] = set()

    def observe(self, event: object) -> None:
        """An EventSink: call it with every event of the run."""
        if isinstance(event, CaseStarted):
            self._running.add(event.unit)
        elif isinstance(event, CaseFinished):
            self._running.discard(event.unit)

    def busy(self, unit: str) -> bool:
        return unit in self._running


def default_sources(unit_ids: Sequence[str]) -> list[Source]:
    """The sources that apply to these units: psutil, EDAC and MCE always; NVML when there are GPUs."""
    cpus = [int(u.split(":")[1]) for u in unit_ids if u.startswith("cpu:")]
    gpus = [int(u.split(":")[1]) for u in unit_ids if u.startswith("cuda:")]
    sources: list[Source] = [CpuSource(cpus), EdacSource(), MceSource()]
    if gpus:
        sources.append(NvmlSource(gpus))
    return sources


class Sampler:
    """Context manager that samples telemetry around a run.

    Args:
        units: Unit objects or unit ids ("cpu:3", "cuda:0").
        interval_s: seconds between samples during the run.
        sources: override the sources (tests pass fakes, or EdacSource/MceSource on a fake root).
        busy: whether a unit (by id) is running a case right now; its CASE_GAUGES are then also reduced
            over those samples only (`in_cases`). None: no such reduction.

    Example:
        with Sampler(units, interval_s=5.0) as sampler:
            report = run(...)
        report["telemetry"] = sampler.summary()
        report["findings"] += telemetry_findings(report["telemetry"])
    """

    def __init__(
        self,
        units: Iterable[Unit | str],  # units or their ids
        interval_s: float = DEFAULT_INTERVAL_S,
        *,
        sources: Sequence[Source] | None = None,
        busy: Callable[[str], bool] | None = None,
    ) -> None:
        self.unit_ids = [str(getattr(u, "id", u)) for u in units]
        self.busy = busy
        self._in_cases: dict[str, dict[str, _CaseAcc]] = {}
        self.interval_s = interval_s
        self.sources = list(sources) if sources is not None else default_sources(self.unit_ids)
        self._accs: dict[str, dict[str, _Acc]] = {}
        self._notes: dict[str, str] = {}
        self._status: dict[str, str] = {}
        self._samples = 0
        self._after = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at: str | None = None
        self._ended_at: str | None = None

    def __enter__(self) -> Sampler:
        self._started_at = _utc_now()
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="sdcscan-telemetry", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._ended_at = _utc_now()
        if self._thread is not None:
            # A source stuck in a syscall must not hold up the end of the run: give up after a while.
            self._thread.join(timeout=max(2.0, 2 * self.interval_s))
            if self._thread.is_alive():
                self._notes["sampler"] = (
                    "telemetry: a source stopped answering; values after the run are missing"
                )
                return
        self.sample()
        self._after = True

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        """Read every available source once and fold the values into the reductions."""
        with self._lock:
            for source in self.sources:
                if self._status.get(source.name) == "unavailable":
                    continue
                self._fold(source, self._read(source))
            self._samples += 1

    def _read(self, source: Source) -> Reading:
        try:
            reading = source.read()
            self._status[source.name] = "ok"
            self._notes.update({f"{source.name}.{k}": v for k, v in source.notes.items()})
            return reading
        except SourceUnavailable as why:
            self._status[source.name] = "unavailable"
            self._notes[source.name] = f"{source.name}: {why}"
        except Exception as err:  # never fail a run because telemetry broke; say so instead
            self._status[source.name] = "unavailable"
            self._notes[source.name] = f"{source.name}: stopped reading after an error: {err!r}"
        return source.empty(self.unit_ids)

    def _fold(self, source: Source, reading: Reading) -> None:
        for scope, metrics in reading.items():
            accs = self._accs.setdefault(scope, {})
            for metric, value in metrics.items():
                accs.setdefault(metric, _Acc(REDUCE.get(metric, "last"))).add(value)
            if scope == HOST or self.busy is None or not self._is_busy(scope):
                continue
            in_cases = self._in_cases.setdefault(scope, {})
            for metric in CASE_GAUGES:
                value = metrics.get(metric)
                if value is not None:
                    in_cases.setdefault(metric, _CaseAcc()).add(value)

    def _is_busy(self, unit: str) -> bool:
        try:
            return bool(self.busy and self.busy(unit))
        except Exception:  # telemetry never fails a run
            return False

    def summary(self) -> Telemetry:
        """The report's telemetry object: per scope ("host" or a unit id) and metric, before/after/value."""
        # Never wait forever on a sampler thread stuck in a source: read what is there.
        locked = self._lock.acquire(timeout=5.0)
        try:
            scopes: dict[str, Metrics | None] = {
                scope: {m: self._stats(scope, m, acc) for m, acc in sorted(accs.items())}
                for scope, accs in self._accs.items()
            }
            return {
                "interval_s": self.interval_s,
                "samples": self._samples,
                "started_at": self._started_at,
                "ended_at": self._ended_at,
                "sources": dict(sorted(self._status.items())),
                "host": scopes.pop(HOST, {}),
                "units": {u: scopes.get(u, {}) for u in self.unit_ids},
                "notes": [self._notes[k] for k in sorted(self._notes)],
            }
        finally:
            if locked:
                self._lock.release()

    def _stats(self, scope: str, metric: str, acc: _Acc) -> MetricStats:
        out = acc.to_dict(self._after, self.interval_s)
        in_cases = self._in_cases.get(scope, {}).get(metric)
        if in_cases is not None:
            out["in_cases"] = in_cases.to_dict()
        return out


def telemetry_findings(summary: Telemetry) -> list[Finding]:
    """Findings from a telemetry summary: uncorrectable errors that rose during the run, corrected errors.

    Returns:
        Finding dicts {kind, unit, message, next}. kind `uncorrectable_errors` is hardware evidence
        a person must act on; `corrected_errors` is reported for information.
    """
    scopes: list[tuple[str | None, Metrics]] = [(None, summary.get("host") or {})]
    scopes += [(unit, metrics or {}) for unit, metrics in (summary.get("units") or {}).items()]
    findings: list[Finding] = []
    for unit, metrics in scopes:
        where = unit or "this host"
        for metric, stats in sorted(metrics.items()):
            delta = (stats or {}).get("delta")
            if stats is None or not delta or delta <= 0:
                continue
            label = _LABELS.get(metric, metric)
            if metric in UNCORRECTABLE:
                findings.append(_finding("uncorrectable_errors", unit, where, label, stats, _NEXT_UE))
            elif metric in CORRECTED:
                findings.append(_finding("corrected_errors", unit, where, label, stats, _NEXT_CE))
    return findings


_LABELS = {
    "edac_ue_count": "EDAC uncorrectable memory errors",
    "edac_ce_count": "EDAC corrected memory errors",
    "mce_count": "machine-check exceptions",
    "ecc_uncorrected": "GPU ECC uncorrectable errors",
    "ecc_corrected": "GPU ECC corrected errors",
    "retired_pages_dbe": "GPU pages retired for double-bit errors",
    "retired_pages_sbe": "GPU pages retired for single-bit errors",
    "remapped_rows_uncorrectable": "GPU rows remapped for uncorrectable errors",
    "remapped_rows_correctable": "GPU rows remapped for correctable errors",
}
_NEXT_UE = (
    "check `journalctl -k` or `ras-mc-ctl --errors` (GPUs: `nvidia-smi -q -d ECC,PAGE_RETIREMENT`) "
    "and schedule the part for repair"
)
_NEXT_CE = (
    "watch the trend over the next runs; a rising rate of corrected errors often precedes uncorrectable ones"
)


def _finding(kind: str, unit: str | None, where: str, label: str, stats: MetricStats, nxt: str) -> Finding:
    change = f"{stats['before']:g} -> {stats['after']:g}"
    message = f"{label} on {where} rose by {stats['delta']:g} during the run ({change})."
    return {"kind": kind, "unit": unit, "message": message, "next": nxt}


def _utc_now() -> str:
    return iso_utc(time.time())
