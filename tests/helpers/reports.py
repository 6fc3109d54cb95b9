"""The one factory of hand-built reports: `build_unit` and `build_report`, plus the outputs' usual two-unit report.

What it builds satisfies sdcscan/report.schema.json (tests/test_recorded_report.py checks that with
jsonschema), so readers and writers are tested against the shape `sdcscan run` produces, not against a
convenient subset. A report recorded from a real run lives in tests/data/report_v1.json.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

WORKLOADS = ("train", "matmul_golden")  # case i runs WORKLOADS[i % 2], as the quick profile's plan does
VERDICT_EXIT = {"pass": 0, "fail": 1, "invalid": 3, "interrupted": 130}
_SEVERITY = ("pass", "fail", "invalid", "interrupted")  # the worst unit verdict is the run's


def case_workloads(n_cases: int) -> list[str]:
    """The workload of each of the first `n_cases` cases."""
    return [WORKLOADS[i % len(WORKLOADS)] for i in range(n_cases)]


def build_unit(
    uid: str,
    *,
    digests: Sequence[str | None],
    statuses: Sequence[str] | None = None,
    seconds: float = 0.1,
    cohort: str = "c1",
    model: str = "Test CPU",
    verdict: str = "pass",
    reason: str | None = None,
    throughput: dict[str, dict[str, Any]] | None = None,
    mismatches: int = 0,
    first_bad_case: int | None = None,
    checked: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A unit record that ran one case per digest (None: the case left no digest).

    Args:
        uid: unit id, `kind:index`; the kind is its prefix.
        statuses: each case's status (default all `ok`).
        seconds: every case's duration.
        throughput: workload -> {ops_per_s, ops_unit, cases, seconds} (default: none measured).
        checked: workload -> {checked_ops, op, evidence, detection, sdc_rate_bound} (default: absent, as
            in reports written before sdcscan.proof).
    """
    n = len(digests)
    workload = case_workloads(n)
    return {
        "id": uid,
        "kind": uid.split(":")[0],
        "model": model,
        "cohort": cohort,
        "verdict": verdict,
        "reason": reason,
        "cases_run": n,
        "workloads": sorted(set(workload)),
        "throughput": throughput or {},
        "mismatches": mismatches,
        "first_bad_case": first_bad_case,
        **({"checked": checked} if checked is not None else {}),
        "notes": [],
        "cases": {
            "index": list(range(n)),
            "workload": workload,
            "digest": list(digests),
            "status": list(statuses) if statuses is not None else ["ok"] * n,
            "seconds": [seconds] * n,
        },
    }


def build_report(
    units: list[dict[str, Any]],
    *,
    hostname: str = "node-a",
    run_id: str = "20250101T000000Z-abcd",
    seed: int = 7,
    profile_sha256: str = "ab" * 32,
    started_at: str = "2025-01-01T00:00:00Z",
    ended_at: str = "2025-01-01T00:01:00Z",
    duration_s: float = 60.0,
    argv: Sequence[str] = ("sdcscan", "run"),
    software: dict[str, Any] | None = None,
    verdict: str | None = None,
    mismatches: list[dict[str, Any]] | None = None,
    findings: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A whole report (schema version 1, quick profile, 60 s budget) around `units`.

    Args:
        verdict: the run's verdict (default: the worst of the units', pass when there are none).
    """
    v = verdict or max((u["verdict"] for u in units), key=_SEVERITY.index, default="pass")
    return {
        "schema_version": 1,
        "tool": {"name": "sdcscan", "version": "0.1.0"},
        "verdict": v,
        "exit_code": VERDICT_EXIT[v],
        "run": {
            "id": run_id,
            "profile": {"name": "quick", "sha256": profile_sha256},
            "seed": seed,
            "seed_source": "cli",
            "budget_s": 60.0,
            "started_at": started_at,
            "ended_at": ended_at,
            "duration_s": duration_s,
            "argv": list(argv),
            "workloads": list(WORKLOADS),
            "injections": [],
        },
        "host": {"hostname": hostname},
        "software": software or {},
        "cohorts": {u["cohort"]: {"model": u["model"]} for u in units},
        "units": units,
        "mismatches": mismatches or [],
        "telemetry": {},
        "findings": findings or [],
    }


def _throughput(workloads: list[str], seconds: float) -> dict[str, dict[str, Any]]:
    """1.5 GFLOP/s for every workload that ran."""
    return {
        wl: {
            "ops_per_s": 1.5e9,
            "ops_unit": "flop",
            "cases": workloads.count(wl),
            "seconds": seconds * workloads.count(wl),
        }
        for wl in sorted(set(workloads))
    }


def _two_unit(
    uid: str, verdict: str, reason: str | None, n_cases: int, bad: set[int], *, checked: bool = False
) -> dict[str, Any]:
    seconds = 0.25
    return build_unit(
        uid,
        digests=[None if i in bad else f"{i:016x}" for i in range(n_cases)],
        statuses=["mismatch" if i in bad else "ok" for i in range(n_cases)],
        seconds=seconds,
        cohort="c0ffee",
        model="Test CPU @ 2.4GHz",
        verdict=verdict,
        reason=reason,
        throughput=_throughput(case_workloads(n_cases), seconds),
        mismatches=2 * len(bad),
        first_bad_case=min(bad) if bad else None,
        checked=_checked(case_workloads(n_cases), verdict) if checked else None,
    )


def _checked(workloads: list[str], verdict: str) -> dict[str, dict[str, Any]]:
    """2e9 multiply-adds per case: matmul_golden checked at detection 1 (bounded when the unit passed), train
    covered by digests (never bounded)."""
    out: dict[str, dict[str, Any]] = {}
    for wl in sorted(set(workloads)):
        n = 2e9 * workloads.count(wl)
        golden = wl == "matmul_golden"
        out[wl] = {
            "checked_ops": n,
            "op": "multiply-add",
            "evidence": "invariant" if golden else "digest",
            "detection": 1.0 if golden else None,
            "sdc_rate_bound": 3.0 / n if golden and verdict == "pass" else None,
        }
    return out


def make_report(
    *,
    fail_unit: str | None = "cpu:1",
    invalid_unit: str | None = None,
    run_id: str = "20250101T000000Z-abcd",
    ended_at: str = "2025-01-01T00:01:00Z",
    hostname: str = "node-a",
    checked: bool = False,
) -> dict[str, Any]:
    """Two-unit report (cpu:0, cpu:1) for the outputs' tests: JUnit, Prometheus, history, the CLI.

    `fail_unit` has golden mismatches in matmul_golden (cases 3 and 5), `invalid_unit` ran no case;
    `checked` adds each unit's `checked` (what its checks covered, the bound a pass proves).
    """
    units = []
    for uid in ("cpu:0", "cpu:1"):
        if uid == fail_unit:
            reason = "invariant failed in 2 case(s), first case 3 (matmul_golden)"
            units.append(_two_unit(uid, "fail", reason, 8, bad={3, 5}, checked=checked))
        elif uid == invalid_unit:
            units.append(_two_unit(uid, "invalid", "worker died (signal 9)", 0, bad=set()))
        else:
            units.append(_two_unit(uid, "pass", None, 8, bad=set(), checked=checked))
        core = int(uid.split(":")[1])  # the physical part (issue 45), as `sdcscan.parts.cpu_part` reads it
        units[-1]["part"] = {"socket": 0, "core": core, "smt_siblings": [core], "microcode": "0x2b000590"}
    mismatches = [
        {"unit": fail_unit, "index": i, "workload": "matmul_golden", "check": "golden_fp32",
         "where": f"[{j}, 7]", "expected": "0x41200000", "actual": "0x41200400", "mask": "0x00000400"}
        for i in (3, 5) for j in (0, 1)
    ] if fail_unit else []  # fmt: skip
    findings = [
        {"kind": "invariant", "unit": fail_unit, "message": f"{fail_unit} computed wrong results.",
         "next": f"sdcscan run --units {fail_unit} --seed 7"}
    ] if fail_unit else []  # fmt: skip
    return build_report(
        units,
        hostname=hostname,
        run_id=run_id,
        ended_at=ended_at,
        duration_s=60.2,
        argv=("sdcscan", "run", "--seed", "7"),
        software={"python": "3.11"},
        mismatches=mismatches,
        findings=findings,
    )
