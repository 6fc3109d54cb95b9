"""Fold golden judgements into a report: failing units, `golden` mismatch records, findings, verdict.

Kept apart from golden.py so the report-editing rules (what a failing unit looks like, which finding
says what to do next) live in one small place. Pure: no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sdcscan.fleet.golden import Disagreement, UnitJudgement

VERDICT_ORDER = ("pass", "fail", "invalid", "interrupted")  # the run verdict is the worst of these
EXIT_CODES = {"pass": 0, "fail": 1, "invalid": 3, "interrupted": 130}


def worst(*verdicts: str) -> str:
    """The worst verdict: pass < fail < invalid < interrupted."""
    return max(verdicts, key=VERDICT_ORDER.index)


def xor_mask(expected: str, actual: str) -> str | None:
    """Hex XOR of two hex digests of equal length (which bits differ), else None."""
    try:
        if len(expected) == len(actual):
            return format(int(expected, 16) ^ int(actual, 16), f"0{len(expected)}x")
    except ValueError:
        pass
    return None


def fold_judgements(report: dict[str, Any], judgements: list[UnitJudgement]) -> dict[str, Any]:
    """Edit `report` in place with the judgements (see `golden.apply_golden`) and return it."""
    units = {u["id"]: u for u in report["units"]}
    run = report["run"]
    report.setdefault("mismatches", [])
    unjudged: dict[str, list[str]] = {}
    for j in judgements:
        unit = units[j.unit]
        if not j.judged or j.cases_judged == 0:
            unjudged.setdefault(j.cohort, []).append(j.unit)
        elif j.disagreements:
            _fail_unit(report, unit, j, run)
        else:
            unit.setdefault("notes", []).append(f"golden: {j.cases_judged} case(s) judged, all agree")
    for cohort, ids in sorted(unjudged.items()):
        report["findings"].append(_no_entry_finding(run, cohort, ids))
    verdict = worst(report["verdict"], *(u["verdict"] for u in report["units"]))
    report["verdict"] = verdict
    report["exit_code"] = EXIT_CODES[verdict]
    return report


def _fail_unit(report: dict[str, Any], unit: dict[str, Any], j: UnitJudgement, run: dict[str, Any]) -> None:
    """Mark one unit failing on the cases where it disagrees with the golden."""
    bad: dict[int, Disagreement] = {d.index: d for d in j.disagreements}
    cols = unit["cases"]
    for pos, idx in enumerate(cols["index"]):
        if idx in bad and cols["status"][pos] == "ok":
            cols["status"][pos] = "mismatch"
    for d in j.disagreements:
        report["mismatches"].append(
            {
                "unit": j.unit,
                "index": d.index,
                "workload": d.workload,
                "check": "golden",
                "where": "digest",
                "expected": d.expected,
                "actual": d.actual,
                "mask": xor_mask(d.expected, d.actual),
            }
        )
    first = j.disagreements[0]
    n = len(j.disagreements)
    unit["mismatches"] = int(unit.get("mismatches") or 0) + n
    prior = unit.get("first_bad_case")
    unit["first_bad_case"] = first.index if prior is None else min(prior, first.index)
    where = f"case {first.index} ({first.workload})"
    if unit["verdict"] == "pass":
        unit["reason"] = f"digest of {where} differs from the golden"
    unit["verdict"] = worst(unit["verdict"], "fail")
    note = f"golden: {n} of {j.cases_judged} judged case(s) differ, first {where}"
    unit.setdefault("notes", []).append(note)
    profile = run.get("profile", {}).get("name", "PROFILE")
    report["findings"].append(
        {
            "kind": "golden",
            "unit": j.unit,
            "message": f"{j.unit} disagrees with the golden on {n} of {j.cases_judged} case(s), "
            f"first {where}: silent data corruption suspected",
            "next": f"retest it: sdcscan run --profile {profile} --seed {run.get('seed')} --units {j.unit} "
            f"--workloads {first.workload} --golden GOLDEN; if it fails again, take {j.unit} out of service",
        }
    )


def _no_entry_finding(run: dict[str, Any], cohort: str, ids: list[str]) -> dict[str, Any]:
    """Say that the golden cannot judge these units (no failure: absence of evidence)."""
    sha = str(run.get("profile", {}).get("sha256", ""))[:12]
    names = ", ".join(sorted(ids)[:4]) + (", …" if len(ids) > 4 else "")
    return {
        "kind": "golden",
        "unit": ids[0] if len(ids) == 1 else None,
        "message": f"the golden cannot judge {len(ids)} unit(s) ({names}): it holds no case they ran for "
        f"this plan (profile {sha}…, seed {run.get('seed')}) and cohort {cohort}",
        "next": "record a golden from reports of the same profile, seed and hardware: "
        "sdcscan golden record REPORT… -o golden.json",
    }
