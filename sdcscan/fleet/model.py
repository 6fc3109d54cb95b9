"""What `compare` keeps of a report: a compact, interned extract, so 10,000 reports fit in little memory.

A report's raw JSON is dropped as soon as it is extracted. Identical tuples (the case indices, the
digests of a healthy unit, the workload sequence) are shared between units through an `Interner`,
so a fleet of healthy units costs a few pointers per unit rather than a Python object per case.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sdcscan.errors import ReportError
from sdcscan.report import shown, validate_report
from sdcscan.timefmt import parse_iso_utc

PlanKey = tuple[str, int]  # (run.profile.sha256, run.seed): two units ran the same case i only within a plan


class Interner:
    """Return one shared object per distinct value (strings and tuples), like `sys.intern` for tuples."""

    def __init__(self) -> None:
        self._seen: dict[Any, Any] = {}

    def __call__(self, value: Any) -> Any:
        return self._seen.setdefault(value, value)

    def __contains__(self, value: Any) -> bool:
        return value in self._seen


@dataclass(frozen=True, slots=True)
class Invariant:
    """Invariant failures a report carries for one unit (ABFT, golden matmul, NaN/Inf, golden digest)."""

    mismatches: int
    first_case: int | None
    workloads: tuple[str, ...]
    checks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UnitRecord:
    """One unit of one report: identity, verdict, the digests it voted with, its throughput."""

    unit: str
    cohort: str
    verdict: str
    reason: str | None
    indices: tuple[int, ...]
    digests: tuple[str | None, ...]  # None where the case did not produce a comparable digest
    workloads: tuple[str, ...]
    throughput: tuple[tuple[str, float, str], ...]  # (workload, ops_per_s, ops_unit), sorted
    invariant: Invariant | None


@dataclass(frozen=True, slots=True)
class HostReport:
    """One usable report, reduced to what `compare` and goldens need."""

    source: str
    sha256: str
    host: str
    run_id: str
    plan: PlanKey
    ended_at: float  # POSIX seconds, UTC
    verdict: str
    units: tuple[UnitRecord, ...]


@dataclass(frozen=True, slots=True)
class Skipped:
    """An input that was not used, and why."""

    path: str
    reason: str


@dataclass(slots=True)
class Extractor:
    """Turns report dicts into `HostReport`s, sharing identical strings and tuples between them."""

    intern: Interner = field(default_factory=Interner)

    def extract(self, data: Any, *, source: str, sha256: str = "") -> HostReport:
        """Validate a parsed report and keep only what compare needs.

        Args:
            data: the parsed JSON document.
            source: where it came from (shown in `skipped` and evidence).
            sha256: hash of the file's bytes, to recognise identical copies.

        Raises:
            ReportError: the document is not a usable report; the message says why.
        """
        # Every field read below has its type once validate_report accepts the document.
        report = validate_report(data, label="report")
        run, hostname = report["run"], report["host"]["hostname"]
        if not hostname:
            raise ReportError("report: host.hostname is empty")
        invariants = _invariant_records(report.get("mismatches", []))
        units = tuple(self._unit(u, invariants.get(u["id"], [])) for u in report["units"])
        if len({u.unit for u in units}) != len(units):
            raise ReportError("report: a unit id appears twice")
        return HostReport(
            source=source,
            sha256=sha256,
            host=self.intern(hostname),
            run_id=run["id"],
            plan=self.intern((self.intern(run["profile"]["sha256"]), run["seed"])),
            ended_at=parse_time(run.get("ended_at")),
            verdict=report["verdict"],
            units=tuple(sorted(units, key=lambda u: u.unit)),
        )

    def _unit(self, unit: dict[str, Any], records: list[dict[str, Any]]) -> UnitRecord:
        cols = unit["cases"]
        indices, digests, workloads, statuses = (cols[c] for c in ("index", "digest", "workload", "status"))
        if len(set(indices)) != len(indices):
            indices, digests, workloads, statuses = _first_occurrences(indices, digests, workloads, statuses)
        st = tuple(statuses)
        if "mismatch" in st or "error" in st:
            # Only clean outcomes vote: a mismatch is already an invariant finding, an error judged nothing.
            digests = [d if s == "ok" else None for d, s in zip(digests, st, strict=True)]
        intern = self.intern
        return UnitRecord(
            unit=intern(unit["id"]),
            cohort=intern(unit["cohort"]),
            verdict=unit["verdict"],
            reason=unit.get("reason"),
            indices=intern(tuple(indices)),
            digests=self._shared(digests),
            workloads=self._shared(workloads),
            throughput=self._throughput(unit),
            invariant=_invariant(unit, st, workloads, indices, records),
        )

    def _shared(self, seq: list[Any]) -> tuple[Any, ...]:
        """The fleet's one copy of this sequence; its strings are shared too when it is new."""
        t = tuple(seq)
        if t in self.intern:  # the common case: a healthy unit, same outcome as many before it
            return self.intern(t)
        return self.intern(tuple(self.intern(x) for x in t))

    def _throughput(self, unit: dict[str, Any]) -> tuple[tuple[str, float, str], ...]:
        """(workload, ops/s, ops unit) per workload; validate_report made each a finite number and a string."""
        out = [
            (self.intern(workload), float(rec["ops_per_s"]), self.intern(rec["ops_unit"]))
            for workload, rec in unit.get("throughput", {}).items()
        ]
        return tuple(sorted(out))


def _first_occurrences(*cols: list[Any]) -> tuple[list[Any], ...]:
    """Keep the first record of each case index (a repeated index would vote twice)."""
    seen: set[int] = set()
    keep = []
    for i, idx in enumerate(cols[0]):
        if idx not in seen:
            seen.add(idx)
            keep.append(i)
    return tuple([c[i] for i in keep] for c in cols)


def _invariant_records(mismatches: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The report's top-level invariant-failure records, by unit."""
    by_unit: dict[str, list[dict[str, Any]]] = {}
    for rec in mismatches:
        by_unit.setdefault(rec["unit"], []).append(rec)
    return by_unit


def _invariant(
    unit: dict[str, Any],
    statuses: tuple[str, ...],
    workloads: list[str],
    indices: list[int],
    records: list[dict[str, Any]],
) -> Invariant | None:
    """Summarise a unit's invariant failures, from its count, its case statuses and the mismatch records."""
    bad = [i for i, s in enumerate(statuses) if s == "mismatch"] if "mismatch" in statuses else []
    count = max(unit["mismatches"], len(bad), len(records))
    if count <= 0:
        return None
    cases = [indices[i] for i in bad] + [r["index"] for r in records]
    wls = {workloads[i] for i in bad} | {r["workload"] for r in records}
    checks = {r["check"] for r in records}
    return Invariant(count, min(cases) if cases else None, tuple(sorted(wls)), tuple(sorted(checks)))


def parse_time(text: Any) -> float:
    """A report's `run.ended_at` -> POSIX seconds (`timefmt.parse_iso_utc`, with a report's error).

    Raises:
        ReportError: missing or not an ISO-8601 time.
    """
    if not isinstance(text, str):
        raise ReportError("report: run.ended_at is missing")
    try:
        return parse_iso_utc(text)
    except (ValueError, OverflowError):  # OverflowError: year 1 or 9999 moved out of range by its zone
        raise ReportError(f"report: run.ended_at {shown(text)} is not an ISO-8601 time") from None


def dedupe(reports: list[HostReport]) -> tuple[list[HostReport], list[Skipped]]:
    """Drop repeated reports: the same (hostname, run id) or byte-identical files.

    The survivor does not depend on input order: the newest, then the one with the most cases, then
    the smallest content hash, then the smallest path.

    Returns:
        (kept reports sorted by host, run id; skipped duplicates sorted by path)
    """

    def rank(r: HostReport) -> tuple[float, int, str, str]:
        return (-r.ended_at, -sum(len(u.indices) for u in r.units), r.sha256, r.source)

    kept: dict[tuple[str, str], HostReport] = {}
    by_hash: dict[str, HostReport] = {}
    skipped: list[Skipped] = []
    for r in sorted(reports, key=rank):
        twin = by_hash.get(r.sha256) if r.sha256 else None
        if twin is not None:
            skipped.append(Skipped(r.source, f"duplicate of {twin.source} (identical content)"))
            continue
        first = kept.get((r.host, r.run_id))
        if first is not None:
            skipped.append(Skipped(r.source, f"duplicate of {first.source} (same host and run id)"))
            continue
        kept[(r.host, r.run_id)] = r
        if r.sha256:
            by_hash[r.sha256] = r
    ordered = sorted(kept.values(), key=lambda r: (r.host, r.run_id))
    return ordered, sorted(skipped, key=lambda s: (s.path, s.reason))
