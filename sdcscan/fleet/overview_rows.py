"""The fleet overview (`fleet.overview`) from an engine's rows, after every step has run.

Nothing here judges: the healthy reference and the slow threshold are `fleet.slow`'s and `fleet.perf`'s,
what covers a host is `fleet.host_coverage.not_covering`, and which units fail comes from the findings
the assembler made. This module only counts and bins what the engine holds, with portable SQL (the
same text on DuckDB and Spark, as `fleet.sql_steps`), so it is computed only when a page is asked for.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sdcscan.errors import ReportError
from sdcscan.files import JSONFileError, parse_json
from sdcscan.fleet.engine import Rows
from sdcscan.fleet.findings import FleetFinding
from sdcscan.fleet.host_coverage import DAY_S, Covered, not_covering
from sdcscan.fleet.overview import (
    HISTOGRAM_BINS,
    MAX_AGE_BINS,
    MAX_BARS,
    MAX_DAYS,
    MAX_DISTRIBUTIONS,
    MAX_MARKS,
    MAX_MODEL_CHARS,
    AgeHistogram,
    ClusterBar,
    Clusters,
    Distribution,
    FleetOverview,
    SlowMark,
    hostname_prefix,
)
from sdcscan.fleet.perf import GroupKey, Reference
from sdcscan.fleet.records import REPORT_COLUMNS, host_report
from sdcscan.fleet.report_file import report_bytes
from sdcscan.fleet.slow import NEWEST
from sdcscan.fleet.summary import FAILING_KINDS, Options
from sdcscan.outcomes import printable
from sdcscan.timefmt import iso_utc

CORE_SHARE = 0.005  # the lowest units a histogram's range may leave out (they are counted in its first bin)
THROUGHPUT = "ops_per_s"  # the measure the distributions show (efficiency is a unit's own ratio)
DAY_SHARE = 0.99  # the day chart spans at least the days of this share of the reports, newest first
AGE_STEPS_DAYS = (1.0, 2.0, 7.0, 14.0, 30.0, 91.0)  # bin widths, the narrowest that fits MAX_AGE_BINS
Failing = tuple[str, str, str, str]  # (host key, run id, unit, finding kind)


def fleet_overview(
    db: Rows, opts: Options, findings: Sequence[FleetFinding], refs: Mapping[GroupKey, Reference]
) -> FleetOverview:
    """The overview of the reports `db` holds, judged with `opts`, whose findings are `findings`; `refs`
    are the slow rule's references, as it judged by them (`slow.slow_findings`)."""
    failing = sorted(set(failing_units(findings)))
    hosts = _Hosts(db, opts.now)
    distributions, left_out = _distributions(db, findings, refs)
    return FleetOverview(
        distributions=distributions,
        distributions_left_out=left_out,
        ages=hosts.ages(opts.stale_s) if opts.now is not None else None,
        clusters=_clusters(db, failing, hosts),
        failing_units=len(failing),
    )


def failing_units(findings: Iterable[FleetFinding]) -> Iterator[Failing]:
    """(host, run, unit, kind) of every unit a failing finding names; a host's slow roll-up names each."""
    for f in findings:
        if f.kind not in FAILING_KINDS:
            continue
        run = str(f.evidence.get("run", ""))
        if f.unit is not None:
            yield f.host, run, f.unit, f.kind
        else:
            for u in f.evidence.get("units", ()):
                yield f.host, run, str(u["unit"]), f.kind


# -- throughput distributions ----------------------------------------------------------------------


def _distributions(
    db: Rows, findings: Sequence[FleetFinding], refs: Mapping[GroupKey, Reference]
) -> tuple[tuple[Distribution, ...], int]:
    """One histogram per (profile, cohort, workload) of the newest throughput samples, groups holding a
    slow unit first, then the largest: the first MAX_DISTRIBUTIONS, and how many were left out."""
    marks = _slow_marks(findings)
    names = dict(
        db.rows("SELECT profile_sha256, MIN(profile_name) FROM current_reports GROUP BY profile_sha256")
    )
    groups = db.rows(
        f"SELECT profile_sha256, cohort, workload, MIN(reading_unit), COUNT(*) FROM slow_samples "
        f"WHERE {NEWEST} AND measure = '{THROUGHPUT}' GROUP BY profile_sha256, cohort, workload"
    )
    groups.sort(key=lambda g: (-len(marks.get((g[0], g[1], g[2]), ())), -g[4], g[0], g[1], g[2]))
    out = []
    for sha, cohort, workload, value_unit, _ in groups[:MAX_DISTRIBUTIONS]:
        values = db.column(
            f"SELECT reading FROM slow_samples WHERE {NEWEST} AND profile_sha256 = ? AND cohort = ? "
            "AND workload = ? AND measure = ?",
            [sha, cohort, workload, THROUGHPUT],
        )
        values = values[np.isfinite(values)]
        if len(values):
            ref = refs.get((sha, cohort, workload, THROUGHPUT))
            slow = sorted(marks.get((sha, cohort, workload), ()), key=lambda m: (m.value, m.host, m.unit))
            out.append(
                _distribution(
                    str(names.get(sha) or sha), (sha, cohort, workload), value_unit, values, ref, slow
                )
            )
    return tuple(out), max(0, len(groups) - MAX_DISTRIBUTIONS)


def _distribution(
    profile: str,
    key: tuple[str, str, str],
    value_unit: str | None,
    values: npt.NDArray[np.float64],
    ref: Reference | None,
    slow: list[SlowMark],
) -> Distribution:
    median, slow_below = (ref.median, ref.slow_below) if ref else (None, None)
    lo, hi = _histogram_range(values, median, slow_below)
    counts, _ = np.histogram(np.clip(values, lo, hi), bins=HISTOGRAM_BINS, range=(lo, hi))
    return Distribution(
        profile=profile,
        profile_sha256=key[0],
        cohort=key[1],
        workload=key[2],
        value_unit=value_unit or "",
        units=len(values),
        lo=lo,
        width=(hi - lo) / HISTOGRAM_BINS,
        counts=tuple(int(c) for c in counts),
        clipped=int(np.count_nonzero((values < lo) | (values > hi))),
        median=median,
        slow_below=slow_below,
        slow=tuple(slow[:MAX_MARKS]),
        slow_not_marked=max(0, len(slow) - MAX_MARKS),
    )


def _histogram_range(
    values: npt.NDArray[np.float64], median: float | None, slow_below: float | None
) -> tuple[float, float]:
    """The range the bins span: the bulk of the units (all but the lowest CORE_SHARE) and the slow
    threshold, with a margin. Units far below (a unit at half its peers' rate) are counted in the first
    bin and marked where they are: a range stretched to them would squeeze the healthy ones into a few
    bins, and the spread of those is what the picture is for."""
    lo, hi = float(np.quantile(values, CORE_SHARE)), float(values.max())
    if slow_below is not None:
        lo = min(lo, slow_below)
    if median is not None:
        hi = max(hi, median)
    pad = 0.05 * (hi - lo) if hi > lo else abs(lo) * 0.01 or 1.0  # every unit equal: a narrow band
    return max(lo - pad, float(values.min())) if slow_below is None else lo - pad, hi + pad


def _slow_marks(findings: Iterable[FleetFinding]) -> dict[tuple[str, str, str], list[SlowMark]]:
    """(profile, cohort, workload) -> the slow units' throughput there, from the `slow` findings."""
    out: dict[tuple[str, str, str], list[SlowMark]] = {}
    for f in findings:
        if f.kind != "slow":
            continue
        units = [f.evidence] if f.unit is not None else list(f.evidence.get("units", ()))
        for ev in units:
            unit = f.unit if f.unit is not None else str(ev["unit"])
            for w in ev.get("workloads", ()):
                if w.get("measure") == THROUGHPUT and w.get("slow"):
                    key = (str(ev["profile_sha256"]), str(ev["cohort"]), str(w["workload"]))
                    out.setdefault(key, []).append(SlowMark(f.host, unit, float(w["value"])))
    return out


# -- hosts: ages and names --------------------------------------------------------------------------


class _Hosts:
    """Every kept report, reduced per host: its name and its newest report that covers it."""

    def __init__(self, db: Rows, now: float | None) -> None:
        self.names: dict[str, str] = {}  # host key -> hostname
        self.newest: dict[str, float] = {}  # host key -> end of its newest covering report
        self.ahead: set[str] = set()
        sql = f"SELECT {REPORT_COLUMNS}, units, case_rows, tested_units FROM keyed_reports"
        for row in db.batches(sql):
            report = host_report(row[:12])
            key = row[1]
            self.names[key] = report.host
            covered = Covered(report, row[12], row[13], row[14])
            if not_covering(covered, now=math.inf if now is None else now) is None:
                self.newest[key] = max(report.ended_at, self.newest.get(key, -math.inf))
            elif not_covering(covered) is None:
                self.ahead.add(key)  # it tested something, but its clock is ahead: its age is unknown
        self.now = now

    def ages(self, stale_s: float) -> AgeHistogram:
        assert self.now is not None
        ages = [(self.now - t) / DAY_S for t in self.newest.values()]
        oldest = max([*ages, stale_s / DAY_S * 1.25])
        width = next((w for w in AGE_STEPS_DAYS if oldest / w <= MAX_AGE_BINS), AGE_STEPS_DAYS[-1])
        bins = min(MAX_AGE_BINS, math.ceil(oldest / width) or 1)
        counts = [0] * bins
        older = 0
        for age in ages:
            i = int(max(age, 0.0) // width)
            if i < bins:
                counts[i] += 1
            else:
                older += 1
        untested = set(self.names) - set(self.newest) - self.ahead
        return AgeHistogram(
            width_days=width,
            counts=tuple(counts),
            older=older,
            untested=len(untested),
            ahead=len(self.ahead - set(self.newest)),
            hosts=len(self.names),
            stale_days=stale_s / DAY_S,
        )

    def per_prefix(self) -> Counter[str]:
        return Counter(hostname_prefix(name) for name in self.names.values())


# -- where failing units cluster -------------------------------------------------------------------


def _clusters(db: Rows, failing: list[Failing], hosts: _Hosts) -> tuple[Clusters, ...]:
    """Failing units by cohort (named by its model), by hostname prefix and by the day of the report."""
    placed = _placed(db, failing)
    by_cohort: dict[str, Counter[str]] = {}
    by_prefix: dict[str, Counter[str]] = {}
    by_day: dict[int, Counter[str]] = {}
    for host, run, unit, kind in failing:
        cohort, ended_at = placed.get((host, run, unit), (None, None))
        by_cohort.setdefault(cohort or "(unknown cohort)", Counter())[kind] += 1
        by_prefix.setdefault(hostname_prefix(hosts.names.get(host, host)), Counter())[kind] += 1
        if ended_at is not None:
            by_day.setdefault(int(ended_at // DAY_S), Counter())[kind] += 1
    cohort_units = {
        str(c): int(n) for c, n in db.rows("SELECT cohort, COUNT(*) FROM current_units GROUP BY cohort")
    }
    models = _models(db, sorted(by_cohort, key=lambda c: -sum(by_cohort[c].values()))[:MAX_BARS])
    day_reports = {
        int(d): int(n)
        for d, n in db.rows(
            "SELECT FLOOR(ended_at / 86400) AS day, COUNT(*) FROM current_reports GROUP BY FLOOR(ended_at / 86400)"
        )
    }
    return (
        _largest("model", "units", by_cohort, cohort_units, lambda c: _model_label(c, models.get(c))),
        _largest("hostname prefix", "hosts", by_prefix, hosts.per_prefix(), str),
        _days(by_day, day_reports),
    )


def _placed(db: Rows, failing: list[Failing]) -> dict[tuple[str, str, str], tuple[str | None, float]]:
    """(host, run, unit) -> the unit's cohort and its report's end, for the failing units."""
    if not failing:
        return {}
    columns = (("host", "string"), ("run", "string"), ("unit", "string"))
    with db.table(columns, [f[:3] for f in failing]) as wanted:
        rows = db.rows(
            "SELECT w.host, w.run, w.unit, u.cohort, k.ended_at "
            f"FROM {wanted} w JOIN keyed_reports k ON k.host_key = w.host AND k.run_id = w.run "
            "LEFT JOIN units u ON u.report = k.report AND u.unit = w.unit"
        )
    return {(h, r, u): (cohort, ended_at) for h, r, u, cohort, ended_at in rows}


def _largest(
    by: str, basis: str, groups: dict[Any, Counter[str]], sizes: dict[Any, int] | Counter[str], label: Any
) -> Clusters:
    """The MAX_BARS groups with most failing units (then by name); the rest summed as `other`."""
    total_failing = sum(sum(c.values()) for c in groups.values())
    total_basis = sum(sizes.values()) or 1
    order = sorted(groups, key=lambda g: (-sum(groups[g].values()), str(g)))
    bars = tuple(
        _bar(label(g), groups[g], sizes.get(g, 0), total_failing, total_basis) for g in order[:MAX_BARS]
    )
    other = sum(sum(groups[g].values()) for g in order[MAX_BARS:])
    return Clusters(by=by, basis=basis, bars=bars, other=other)


def _days(by_day: dict[int, Counter[str]], day_reports: dict[int, int]) -> Clusters:
    """Each day from the first that holds a failing unit or the newest DAY_SHARE of the reports, to the
    newest day with a report (at most MAX_DAYS), with its failing units (maybe none)."""
    if not day_reports:
        return Clusters(by="day", basis="reports", bars=(), other=0)
    last, total_basis = max(day_reports), sum(day_reports.values())
    first, held = last, 0
    for day in sorted(day_reports, reverse=True):  # newest first, until DAY_SHARE of the reports
        first, held = day, held + day_reports[day]
        if held >= DAY_SHARE * total_basis:
            break
    first = max(min([first, *by_day]), last - MAX_DAYS + 1)
    total_failing = sum(sum(c.values()) for c in by_day.values())
    bars = tuple(
        _bar(
            iso_utc(d * DAY_S)[:10],
            by_day.get(d, Counter()),
            day_reports.get(d, 0),
            total_failing,
            total_basis,
        )
        for d in range(first, last + 1)
    )
    other = sum(sum(c.values()) for d, c in by_day.items() if not first <= d <= last)
    return Clusters(by="day", basis="reports", bars=bars, other=other)


def _bar(label: str, kinds: Counter[str], basis: int, total_failing: int, total_basis: int) -> ClusterBar:
    return ClusterBar(
        label=label,
        units_by_kind=tuple((k, kinds[k]) for k in sorted(FAILING_KINDS) if kinds[k]),
        basis=basis,
        expected=total_failing * basis / total_basis if total_basis else 0.0,
    )


def _model_label(cohort: str, model: str | None) -> str:
    return f"{model} ({cohort})" if model else cohort


def _models(db: Rows, cohorts: list[str]) -> dict[str, str]:
    """Cohort -> its device model, read from its smallest current report (the tables keep no model)."""
    if not cohorts:
        return {}
    with db.table((("cohort", "string"),), [(c,) for c in cohorts]) as wanted:
        rows = db.rows(
            "SELECT cohort, source FROM (SELECT u.cohort, r.source, ROW_NUMBER() OVER "
            "(PARTITION BY u.cohort ORDER BY r.case_rows, r.source) AS place "
            f"FROM current_units u JOIN current_reports r ON u.report = r.report JOIN {wanted} w "
            "ON w.cohort = u.cohort) x WHERE place = 1"
        )
    found = {}
    for cohort, source in rows:
        model = _model_in(source, cohort)
        if model:
            found[cohort] = model
    return found


def _model_in(path: str, cohort: str) -> str | None:
    """The model a report file gives its cohort, or None (gone, changed, or not saying)."""
    try:
        data = parse_json(report_bytes(path), what="report", label=path)
    except (JSONFileError, ReportError, OSError):
        return None  # a dataset's files may live elsewhere: the page names the cohort only
    if not isinstance(data, dict):
        return None
    cohorts, units = data.get("cohorts"), data.get("units")
    entry = cohorts.get(cohort) if isinstance(cohorts, dict) else None
    model = entry.get("model") if isinstance(entry, dict) else None
    if not isinstance(model, str) and isinstance(units, list):  # an older report: its units say it
        model = next(
            (u.get("model") for u in units if isinstance(u, dict) and u.get("cohort") == cohort), None
        )
    return printable(model)[:MAX_MODEL_CHARS] if isinstance(model, str) and model.strip() else None
