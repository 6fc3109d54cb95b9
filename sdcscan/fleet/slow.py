"""Slow units from an engine's `slow_samples` rows: the rules of `fleet.perf`, two ways of finding one.

1. Per workload (`perf` steps 1 to 4): in its host's newest report, the unit is slow on a strict
   majority of its judged workloads, each t_n robust spreads and `drop` below the healthy peers.
2. Combined: a throttle or a thermal limit slows every workload of a unit, run after run. Per report,
   the unit's evidence is its least slow workload's robust z (throughput, against each workload's
   healthy reference): a loss on every workload moves it, one workload's glitch does not. Its score
   is the mean of that over its host's RECENT_REPORTS newest reports of the profile; the cohort's own
   scores give their spread (`perf.score_reference`), and the unit is slow when its score is t_n of
   those spreads below the healthy units' and, in its newest report, its workloads are on average at
   least `drop` below their healthy medians (slow now, by a relevant amount: a fixed unit stops being
   slow with its next report). On average, not each: with two workloads at 3.5% noise, requiring each
   to show a 15% loss as 10% kept one slow unit in ten out (recall 87-90%, issue 44); the score already
   asks every workload to be slow, through its least slow one.

Either makes the unit slow; the host roll-up (`perf.add_host_or_units`) is the same for both. The
combination happens before the cohort-size correction: one score per unit, one t_n per cohort.
"""

from __future__ import annotations

from sdcscan.fleet import perf
from sdcscan.fleet.engine import Rows
from sdcscan.fleet.findings import Collector
from sdcscan.fleet.records import ReportBook
from sdcscan.fleet.summary import Options

NEWEST = "recency = 1"
REFERENCE_COLUMNS = (
    ("profile_sha256", "string"),
    ("cohort", "string"),
    ("workload", "string"),
    ("median", "float64"),
    ("scale", "float64"),  # MAD / 0.6745: one robust standard deviation
)


def _unit_scores(refs: str) -> str:
    """Per unit of each host: the mean over its recent reports of its least slow workload's robust z
    (throughput), how many reports it has, its newest report, and that report's mean loss against the
    healthy medians."""
    return f"""
SELECT host_key, unit, profile_sha256, cohort,
       SUM(least_z) / COUNT(*) AS score,
       COUNT(*) AS reports,
       MIN(CASE WHEN recency = 1 THEN report END) AS newest_report,
       MIN(CASE WHEN recency = 1 THEN mean_loss END) AS newest_loss
FROM (SELECT s.host_key, s.unit, s.profile_sha256, s.cohort, s.report, s.recency,
             MAX((s.reading - f.median) / f.scale) AS least_z,
             AVG(1.0 - s.reading / f.median) AS mean_loss
      FROM slow_samples s
      JOIN {refs} f ON s.profile_sha256 = f.profile_sha256 AND s.cohort = f.cohort AND s.workload = f.workload
      WHERE s.measure = 'ops_per_s'
      GROUP BY s.host_key, s.unit, s.profile_sha256, s.cohort, s.report, s.recency) r
GROUP BY host_key, unit, profile_sha256, cohort"""


def slow_findings(db: Rows, opts: Options, reports: ReportBook, col: Collector) -> None:
    """Add the `slow` findings of the samples `db` holds."""
    refs = references(db, opts)
    suspects = _per_workload_suspects(db, opts, refs)
    combined = _combined_suspects(db, opts, refs)
    if suspects or combined:
        _add(db, reports, col, suspects | set(combined), refs, combined)


def references(db: Rows, opts: Options) -> dict[perf.GroupKey, perf.Reference]:
    """Each (profile, cohort, workload, measure)'s healthy reference, from the newest samples (also what
    the fleet page draws: `fleet.overview_rows`)."""
    refs: dict[perf.GroupKey, perf.Reference] = {}
    in_group = f"{NEWEST} AND profile_sha256 = ? AND cohort = ? AND workload = ? AND measure = ?"
    for sha, cohort, workload, measure, n in db.rows(
        f"SELECT profile_sha256, cohort, workload, measure, COUNT(*) FROM slow_samples WHERE {NEWEST} "
        "GROUP BY profile_sha256, cohort, workload, measure"
    ):
        key = (sha, cohort, workload, measure)
        if n < opts.slow_min_units:
            continue
        values = db.column(f"SELECT reading FROM slow_samples WHERE {in_group}", key)
        ref = perf.healthy_reference(values, z=opts.slow_z, drop=opts.slow_drop)
        if ref is not None:
            refs[key] = ref
    return refs


def _per_workload_suspects(
    db: Rows, opts: Options, refs: dict[perf.GroupKey, perf.Reference]
) -> set[tuple[int, str]]:
    """(report, unit) of the newest samples below some workload's threshold (rule 1 decides later)."""
    suspects: set[tuple[int, str]] = set()
    in_group = f"{NEWEST} AND profile_sha256 = ? AND cohort = ? AND workload = ? AND measure = ?"
    for key, ref in refs.items():
        cut = ref.median * (1.0 - opts.slow_drop)  # only these can be slow
        for report, unit, x in db.rows(
            f"SELECT report, unit, reading FROM slow_samples WHERE {in_group} AND reading <= ?", [*key, cut]
        ):
            if ref.is_slow(x):
                suspects.add((report, unit))
    return suspects


def _combined_suspects(
    db: Rows, opts: Options, refs: dict[perf.GroupKey, perf.Reference]
) -> dict[tuple[int, str], dict[str, object]]:
    """(newest report, unit) -> the combined evidence, of the units rule 2 finds slow."""
    rows = [
        (sha, cohort, workload, ref.median, ref.mad / perf.MAD_TO_SIGMA)
        for (sha, cohort, workload, measure), ref in sorted(refs.items())
        if measure == "ops_per_s" and ref.mad > 0
    ]
    if not rows:
        return {}
    out: dict[tuple[int, str], dict[str, object]] = {}
    with (
        db.table(REFERENCE_COLUMNS, rows) as table,
        # every unit's score, aggregated once: each cohort below reads its own two slices of it
        db.kept(f"SELECT * FROM ({_unit_scores(table)}) u WHERE newest_report IS NOT NULL") as scores,
    ):
        for sha, cohort in sorted({(r[0], r[1]) for r in rows}):
            where = "profile_sha256 = ? AND cohort = ?"
            ref = perf.score_reference(
                db.column(f"SELECT score FROM {scores} WHERE {where}", [sha, cohort]), z=opts.slow_z
            )
            if ref is None:
                continue
            for report, unit, score, reports, loss in db.rows(
                f"SELECT newest_report, unit, score, reports, newest_loss FROM {scores} "
                f"WHERE {where} AND score <= ? AND newest_loss >= ?",
                [sha, cohort, ref.cut, opts.slow_drop],
            ):
                z = ref.z(score)
                out[(report, unit)] = {
                    "score": round(score, 3),
                    "z": round(z, 2),
                    "z_threshold": round(ref.z_threshold, 2),
                    "units": ref.units,
                    "reports": reports,
                    "loss": round(loss, 4),
                }
    return out


def _add(
    db: Rows,
    reports: ReportBook,
    col: Collector,
    suspects: set[tuple[int, str]],
    refs: dict[perf.GroupKey, perf.Reference],
    combined: dict[tuple[int, str], dict[str, object]],
) -> None:
    """The findings of the reports holding a suspect, from all of their units' newest samples."""
    with db.wanted(report for report, _ in suspects) as wanted:
        rows = db.rows(
            "SELECT s.report, s.unit, s.cohort, s.workload, s.measure, s.reading, s.reading_unit "
            f"FROM slow_samples s JOIN {wanted} w ON s.report = w.report"
        )
    readings: dict[int, dict[tuple[str, str], perf.UnitReadings]] = {}
    for report, unit, cohort, workload, measure, x, value_unit in rows:
        by_measure = readings.setdefault(report, {}).setdefault((unit, cohort), {})
        by_measure.setdefault(measure, []).append((workload, x, value_unit))
    known = reports.fetch(readings)
    for report in sorted(readings, key=lambda i: (known[i].key, known[i].plan[0])):
        r = known[report]
        units = sorted(
            (
                perf.Judged(u, c, {m: sorted(v) for m, v in ms.items()})
                for (u, c), ms in readings[report].items()
            ),
            key=lambda u: u.unit,
        )
        slow = []
        for u in units:
            if (report, u.unit) not in suspects:
                continue
            ev = perf.unit_evidence(r.plan[0], u, refs, combined.get((report, u.unit)))
            if ev is not None:
                slow.append((u, ev))
        if slow:
            perf.add_host_or_units(r, units, slow, refs, col)
