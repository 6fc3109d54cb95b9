"""Small fleets for the compare and golden tests: each host's report is built by `tests.helpers.reports`."""

from __future__ import annotations

import hashlib
from typing import Any

from sdcscan.fleet.model import Extractor, HostReport
from tests.helpers.reports import build_report, build_unit

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
    checked: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A unit record: healthy digests for `cases` cases, overridden by `digests` and `statuses`.

    Args:
        ops: workload -> measured ops/s (one 0.1 s case each), for the performance-outlier tests.
        checked: the unit's `checked` (what its checks covered), if any.
    """
    dig: list[str | None] = [good(cohort, i, seed) for i in range(cases)]
    for i, d in (digests or {}).items():
        dig[i] = d
    st = ["ok"] * cases
    for i, s in (statuses or {}).items():
        st[i] = s
    tp = {
        w: {"ops_per_s": v, "ops_unit": "flop/s", "cases": 1, "seconds": 0.1} for w, v in (ops or {}).items()
    }
    return build_unit(
        uid,
        digests=dig,
        statuses=st,
        cohort=cohort,
        verdict=verdict,
        reason=reason,
        throughput=tp,
        mismatches=mismatches,
        checked=checked,
    )


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
    """One host's report of the test plan (`sha`, `seed`) around `units` (default: two healthy CPUs)."""
    units = units if units is not None else [unit("cpu:0", seed=seed), unit("cpu:1", seed=seed)]
    return build_report(
        units,
        hostname=host,
        run_id=run_id or f"{host}-run",
        seed=seed,
        profile_sha256=sha,
        started_at=ended_at,
        ended_at=ended_at,
        verdict=verdict,
        mismatches=mismatches,
    )


def extract(reports: list[dict[str, Any]]) -> list[HostReport]:
    """Extract reports as `sdcscan.fleet.reading` does (source = hostname.json)."""
    ex = Extractor()
    return [ex.extract(r, source=f"{r['host']['hostname']}.json") for r in reports]
