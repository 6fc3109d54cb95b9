"""A realistic report dict, built by hand, for the tests of the outputs (JUnit, Prometheus, history, CLI).

It satisfies sdcscan/report.schema.json (test_prom checks that with jsonschema), so the writers are
tested against the shape `sdcscan run` produces, not against a convenient subset.
"""

from __future__ import annotations

from typing import Any

WORKLOADS = ("train", "matmul_golden")
VERDICT_EXIT = {"pass": 0, "fail": 1, "invalid": 3, "interrupted": 130}


def _unit(uid: str, verdict: str, reason: str | None, n_cases: int, bad: set[int]) -> dict[str, Any]:
    index = list(range(n_cases))
    workload = [WORKLOADS[i % 2] for i in index]
    status = ["mismatch" if i in bad else "ok" for i in index]
    seconds = [0.25] * n_cases
    return {
        "id": uid,
        "kind": "cpu",
        "model": "Test CPU @ 2.4GHz",
        "cohort": "c0ffee",
        "verdict": verdict,
        "reason": reason,
        "cases_run": n_cases,
        "workloads": sorted({workload[i] for i in index}),
        "throughput": {
            wl: {
                "ops_per_s": 1.5e9,
                "ops_unit": "flop",
                "cases": workload.count(wl),
                "seconds": 0.25 * workload.count(wl),
            }
            for wl in sorted(set(workload))
        },
        "mismatches": 2 * len(bad),
        "first_bad_case": min(bad) if bad else None,
        "notes": [],
        "cases": {
            "index": index,
            "workload": workload,
            "digest": [None if i in bad else f"{i:016x}" for i in index],
            "status": status,
            "seconds": seconds,
        },
    }


def make_report(
    *,
    fail_unit: str | None = "cpu:1",
    invalid_unit: str | None = None,
    run_id: str = "20250101T000000Z-abcd",
    ended_at: str = "2025-01-01T00:01:00Z",
    hostname: str = "node-a",
) -> dict[str, Any]:
    """Two-unit report; `fail_unit` has golden mismatches in matmul_golden, `invalid_unit` ran no case."""
    units = []
    for uid in ("cpu:0", "cpu:1"):
        if uid == fail_unit:
            reason = "invariant failed in 2 case(s), first case 3 (matmul_golden)"
            units.append(_unit(uid, "fail", reason, 8, bad={3, 5}))
        elif uid == invalid_unit:
            units.append(_unit(uid, "invalid", "worker died (signal 9)", 0, bad=set()))
        else:
            units.append(_unit(uid, "pass", None, 8, bad=set()))
    verdicts = [u["verdict"] for u in units]
    verdict = "invalid" if "invalid" in verdicts else "fail" if "fail" in verdicts else "pass"
    mismatches = [
        {"unit": fail_unit, "index": i, "workload": "matmul_golden", "check": "golden_fp32",
         "where": f"[{j}, 7]", "expected": "0x41200000", "actual": "0x41200400", "mask": "0x00000400"}
        for i in (3, 5) for j in (0, 1)
    ] if fail_unit else []  # fmt: skip
    findings = [
        {"kind": "invariant", "unit": fail_unit, "message": f"{fail_unit} computed wrong results.",
         "next": f"sdcscan run --units {fail_unit} --seed 7"}
    ] if fail_unit else []  # fmt: skip
    return {
        "schema_version": 1,
        "tool": {"name": "sdcscan", "version": "0.1.0"},
        "verdict": verdict,
        "exit_code": VERDICT_EXIT[verdict],
        "run": {
            "id": run_id,
            "profile": {"name": "quick", "sha256": "ab" * 32},
            "seed": 7,
            "seed_source": "cli",
            "budget_s": 60.0,
            "started_at": "2025-01-01T00:00:00Z",
            "ended_at": ended_at,
            "duration_s": 60.2,
            "argv": ["sdcscan", "run", "--seed", "7"],
            "workloads": list(WORKLOADS),
            "injections": [],
        },
        "host": {"hostname": hostname},
        "software": {"python": "3.11"},
        "cohorts": {"c0ffee": {"model": "Test CPU @ 2.4GHz"}},
        "units": units,
        "mismatches": mismatches,
        "telemetry": {},
        "findings": findings,
    }
