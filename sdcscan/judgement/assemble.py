"""Run results + judgement -> the report document (see report.schema.json): built once, here, complete.

`judge_and_build` is shared by `sdcscan run` (through `sdcscan.scan`) and `report --from-journal`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from typing import cast

from typing_extensions import NotRequired, TypedDict

from sdcscan import __version__, proof
from sdcscan.calibration.peers import held_thresholds, out_of_line
from sdcscan.errors import EXIT_TERMINATED
from sdcscan.judgement.evidence import GoldenCheck, GoldenEntry, Problem, check_golden
from sdcscan.judgement.retest import CLASSIFICATIONS, Retest, unit_classification
from sdcscan.judgement.verdict import Dispute as CohortDispute
from sdcscan.judgement.verdict import Judgement, judge
from sdcscan.judgement.wording import finding, findings, reason
from sdcscan.outcomes import STATUS_ERROR, STATUS_MISMATCH, STATUS_OK, CaseOutcome, CaseResult
from sdcscan.parts import describe
from sdcscan.report.document import (
    Calibration,
    CaseError,
    Checked,
    Dispute,
    Finding,
    Host,
    Mismatch,
    Part,
    Report,
    Run,
    StatusWord,
    Telemetry,
    Throughput,
    Unit,
    UnitKind,
    UnitPacing,
    build_report,
)
from sdcscan.report.document import (
    Retest as RetestDoc,
)
from sdcscan.workloads import SPECS
from sdcscan.workloads.workload_spec import Coverage

MAX_MISMATCHES_PER_UNIT = 50  # enough to see a pattern; the per-case status column has the full count
MAX_RETEST_RECORDS = 20
Outcome = CaseOutcome  # as the runner journals it; `report --from-journal` reads it back


class UnitFacts(TypedDict):
    """A unit as the run knows it before judging: what it is, its cohort, what it noted and measured."""

    id: str
    kind: UnitKind
    model: str
    cohort: str
    pci: NotRequired[str]  # a GPU's PCI bus id: how the kernel log names it
    part: NotRequired[Part]  # the physical part: socket and core, or serial and UUID (`sdcscan.parts`)
    notes: NotRequired[list[str]]
    peaks: NotRequired[dict[str, object]]  # workload -> its plain-op peak (peaks.rates.workload_peak)
    pacing: NotRequired[UnitPacing | None]
    calibration: NotRequired[list[Calibration]]


PHASES = (
    "compute",
    "check",
    "setup",
)  # the Context.phase names a workload times; shares of case time  # per unit; the counts cover every failing case


def judge_and_build(
    *,
    run: Run,
    host: Host,
    software: dict[str, object],
    cohorts: dict[str, dict[str, object]],
    units: list[UnitFacts],
    outcomes: list[Outcome],
    problems: Mapping[str, str | Problem],
    interrupted: str | None,
    golden: Mapping[str, GoldenEntry | None] | None = None,
    telemetry: Telemetry | None = None,
    telemetry_findings: list[Finding] | None = None,
) -> Report:
    """Judge journal-style outcomes and assemble the report; shared by `run` and `report --from-journal`.

    Args:
        units: {id, kind, model, cohort, notes} per unit; cohort "" for a unit that never started.
        outcomes: case records ({unit, index, attempt, workload, status, digest, seconds, error, …}).
        interrupted: "SIGINT", "SIGTERM", "journal" (rebuilt after the run was killed) or None.
        golden: with `--golden`, cohort -> the golden's entry for this plan and cohort (None: it has none).
        telemetry: the telemetry summary; telemetry_findings: what it shows, as findings.
    """
    # A unit that never started has no cohort of its own; it is judged invalid, alone.
    cohort_of = {u["id"]: u["cohort"] or f"unstarted:{u['id']}" for u in units}
    main = [CaseResult.of(o) for o in outcomes if o.get("attempt", 0) == 0]
    reruns: dict[tuple[str, int], list[str | None]] = {}
    for o in outcomes:
        if o.get("attempt", 0) > 0:
            reruns.setdefault((o["unit"], o["index"]), []).append(
                o.get("digest") if o["status"] == STATUS_OK else None
            )
    checks = None if golden is None else _golden_checks(golden, cohort_of, main)
    held = held_thresholds(outcomes)
    # A unit the runner stopped keeps that reason; one whose calibration its peers do not share is invalid.
    problems = {**out_of_line(cohort_of, held), **problems}
    judgement = judge(
        cohort_of, main, retests=reruns, problems=problems, interrupted=interrupted is not None, golden=checks
    )
    report = host_report(
        run=run,
        host=host,
        software=software,
        cohorts=cohorts,
        units=[
            {
                **u,
                "cohort": cohort_of[u["id"]],
                "calibration": [h.to_dict() for _, h in sorted(held.get(u["id"], {}).items())],
            }
            for u in units
        ],
        outcomes=outcomes,
        judgement=judgement,
        exit_code=EXIT_TERMINATED if interrupted == "SIGTERM" else None,
        telemetry=telemetry or {},
        extra_findings=telemetry_findings or [],
    )
    return report


def _golden_checks(
    golden: Mapping[str, GoldenEntry | None], cohort_of: Mapping[str, str], main: list[CaseResult]
) -> dict[str, GoldenCheck]:
    """unit -> its comparison with the golden entry of its cohort (only `ok` cases carry a digest)."""
    cases: dict[str, list[tuple[int, str | None, str]]] = defaultdict(list)
    for r in sorted(main, key=lambda r: r.index):
        cases[r.unit].append((r.index, r.digest if r.status == STATUS_OK else None, r.workload))
    return {u: check_golden(u, c, golden.get(c), cases[u]) for u, c in cohort_of.items()}


def host_report(
    *,
    run: Run,
    host: Host,
    software: dict[str, object],
    cohorts: dict[str, dict[str, object]],
    units: list[UnitFacts],
    outcomes: list[Outcome],
    judgement: Judgement,
    exit_code: int | None = None,
    telemetry: Telemetry | None = None,
    extra_findings: list[Finding] | None = None,
) -> Report:
    """Assemble a host's report from the judgement (through the one constructor, `build_report`).

    Args:
        run: the `run` object (id, profile, seed, …); started_at/ended_at already set.
        units: per unit {id, kind, model, cohort, notes}.
        outcomes: journal-style case records ({unit, index, attempt, workload, status, digest, seconds, ops,
            ops_unit, mismatches, error, injected}) of the main pass and re-runs.
    """
    main: defaultdict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.get("attempt", 0) == 0:
            main[o["unit"]].append(o)
    mismatches: list[Mismatch] = []
    unit_docs = []
    for u in units:
        uid = u["id"]
        cases = sorted(main[uid], key=lambda o: o["index"])
        unit_mm = [  # the checks' records (check, where, expected, actual, mask), journaled as they came
            cast(Mismatch, {"unit": uid, "index": o["index"], "workload": o["workload"], **m})
            for o in cases
            for m in o.get("mismatches") or []
        ]
        mismatches.extend(unit_mm[:MAX_MISMATCHES_PER_UNIT])
        unit_docs.append(_unit_doc(u, cases, judgement))
    mismatches += _golden_mismatches(judgement)
    notes = [finding("note", u["id"], note) for u in units for note in u.get("notes", [])]
    parts = {u["id"]: describe(u["kind"], u.get("part") or {}) for u in units}
    return build_report(
        tool={"name": "sdcscan", "version": __version__},
        verdict=judgement.verdict.value,
        exit_code=judgement.verdict.exit_code if exit_code is None else exit_code,
        run=run,
        host=host,
        software=software,
        cohorts=cohorts,
        units=unit_docs,
        mismatches=mismatches,
        disputes=[_dispute_doc(d) for d in judgement.disputes],
        errors=_errors(outcomes),
        telemetry=telemetry or {},
        findings=findings(judgement, run, parts) + notes + (extra_findings or []),
    )


def _errors(outcomes: list[Outcome]) -> list[CaseError]:
    """The first 100 cases whose workload raised."""
    errors: list[CaseError] = [
        {"unit": o["unit"], "index": o["index"], "workload": o["workload"], "error": o.get("error")}
        for o in outcomes
        if o.get("status") == STATUS_ERROR
    ]
    return errors[:100]


def _unit_doc(u: UnitFacts, cases: list[Outcome], judgement: Judgement) -> Unit:
    uid = u["id"]
    ops: defaultdict[str, float] = defaultdict(float)
    secs: defaultdict[str, float] = defaultdict(float)
    count: defaultdict[str, int] = defaultdict(int)
    units_of: dict[str, str] = {}
    phases: defaultdict[str, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
    plain: defaultdict[str, float | None] = defaultdict(float)  # seconds the plain ops would take, or None
    for o in cases:
        w = o["workload"]
        ops[w] += o.get("ops") or 0.0
        secs[w] += o.get("seconds") or 0.0
        count[w] += 1
        plain[w] = _plain_seconds(plain[w], o)
        units_of[w] = o.get("ops_unit") or "op"
        for name, seconds in (o.get("phases") or {}).items():
            if name in PHASES and isinstance(seconds, int | float):
                phases[w][name] += seconds
    golden = judgement.golden.get(uid)
    wrong = {d.index for d in golden.disagreements} if golden else set()
    # A case whose digest differs from the golden is a mismatch of this unit, like an invariant firing.
    statuses: list[StatusWord] = [
        STATUS_MISMATCH if o["index"] in wrong and o["status"] == STATUS_OK else o["status"] for o in cases
    ]
    bad = [o["index"] for o, s in zip(cases, statuses, strict=True) if s == STATUS_MISMATCH]
    verdict = judgement.unit_verdicts.get(uid)
    doc: Unit = {
        "id": uid,
        "kind": u["kind"],
        "model": u["model"],
        "cohort": u["cohort"],
        "verdict": verdict.value if verdict else "invalid",
        "reason": reason(judgement.reason(uid)),
        "cases_run": len(cases),
        "workloads": sorted(count),
        "throughput": {
            w: _throughput_doc(
                ops[w], secs[w], count[w], units_of[w], phases[w], (u.get("peaks") or {}).get(w), plain[w]
            )
            for w in sorted(count)
        },
        "checked": _checked_doc(cases, statuses, verdict.value if verdict else "invalid"),
        "mismatches": len(bad),
        "first_bad_case": bad[0] if bad else None,
        "notes": list(u.get("notes", [])) + _golden_notes(golden),
        "calibration": u.get("calibration", []),  # gemm_fp's e_max per (dtype, checker, K), for peers
        "retest": _retest_doc(judgement.retests.get(uid, [])),
        "cases": {
            "index": [o["index"] for o in cases],
            "workload": [o["workload"] for o in cases],
            "digest": [o.get("digest") for o in cases],
            "status": statuses,
            "seconds": [round(o.get("seconds") or 0.0, 3) for o in cases],
        },
    }
    pacing = u.get("pacing")
    if pacing:  # background mode only
        doc["pacing"] = pacing
    if u.get("pci"):
        doc["pci"] = u["pci"]
    if u.get("part"):
        doc["part"] = u["part"]
    return doc


def _plain_seconds(so_far: float | None, o: Outcome) -> float | None:
    """`so_far` plus the seconds the plain op of this case's own dtype and shape would take for its ops
    (the worker's `plain_ops_per_s`); None once a case has no such rate."""
    rate = (o.get("detail") or {}).get("plain_ops_per_s")
    if (
        so_far is None
        or isinstance(rate, bool)
        or not isinstance(rate, int | float)
        or not 0 < rate < math.inf
    ):
        return None
    return so_far + (o.get("ops") or 0.0) / rate


def _throughput_doc(
    ops: float,
    seconds: float,
    cases: int,
    ops_unit: str,
    phases: Mapping[str, float],
    peak: object,
    plain_s: float | None = None,
) -> Throughput:
    """One workload's rate on a unit, its plain-op peak and efficiency, and where its case time went.

    The peak is that of the cases that ran: their ops over the time the plain op of each case's own
    dtype and shape would take (`plain_s`), so a run that did only fp32 cases of matmul_golden is not
    held to a peak that mixes in bf16. Where a case has no such rate (a journal from before it was
    recorded), the workload's combined peak (peaks.rates.workload_peak, or None) stands in. Efficiency is
    achieved over peak, null when the peak is unknown. Shares are of the summed case seconds.
    """
    achieved = ops / seconds if seconds > 0 else 0.0
    rate = ops / plain_s if plain_s else peak.get("peak_ops_per_s") if isinstance(peak, dict) else None
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < math.inf:
        rate = None
    return {
        "ops_per_s": round(achieved, 1),
        "ops_unit": ops_unit,
        "cases": cases,
        "seconds": round(seconds, 4),
        "peak_ops_per_s": rate,
        "efficiency": None if rate is None else round(achieved / rate, 4),
        "shares": {p: round(phases.get(p, 0.0) / seconds, 4) if seconds > 0 else 0.0 for p in PHASES},
    }


def _checked_doc(cases: list[Outcome], statuses: list[StatusWord], verdict: str) -> dict[str, Checked]:
    """Per workload with coverage (its spec's `coverage`): the ops of the cases whose checks ran (ok or
    mismatch; a case that raised checked nothing), from the same `ops` the throughput sums, and the rate
    bound a pass proves. A workload gets no bound where a case lies outside its self-test's floor."""
    ops: defaultdict[str, float] = defaultdict(float)
    floored: dict[str, bool] = {}
    coverage: dict[str, Coverage] = {}
    for o, status in zip(cases, statuses, strict=True):
        w, detail = o["workload"], o.get("detail") or {}
        cov = SPECS[w].coverage if w in SPECS else None
        n = None if cov is None else cov.checked_ops(o.get("ops") or 0.0, detail)
        if cov is None or n is None or status == STATUS_ERROR:
            continue
        ops[w] += n
        coverage[w] = cov
        floored[w] = floored.get(w, True) and cov.holds_for(detail)
    out: dict[str, Checked] = {}
    for w in sorted(ops):
        cov, n = coverage[w], float(round(ops[w]))
        detection = cov.detection if floored[w] else None
        out[w] = {
            "checked_ops": n,
            "op": cov.op,
            "evidence": cov.evidence,
            "detection": detection,
            "sdc_rate_bound": proof.rate_bound(n, detection) if verdict == "pass" else None,
        }
    return out


def _dispute_doc(d: CohortDispute) -> Dispute:
    return {
        "index": d.index,
        "workload": d.workload,
        "cohort": d.cohort,
        "digests": dict(sorted(d.digests.items())),
        "majority": d.majority,
    }


def _retest_doc(records: list[Retest]) -> RetestDoc:
    """How the unit's failing cases behaved on re-run: summary, counts per classification, first records."""
    counts: dict[str, int] = {c: sum(r.classification == c for r in records) for c in CLASSIFICATIONS}
    return {
        "classification": unit_classification(records),
        "counts": counts,
        # Re-run cases first: they carry the evidence; untested ones are only counted beyond the cap.
        "cases": [r.to_dict() for r in sorted(records, key=lambda r: r.reruns == 0)[:MAX_RETEST_RECORDS]],
    }


def _golden_mismatches(judgement: Judgement) -> list[Mismatch]:
    """A `golden` mismatch record per case whose digest differs from the golden, units in order."""
    return [
        {
            "unit": unit,
            "index": d.index,
            "workload": d.workload,
            "check": "golden",
            "where": "digest",
            "expected": d.expected,
            "actual": d.actual,
            "mask": xor_mask(d.expected, d.actual),
        }
        for unit, check in judgement.golden.items()
        for d in check.disagreements
    ]


def _golden_notes(check: GoldenCheck | None) -> list[str]:
    if check is None or check.verdict == "unjudged":
        return []
    if not check.disagreements:
        return [f"golden: {check.cases_judged} case(s) judged, all agree"]
    first = check.disagreements[0]
    return [
        f"golden: {len(check.disagreements)} of {check.cases_judged} judged case(s) differ, "
        f"first case {first.index} ({first.workload})"
    ]


def xor_mask(expected: str, actual: str) -> str | None:
    """Hex XOR of two hex digests of equal length (which bits differ), else None."""
    try:
        if len(expected) == len(actual):
            return format(int(expected, 16) ^ int(actual, 16), f"0{len(expected)}x")
    except ValueError:
        pass
    return None
