"""Small, schema-valid reports for fleet and golden tests (imported by the test modules)."""

from __future__ import annotations

import hashlib
from typing import Any

from sdcscan.fleet.model import Extractor, HostReport

PLAN_SHA = hashlib.sha256(b"test profile").hexdigest()
SEED = 7


def good(cohort: str, i: int, seed: int = SEED) -> str:
    """The digest every healthy unit of `cohort` produces for case `i`."""
    return hashlib.blake2b(f"{cohort}:{seed}:{i}".encode(), digest_size=8).hexdigest()


def unit(
    uid: str = "cpu:0",
    *,
    cohort: str = "c1",
    cases: int = 4,
    digests: dict[int, str | None] | None = None,
    statuses: dict[int, str] | None = None,
    ops: dict[str, float] | None = None,
    verdict: str = "pass",
    reason: str | None = None,
    mismatches: int = 0,
    seed: int = SEED,
) -> dict[str, Any]:
    """A unit record: healthy digests for `cases` cases, overridden by `digests` and `statuses`."""
    dig: list[str | None] = [good(cohort, i, seed) for i in range(cases)]
    for i, d in (digests or {}).items():
        dig[i] = d
    st = ["ok"] * cases
    for i, s in (statuses or {}).items():
        st[i] = s
    wl = ["train" if i % 2 == 0 else "matmul_golden" for i in range(cases)]
    tp = {
        w: {"ops_per_s": v, "ops_unit": "flop/s", "cases": 1, "seconds": 0.1} for w, v in (ops or {}).items()
    }
    return {
        "id": uid,
        "kind": uid.split(":")[0],
        "model": "Test CPU",
        "cohort": cohort,
        "verdict": verdict,
        "reason": reason,
        "cases_run": cases,
        "workloads": sorted(set(wl)),
        "throughput": tp,
        "mismatches": mismatches,
        "first_bad_case": None,
        "notes": [],
        "cases": {
            "index": list(range(cases)),
            "workload": wl,
            "digest": dig,
            "status": st,
            "seconds": [0.1] * cases,
        },
    }


def report(
    host: str,
    units: list[dict[str, Any]] | None = None,
    *,
    seed: int = SEED,
    sha: str = PLAN_SHA,
    run_id: str | None = None,
    ended_at: str = "2025-06-01T00:00:00Z",
    verdict: str | None = None,
    mismatches: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A whole report (schema version 1) around `units` (default: two healthy CPUs)."""
    units = units if units is not None else [unit("cpu:0", seed=seed), unit("cpu:1", seed=seed)]
    order = ("pass", "fail", "invalid", "interrupted")
    v = verdict or max((u["verdict"] for u in units), key=order.index, default="pass")
    return {
        "schema_version": 1,
        "tool": {"name": "sdcscan", "version": "0.1.0"},
        "verdict": v,
        "exit_code": {"pass": 0, "fail": 1, "invalid": 3, "interrupted": 130}[v],
        "run": {
            "id": run_id or f"{host}-run",
            "profile": {"name": "quick", "sha256": sha},
            "seed": seed,
            "seed_source": "cli",
            "budget_s": 60.0,
            "started_at": ended_at,
            "ended_at": ended_at,
            "duration_s": 60.0,
            "argv": ["sdcscan", "run"],
            "workloads": ["train", "matmul_golden"],
            "injections": [],
        },
        "host": {"hostname": host},
        "software": {},
        "cohorts": {u["cohort"]: {} for u in units},
        "units": units,
        "mismatches": mismatches or [],
        "findings": [],
    }


def extract(reports: list[dict[str, Any]]) -> list[HostReport]:
    """Extract reports as `fleet_io` would (source = hostname.json)."""
    ex = Extractor()
    return [ex.extract(r, source=f"{r['host']['hostname']}.json") for r in reports]
