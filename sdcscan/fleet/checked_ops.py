"""What the checks of a fleet's passing units covered, per (profile, cohort, workload), and the bound that
proves: the `checked` key of `compare --json` (the sums are the SQL's: `fleet.sql_steps.CHECKED_OPS`).

The cohort's bound is the rule of three over all its passing units' checked ops (`sdcscan.proof`): it says
how rarely a unit of that cohort can silently miscompute, on average over those units, if they fail
independently; a single unit's own bound is in its report.
"""

from __future__ import annotations

from typing_extensions import TypedDict

from sdcscan import proof
from sdcscan.fleet.engine import Rows
from sdcscan.fleet.sql_steps import CHECKED_OPS
from sdcscan.fleet.tables import CHECKED_SPLIT


class CheckedCohort(TypedDict):
    """One (profile, cohort, workload): its passing units, their checked ops and the bound they prove."""

    profile: str
    profile_sha256: str
    cohort: str
    workload: str
    op: str
    units: int
    checked_ops: float
    detection: float | None  # the lowest of its units'; null when any unit gave none
    sdc_rate_bound: float | None


def checked_cohorts(db: Rows) -> tuple[CheckedCohort, ...]:
    """The rows of `db`'s current reports, ordered by profile hash, cohort and workload."""
    out: list[CheckedCohort] = []
    for sha, profile, cohort, workload, op, units, high, low, detected, rows, low_d in db.rows(CHECKED_OPS):
        n = float(
            int(high) * CHECKED_SPLIT + int(low)
        )  # exact integers: the same float whatever the row order
        detection = float(low_d) if low_d is not None and detected == rows else None
        out.append(
            {
                "profile": profile,
                "profile_sha256": sha,
                "cohort": cohort,
                "workload": workload,
                "op": op,
                "units": int(units),
                "checked_ops": n,
                "detection": detection,
                "sdc_rate_bound": proof.rate_bound(n, detection),
            }
        )
    return tuple(sorted(out, key=lambda c: (c["profile_sha256"], c["cohort"], c["workload"])))
