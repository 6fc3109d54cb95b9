"""Goldens: the fleet's consensus digest per (plan, cohort, case), so one host can be judged with no peers.

`record` keeps only cases with a clear (strict) majority and lists the rest as refused; `check_report`
compares a report's units with the golden of the same plan and cohort (`sdcscan.verdict.check_golden`,
the comparison `sdcscan run --golden` weighs as evidence). No I/O except `load_golden`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from sdcscan import __version__
from sdcscan.errors import ReportError, UsageError
from sdcscan.evidence import GoldenCheck, GoldenEntry, check_golden
from sdcscan.files import read_json
from sdcscan.fleet.consensus import signature, tally
from sdcscan.fleet.model import Extractor, HostReport, PlanKey, UnitRecord, dedupe

GOLDEN_VERSION = 1
MAX_GOLDEN_BYTES = 256 << 20

GoldenIndex = dict[tuple[PlanKey, str], GoldenEntry]  # (plan, cohort) -> entry


class GoldenError(UsageError):
    """A golden file is unreadable or not a golden: exit 2, the message says why."""


def record(reports: Iterable[dict[str, Any]], *, min_votes: int = 1) -> dict[str, Any]:
    """Build a golden from parsed reports: the strict-majority digest per (plan, cohort, case).

    Args:
        reports: parsed report documents (duplicates of one host and run are counted once).
        min_votes: fewest units that must have produced the winning digest for a case to be recorded.

    Raises:
        ReportError: a document is not a usable report.
    """
    ex = Extractor()
    kept, _ = dedupe([ex.extract(r, source=f"report {n}") for n, r in enumerate(reports)])
    return record_extracted(kept, min_votes=min_votes)


def record_extracted(reports: list[HostReport], *, min_votes: int = 1) -> dict[str, Any]:
    """Like `record`, from extracted, de-duplicated reports (what `sdcscan golden record` reads)."""
    groups: dict[tuple[PlanKey, str], dict[Any, list[UnitRecord]]] = {}
    for r in reports:
        for u in r.units:
            groups.setdefault((r.plan, u.cohort), {}).setdefault(signature(u), []).append(u)
    entries, refused = [], []
    for (plan, cohort), sigs in sorted(groups.items()):
        t = tally((s, len(units)) for s, units in sigs.items())
        workload = _workloads(sigs)
        counts = _winning_votes(sigs, t.majority)
        cols: dict[str, list[Any]] = {"index": [], "workload": [], "digest": [], "votes": [], "voters": []}
        for i in sorted(t.voters):
            where = {"profile_sha256": plan[0], "seed": plan[1], "cohort": cohort, "index": i}
            if i in t.undecided:
                voters, distinct = t.undecided[i]
                reason = f"no strict majority among {voters} units ({distinct} different digests)"
                refused.append({**where, "workload": workload[i], "reason": reason})
            elif counts[i] < min_votes:
                reason = f"only {counts[i]} unit(s) produced it; at least {min_votes} required"
                refused.append({**where, "workload": workload[i], "reason": reason})
            else:
                for key, value in (
                    ("index", i),
                    ("workload", workload[i]),
                    ("digest", t.majority[i]),
                    ("votes", counts[i]),
                    ("voters", t.voters[i]),
                ):
                    cols[key].append(value)
        if cols["index"]:
            units = sum(len(v) for v in sigs.values())
            entries.append(
                {"profile_sha256": plan[0], "seed": plan[1], "cohort": cohort, "units": units, "cases": cols}
            )
    return {
        "golden_version": GOLDEN_VERSION,
        "tool": {"name": "sdcscan", "version": __version__},
        "reports": len(reports),
        "entries": entries,
        "refused": refused,
    }


def _workloads(sigs: dict[Any, list[UnitRecord]]) -> dict[int, str]:
    """Case index -> workload; within a plan every unit ran the same workload for a given index."""
    out: dict[int, str] = {}
    for units in sigs.values():
        u = units[0]
        for i, w in zip(u.indices, u.workloads, strict=True):
            out.setdefault(i, w)
    return out


def _winning_votes(sigs: dict[Any, list[UnitRecord]], majority: dict[int, str]) -> dict[int, int]:
    """Case index -> number of units that produced the majority digest."""
    votes: dict[int, int] = {}
    for (indices, digests), units in sigs.items():
        for i, d in zip(indices, digests, strict=True):
            if d is not None and majority.get(i) == d:
                votes[i] = votes.get(i, 0) + len(units)
    return votes


def validate_golden(data: Any, *, label: str = "golden") -> dict[str, Any]:
    """Check a golden document's structure; return it unchanged.

    Raises:
        GoldenError: not a golden of a version this sdcscan reads, or malformed.
    """
    if not isinstance(data, dict) or "golden_version" not in data:
        raise GoldenError(
            f"{label}: not a golden file (no golden_version); make one with `sdcscan golden record`"
        )
    if data["golden_version"] != GOLDEN_VERSION:
        raise GoldenError(
            f"{label}: golden_version {data['golden_version']!r} is not supported "
            f"(this sdcscan reads {GOLDEN_VERSION})"
        )
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise GoldenError(f"{label}: malformed golden (entries is not a list)")
    for e in entries:
        ok = isinstance(e, dict) and isinstance(e.get("profile_sha256"), str)
        ok = ok and _is_int(e.get("seed")) and isinstance(e.get("cohort"), str)
        cols = e.get("cases") if ok else None
        if not isinstance(cols, dict) or any(
            not isinstance(cols.get(c), list) for c in ("index", "workload", "digest")
        ):
            raise GoldenError(f"{label}: malformed golden entry")
        if not len(cols["index"]) == len(cols["workload"]) == len(cols["digest"]):
            raise GoldenError(f"{label}: golden entry with case columns of different lengths")
        # Indices are dict keys and digests are compared with a report's: wrong types would raise later.
        if not all(map(_is_int, cols["index"])) or not all(
            isinstance(x, str) for x in (*cols["workload"], *cols["digest"])
        ):
            raise GoldenError(
                f"{label}: malformed golden entry (a case index, workload or digest of the wrong type)"
            )
    return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def load_golden(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a golden file.

    Raises:
        GoldenError: unreadable, too large, not JSON, or not a golden; the message names the file.
    """
    try:
        data = read_json(path, what="golden", max_bytes=MAX_GOLDEN_BYTES)
    except ReportError as err:
        raise GoldenError(str(err)) from None  # a bad --golden is a usage error (exit 2)
    return validate_golden(data, label=str(path))


def index_golden(golden: dict[str, Any]) -> GoldenIndex:
    """(plan, cohort) -> {case index: (digest, workload)} for fast lookups."""
    out: GoldenIndex = {}
    for e in validate_golden(golden)["entries"]:
        c = e["cases"]
        out[((e["profile_sha256"], e["seed"]), e["cohort"])] = {
            i: (d, w) for i, d, w in zip(c["index"], c["digest"], c["workload"], strict=True)
        }
    return out


def check_report(report: dict[str, Any], golden: dict[str, Any]) -> list[GoldenCheck]:
    """Compare every unit of a report with the golden of the same plan and cohort.

    Args:
        report: a parsed report (schema version 1).
        golden: a golden document (`record` or `load_golden`).

    Returns:
        One judgement per unit, sorted by unit id.

    Raises:
        ReportError: the report is not usable. GoldenError: the golden is malformed.
    """
    slim = Extractor().extract(report, source="report")
    index = index_golden(golden)
    return [check_unit(u, index.get((slim.plan, u.cohort))) for u in slim.units]


def check_unit(unit: UnitRecord, entry: GoldenEntry | None) -> GoldenCheck:
    """One unit of a report against the golden entry of its plan and cohort (None: the golden has none)."""
    cases = zip(unit.indices, unit.digests, unit.workloads, strict=True)
    return check_golden(unit.unit, unit.cohort, entry, cases)
