"""Run results + judgement -> the report document (see report.schema.json)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from sdcscan import __version__
from sdcscan.errors import EXIT_TERMINATED
from sdcscan.report import SCHEMA_VERSION
from sdcscan.retest import CLASSIFICATIONS, Retest, unit_classification
from sdcscan.verdict import EXIT_CODES, CaseResult, Finding, Judgement, judge

MAX_MISMATCHES_PER_UNIT = 50  # enough to see a pattern; the per-case status column has the full count
MAX_RETEST_RECORDS = 20  # per unit; the counts cover every failing case


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def judge_and_build(
    *,
    run: dict[str, Any],
    host: dict[str, Any],
    software: dict[str, Any],
    cohorts: dict[str, dict[str, Any]],
    units: list[dict[str, Any]],
    outcomes: list[dict[str, Any]],
    problems: dict[str, str],
    interrupted: str | None,
) -> dict[str, Any]:
    """Judge journal-style outcomes and assemble the report; shared by `run` and `report --from-journal`.

    Args:
        units: {id, kind, model, cohort, notes} per unit; cohort "" for a unit that never started.
        outcomes: case records ({unit, index, attempt, workload, status, digest, seconds, error, …}).
        interrupted: "SIGINT", "SIGTERM", "journal" (rebuilt after the run was killed) or None.
    """
    replay = f"--profile {run['profile']['name']} --seed {run['seed']}"
    # A unit that never started has no cohort of its own; it is judged invalid, alone.
    cohort_of = {u["id"]: u["cohort"] or f"unstarted:{u['id']}" for u in units}
    main = [o for o in outcomes if o.get("attempt", 0) == 0]
    reruns: dict[tuple[str, int], list[str | None]] = {}
    for o in outcomes:
        if o.get("attempt", 0) > 0:
            reruns.setdefault((o["unit"], o["index"]), []).append(
                o.get("digest") if o["status"] == "ok" else None
            )
    judgement = judge(
        cohort_of,
        [_case_result(o) for o in main],
        retests=reruns,
        problems=problems,
        interrupted=interrupted is not None,
        replay=replay,
    )
    return build_report(
        run=run,
        host=host,
        software=software,
        cohorts=cohorts,
        units=[{**u, "cohort": cohort_of[u["id"]]} for u in units],
        outcomes=outcomes,
        judgement=judgement,
        exit_code=EXIT_TERMINATED if interrupted == "SIGTERM" else None,
    )


def _case_result(o: dict[str, Any]) -> CaseResult:
    return CaseResult(
        o["unit"],
        o["index"],
        o["workload"],
        o["status"],
        o.get("digest"),
        o.get("seconds") or 0.0,
        o.get("error"),
    )


def build_report(
    *,
    run: dict[str, Any],
    host: dict[str, Any],
    software: dict[str, Any],
    cohorts: dict[str, dict[str, Any]],
    units: list[dict[str, Any]],
    outcomes: list[dict[str, Any]],
    judgement: Judgement,
    exit_code: int | None = None,
) -> dict[str, Any]:
    """Assemble the report.

    Args:
        run: the `run` object (id, profile, seed, …); started_at/ended_at already set.
        units: per unit {id, kind, model, cohort, notes}.
        outcomes: journal-style case records ({unit, index, attempt, workload, status, digest, seconds, ops,
            ops_unit, mismatches, error, injected}) of the main pass and re-runs.
    """
    main = defaultdict(list)
    for o in outcomes:
        if o.get("attempt", 0) == 0:
            main[o["unit"]].append(o)
    mismatches: list[dict[str, Any]] = []
    unit_docs = []
    for u in units:
        uid = u["id"]
        cases = sorted(main[uid], key=lambda o: o["index"])
        unit_mm = [
            {"unit": uid, "index": o["index"], "workload": o["workload"], **m}
            for o in cases
            for m in o.get("mismatches") or []
        ]
        mismatches.extend(unit_mm[:MAX_MISMATCHES_PER_UNIT])
        unit_docs.append(_unit_doc(u, cases, judgement))
    findings = [f.to_dict() for f in judgement.findings] + [
        Finding("note", u["id"], note).to_dict() for u in units for note in u.get("notes", [])
    ]
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "sdcscan", "version": __version__},
        "verdict": judgement.verdict,
        "exit_code": EXIT_CODES[judgement.verdict] if exit_code is None else exit_code,
        "run": run,
        "host": host,
        "software": software,
        "cohorts": cohorts,
        "units": unit_docs,
        "mismatches": mismatches,
        "disputes": [_dispute_doc(d) for d in judgement.disputes],
        "errors": [
            {"unit": o["unit"], "index": o["index"], "workload": o["workload"], "error": o.get("error")}
            for o in outcomes
            if o.get("status") == "error"
        ][:100],
        "telemetry": {},
        "findings": findings,
    }


def _unit_doc(u: dict[str, Any], cases: list[dict[str, Any]], judgement: Judgement) -> dict[str, Any]:
    uid = u["id"]
    ops, secs, count = defaultdict(float), defaultdict(float), defaultdict(int)
    units_of: dict[str, str] = {}
    for o in cases:
        w = o["workload"]
        ops[w] += o.get("ops") or 0.0
        secs[w] += o.get("seconds") or 0.0
        count[w] += 1
        units_of[w] = o.get("ops_unit") or "op"
    bad = [o["index"] for o in cases if o["status"] == "mismatch"]
    return {
        "id": uid,
        "kind": u["kind"],
        "model": u["model"],
        "cohort": u["cohort"],
        "verdict": judgement.unit_verdicts.get(uid, "invalid"),
        "reason": judgement.unit_reasons.get(uid),
        "cases_run": len(cases),
        "workloads": sorted(count),
        "throughput": {
            w: {
                "ops_per_s": round(ops[w] / secs[w], 1) if secs[w] > 0 else 0.0,
                "ops_unit": units_of[w],
                "cases": count[w],
                "seconds": round(secs[w], 4),
            }
            for w in sorted(count)
        },
        "mismatches": len(bad),
        "first_bad_case": bad[0] if bad else None,
        "notes": list(u.get("notes", [])),
        "retest": _retest_doc(judgement.retests.get(uid, [])),
        "cases": {
            "index": [o["index"] for o in cases],
            "workload": [o["workload"] for o in cases],
            "digest": [o.get("digest") for o in cases],
            "status": [o["status"] for o in cases],
            "seconds": [round(o.get("seconds") or 0.0, 3) for o in cases],
        },
    }


def _dispute_doc(d: Any) -> dict[str, Any]:
    return {
        "index": d.index,
        "workload": d.workload,
        "cohort": d.cohort,
        "digests": dict(sorted(d.digests.items())),
        "majority": d.majority,
    }


def _retest_doc(records: list[Retest]) -> dict[str, Any]:
    """How the unit's failing cases behaved on re-run: summary, counts per classification, first records."""
    counts = {c: sum(r.classification == c for r in records) for c in CLASSIFICATIONS}
    return {
        "classification": unit_classification(records),
        "counts": counts,
        # Re-run cases first: they carry the evidence; untested ones are only counted beyond the cap.
        "cases": [r.to_dict() for r in sorted(records, key=lambda r: r.reruns == 0)[:MAX_RETEST_RECORDS]],
    }
