"""Slow units from an engine's `slow_samples` rows: the rules of `fleet.perf`, two ways of finding one
(1, 2) and the cohort's own tails that both answer to (3).

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
   asks every workload to be slow, through its least slow one. The loss averaged over its recent
   reports must be `drop` too: a healthy unit whose one run was slowed by other work is not a throttle.
3. The cohort's tails (`perf.tail_cut`, `Tails`): where a cohort's healthy units show a longer tail
   than the normal model allows, rule 1's thresholds and, for a unit with one report, rule 2's cut move
   down to where that tail keeps the expected healthy units named within the normal model's budget.

Either of 1 and 2 makes the unit slow; the host roll-up (`perf.add_host_or_units`) is the same for
both. The combination happens before the cohort-size correction: one score per unit, one t_n per cohort.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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
    ("measure", "string"),
    ("median", "float64"),
    ("scale", "float64"),  # MAD / 0.6745: one robust standard deviation
)
CohortKey = tuple[str, str, str]  # (profile sha256, cohort, measure)


def _tail_samples(refs: str) -> str:
    """The robust z of each newest reading whose unit's other workloads (same measure) all lie above
    `perf.CALM`, for `perf.tail_cut`: a unit judged on one workload has no others to show it healthy."""
    return f"""
SELECT profile_sha256, cohort, measure, workload, z FROM (
  SELECT s.profile_sha256, s.cohort, s.measure, s.workload, (s.reading - f.median) / f.scale AS z,
         SUM(CASE WHEN (s.reading - f.median) / f.scale <= {perf.CALM} THEN 1 ELSE 0 END)
             OVER (PARTITION BY s.report, s.unit, s.measure) AS low,
         COUNT(*) OVER (PARTITION BY s.report, s.unit, s.measure) AS judged
  FROM slow_samples s
  JOIN {refs} f ON s.profile_sha256 = f.profile_sha256 AND s.cohort = f.cohort AND s.workload = f.workload
                AND s.measure = f.measure
  WHERE s.{NEWEST}) t
WHERE judged >= 2 AND low = CASE WHEN z <= {perf.CALM} THEN 1 ELSE 0 END"""


def _unit_scores(refs: str) -> str:
    """Per unit of each host: the mean over its recent reports of its least slow workload's robust z
    (throughput), how many reports it has, its newest report, and that report's mean loss against the
    healthy medians."""
    return f"""
SELECT host_key, unit, profile_sha256, cohort,
       SUM(least_z) / COUNT(*) AS score,
       COUNT(*) AS reports,
       MIN(CASE WHEN recency = 1 THEN report END) AS newest_report,
       MIN(CASE WHEN recency = 1 THEN mean_loss END) AS newest_loss,
       SUM(mean_loss) / COUNT(*) AS recent_loss
FROM (SELECT s.host_key, s.unit, s.profile_sha256, s.cohort, s.report, s.recency,
             MAX((s.reading - f.median) / f.scale) AS least_z,
             AVG(1.0 - s.reading / f.median) AS mean_loss
      FROM slow_samples s
      JOIN {refs} f ON s.profile_sha256 = f.profile_sha256 AND s.cohort = f.cohort AND s.workload = f.workload
                    AND s.measure = f.measure
      WHERE s.measure = 'ops_per_s'
      GROUP BY s.host_key, s.unit, s.profile_sha256, s.cohort, s.report, s.recency) r
GROUP BY host_key, unit, profile_sha256, cohort"""


@dataclass(frozen=True, slots=True)
class Tails:
    """Where a cohort's own tails put the cuts of one measure (`perf.tail_cut`; None: too few calm units
    to show any tail, and the normal model's threshold stands alone)."""

    majority: float | None  # robust z a strict majority of a unit's workloads must reach (rule 1)
    every: float | None  # robust z every workload must reach: the combined rule's, for one report


def slow_findings(
    db: Rows, opts: Options, reports: ReportBook, col: Collector
) -> dict[perf.GroupKey, perf.Reference]:
    """Add the `slow` findings of the samples `db` holds; return the references they were judged by (what
    the fleet page draws: `fleet.overview_rows`)."""
    refs, tails = _references_and_tails(db, opts)
    suspects = _per_workload_suspects(db, opts, refs)
    combined = _combined_suspects(db, opts, refs, tails)
    if suspects or combined:
        _add(db, reports, col, suspects | set(combined), refs, combined)
    return refs


def _references_and_tails(
    db: Rows, opts: Options
) -> tuple[dict[perf.GroupKey, perf.Reference], dict[CohortKey, Tails]]:
    """The references of the newest samples, each threshold moved down to the cohort's majority tail
    cut where that lies deeper than the normal model's t_n; and each cohort's `Tails`."""
    refs = _normal_references(db, opts)
    tails = _cohort_tails(db, opts, refs)
    for key, ref in refs.items():
        found = tails.get((key[0], key[1], key[3]))
        if found is not None and found.majority is not None and -found.majority > ref.z_threshold:
            refs[key] = replace(ref, z_threshold=-found.majority)
    return refs, tails


def _reference_rows(
    refs: dict[perf.GroupKey, perf.Reference],
) -> list[tuple[str, str, str, str, float, float]]:
    """The REFERENCE_COLUMNS rows of the references whose healthy peers vary (a robust z exists)."""
    return [
        (sha, cohort, workload, measure, ref.median, ref.mad / perf.MAD_TO_SIGMA)
        for (sha, cohort, workload, measure), ref in sorted(refs.items())
        if ref.mad > 0
    ]


def _cohort_tails(
    db: Rows, opts: Options, refs: dict[perf.GroupKey, perf.Reference]
) -> dict[CohortKey, Tails]:
    """Each (profile, cohort, measure)'s `Tails`, from its healthy units' newest readings."""
    rows = _reference_rows(refs)
    groups: dict[CohortKey, list[str]] = {}
    for sha, cohort, workload, measure, _, _ in rows:
        groups.setdefault((sha, cohort, measure), []).append(workload)
    out: dict[CohortKey, Tails] = {}
    if not any(len(workloads) > 1 for workloads in groups.values()):
        return out  # one workload: no other workload can show a unit healthy
    budget = perf.tail_budget(opts.slow_z)
    in_group = "profile_sha256 = ? AND cohort = ? AND measure = ? AND workload = ?"
    with db.table(REFERENCE_COLUMNS, rows) as table, db.kept(_tail_samples(table)) as samples:
        for (sha, cohort, measure), workloads in sorted(groups.items()):
            if len(workloads) < 2:
                continue
            found = [
                db.column(f"SELECT z FROM {samples} WHERE {in_group}", [sha, cohort, measure, w])
                for w in workloads
            ]
            units = max(refs[(sha, cohort, w, measure)].peers for w in workloads)
            out[(sha, cohort, measure)] = Tails(
                majority=perf.tail_cut(found, units, len(workloads) // 2 + 1, budget),
                every=perf.tail_cut(found, units, len(workloads), budget),
            )
    return out


def _normal_references(db: Rows, opts: Options) -> dict[perf.GroupKey, perf.Reference]:
    """Each (profile, cohort, workload, measure)'s healthy reference, with the normal model's t_n."""
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
    db: Rows, opts: Options, refs: dict[perf.GroupKey, perf.Reference], tails: dict[CohortKey, Tails]
) -> dict[tuple[int, str], dict[str, object]]:
    """(newest report, unit) -> the combined evidence, of the units rule 2 finds slow."""
    rows = [row for row in _reference_rows(refs) if row[3] == "ops_per_s"]
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
            # one report: its score is its least slow workload's z, which the cohort's tails may need deeper
            every = tails.get((sha, cohort, "ops_per_s"), Tails(None, None)).every
            one_report_cut = ref.cut if every is None else min(ref.cut, every)
            for report, unit, score, reports, loss, recent_loss in db.rows(
                f"SELECT newest_report, unit, score, reports, newest_loss, recent_loss FROM {scores} "
                f"WHERE {where} AND score <= ? AND (reports > 1 OR score <= ?) AND newest_loss >= ? "
                "AND recent_loss >= ?",
                [sha, cohort, ref.cut, one_report_cut, opts.slow_drop, opts.slow_drop],
            ):
                z = ref.z(score)
                out[(report, unit)] = {
                    "score": round(score, 3),
                    "z": round(z, 2),
                    "z_threshold": round(ref.z_threshold, 2),
                    "units": ref.units,
                    "reports": reports,
                    "loss": round(loss, 4),
                    "recent_loss": round(recent_loss, 4),
                }
                if reports == 1 and one_report_cut < ref.cut:
                    out[(report, unit)]["tail_cut"] = round(one_report_cut, 2)
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
