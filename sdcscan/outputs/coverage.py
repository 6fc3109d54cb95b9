"""Screening coverage from the run history: cases and seconds of cases each unit ran, per window or per day.

Ripple-style background screening runs short and often; what tells an operator (and an alert) that a
core is actually being screened is how much it ran lately, not the last run's verdict. Each recorded
run stores, per unit, its cases and the seconds its cases took (`unit_results.screened_s`, the sum of
the report's `units[].throughput[*].seconds`); this module sums them over the runs that ended in a
window. A run counts by its `ended_at`, in UTC. A version-1 history never recorded seconds: it has
no coverage (empty results, not an error), until the next run migrates it.
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TypeGuard

from typing_extensions import TypedDict

from sdcscan.errors import UsageError
from sdcscan.outcomes import unit_order
from sdcscan.outputs.history_db import reading
from sdcscan.outputs.history_schema import has_column
from sdcscan.timefmt import iso_utc, parse_iso_utc

DAY_S = 86400.0
# Runs are recorded after they end, so `recorded_at >= ended_at` but for clock steps; a day of slack
# lets SQLite skip old runs (recorded_at is always sdcscan's own sortable format, ended_at may not be).
_RECORDED_SLACK_S = DAY_S
_ROWS = (
    "SELECT r.id AS run, r.ended_at, u.unit, u.cases_run, u.screened_s FROM unit_results u "
    "JOIN runs r ON r.id = u.run WHERE r.recorded_at >= ?"
)


class UnitCoverage(TypedDict):
    """What one unit screened in a window: cases, the seconds they took, the runs they came from."""

    cases: int
    seconds: float
    runs: int


class DayCoverage(TypedDict):
    """What one unit screened on one UTC day."""

    day: str  # YYYY-MM-DD
    unit: str
    cases: int
    seconds: float
    runs: int


def screened_seconds(unit: Mapping[str, object]) -> float | None:
    """Seconds of cases a report's unit ran: the sum of its `throughput[*].seconds`; None when absent.

    Entries that are not finite, non-negative numbers are skipped (a hostile or damaged report).
    """
    throughput = unit.get("throughput")
    if not isinstance(throughput, Mapping):
        return None
    seconds = [t.get("seconds") for t in throughput.values() if isinstance(t, Mapping)]
    return float(sum(s for s in seconds if _is_amount(s)))


def background_flag(run: Mapping[str, object]) -> int | None:
    """1 for a background (Ripple) run, 0 for a run marked otherwise, None when the report does not say.

    `run.background` is a bool, or the background section (pacing, priority) a background run carries.
    """
    value = run.get("background")
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, Mapping):
        return 1
    return None


def coverage(
    db_path: str | os.PathLike[str], *, window_s: float = DAY_S, now: float | None = None
) -> dict[str, UnitCoverage]:
    """Per unit, what it screened in the runs that ended in the last `window_s` seconds. Read-only.

    Args:
        db_path: the history database; a missing one (or a version-1 one) has no coverage.
        window_s: the window's length, ending at `now`.
        now: the window's end, Unix time (default: the current time).

    Returns:
        `{unit: {"cases": int, "seconds": float, "runs": int}}`, units in natural order (cpu:2 before cpu:10).

    Raises:
        UsageError: `window_s` is not a positive number, or the database is unreadable, empty,
            foreign or of another version.
    """
    if not (isinstance(window_s, int | float) and math.isfinite(window_s) and window_s > 0):
        raise UsageError(f"coverage window must be a positive number of seconds, not {window_s!r}")
    end = time.time() if now is None else now
    with reading(db_path) as db:
        return {} if db is None else window_coverage(db, start=end - window_s, end=end)


def window_coverage(db: sqlite3.Connection, *, start: float, end: float) -> dict[str, UnitCoverage]:
    """`coverage` on an open reader, for runs that ended between `start` and `end` (Unix time)."""
    totals: dict[str, UnitCoverage] = {}
    for _, unit, cases, seconds in _unit_rows(db, start, end):
        t = totals.setdefault(unit, {"cases": 0, "seconds": 0.0, "runs": 0})
        t["cases"] += cases
        t["seconds"] += seconds
        t["runs"] += 1
    return {
        u: {**totals[u], "seconds": round(totals[u]["seconds"], 6)} for u in sorted(totals, key=unit_order)
    }


def coverage_by_day(
    db_path: str | os.PathLike[str], *, days: int = 7, now: float | None = None
) -> list[DayCoverage]:
    """Per UTC day and unit, what each unit screened, over today and the `days - 1` days before. Read-only.

    Args:
        db_path: the history database; a missing one (or a version-1 one) has no coverage.
        days: how many UTC calendar days, today (the day of `now`) included.
        now: Unix time of "today" (default: the current time).

    Returns:
        Rows `{"day": "YYYY-MM-DD", "unit", "cases", "seconds", "runs"}`, oldest day first, units in
        natural order; a day on which a unit ran nothing has no row.

    Raises:
        UsageError: `days` is not a positive integer, or the database is unreadable, empty, foreign
            or of another version.
    """
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise UsageError(f"coverage needs a positive whole number of days, not {days!r}")
    end = time.time() if now is None else now
    start = (end // DAY_S - (days - 1)) * DAY_S  # UTC midnight, `days - 1` days before today's
    with reading(db_path) as db:
        rows = [] if db is None else list(_unit_rows(db, start, end))
    per_day: dict[tuple[str, str], DayCoverage] = {}
    for ended, unit, cases, seconds in rows:
        day = datetime.fromtimestamp(ended, timezone.utc).strftime("%Y-%m-%d")
        r = per_day.setdefault((day, unit), {"day": day, "unit": unit, "cases": 0, "seconds": 0.0, "runs": 0})
        r["cases"] += cases
        r["seconds"] += seconds
        r["runs"] += 1
    ordered = sorted(per_day, key=lambda k: (k[0], unit_order(k[1])))
    return [{**per_day[k], "seconds": round(per_day[k]["seconds"], 6)} for k in ordered]  # no 4.000000001


def _unit_rows(db: sqlite3.Connection, start: float, end: float) -> list[tuple[float, str, int, float]]:
    """(ended_at as Unix time, unit, cases, seconds) of every unit of every run that ended in [start, end]."""
    if not has_column(db, "unit_results", "screened_s"):
        return []  # version 1: no seconds were recorded, so no coverage to state
    out = []
    for r in db.execute(_ROWS, (iso_utc(max(0.0, start - _RECORDED_SLACK_S)),)):
        try:
            ended = parse_iso_utc(r["ended_at"])
        except (ValueError, OverflowError):  # an interrupted run may have none; it cannot be placed
            continue
        if start <= ended <= end and isinstance(r["unit"], str):
            cases = r["cases_run"] if _is_amount(r["cases_run"]) else 0
            seconds = r["screened_s"] if _is_amount(r["screened_s"]) else 0.0
            out.append((ended, r["unit"], int(cases), float(seconds)))
    return out


def _is_amount(value: object) -> TypeGuard[int | float]:
    """A finite, non-negative number (not a bool), an integer within SQLite's 64 bits."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0 <= value < 2**63  # math.isfinite cannot even take a 5000-digit int
    return isinstance(value, float) and math.isfinite(value) and value >= 0
