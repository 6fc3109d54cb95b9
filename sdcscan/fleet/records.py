"""Light records the assembler builds from an engine's rows: reports without their cases, unit rows,
and the (plan, cohort) of a comparison group. Findings and coverage read these, not the rows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from sdcscan.fleet.engine import Rows
from sdcscan.fleet.model import HostReport, Invariant, PlanKey, Skipped, UnitRecord
from sdcscan.fleet.summary import Where

Group = tuple[PlanKey, str]  # (plan, cohort): comparison groups are judged in this order
REPORT_COLUMNS = (
    "report, host_key, hostname, machine_id, source, sha256, run_id, profile_name, profile_sha256, seed, "
    "ended_at, verdict"
)
# A REPORT_COLUMNS row: (report, host_key, hostname, machine_id, source, sha256, run_id, profile_name,
# profile_sha256, seed, ended_at, verdict).
ReportRow = tuple[int, str, str, "str | None", str, str, str, str, str, int, float, str]


class UnitRow(NamedTuple):
    """A row of `current_units`, as the assembler reads it (UNIT_COLUMNS)."""

    report: int
    unit: str
    cohort: str
    comparison_group: int
    verdict: str
    reason: str | None
    retest: str | None
    convicted: bool
    own_run_findings: list[str] | None
    digests: int
    invariant_mismatches: int | None
    invariant_first_case: int | None
    invariant_workloads: list[str] | None
    invariant_checks: list[str] | None
    part: str | None


UNIT_COLUMNS = ", ".join(UnitRow._fields)


class ReportBook:
    """Light `HostReport`s (no units) of kept reports by id, fetched from the engine as needed."""

    def __init__(self, db: Rows) -> None:
        self.db = db
        self.known: dict[int, HostReport] = {}

    def __getitem__(self, report: int) -> HostReport:
        return self.known[report]

    def fetch(self, ids: Iterable[int]) -> dict[int, HostReport]:
        """Make sure the reports `ids` are known; return every known one."""
        missing = {i for i in ids if i not in self.known}
        if missing:
            with self.db.wanted(missing) as wanted:
                columns = ", ".join(f"k.{c.strip()}" for c in REPORT_COLUMNS.split(","))
                rows = self.db.rows(
                    f"SELECT {columns} FROM keyed_reports k JOIN {wanted} w ON k.report = w.report"
                )
            self.known.update((row[0], host_report(row)) for row in rows)
        return self.known


def host_report(row: ReportRow, units: tuple[UnitRecord, ...] = ()) -> HostReport:
    """A `HostReport` from a REPORT_COLUMNS row, with `units` (none by default)."""
    (_, host_key, hostname, machine_id, source, sha256, run_id, profile, sha, seed, ended_at, verdict) = row
    return HostReport(
        source=source,
        sha256=sha256,
        host=hostname,
        run_id=run_id,
        plan=(sha, seed),
        ended_at=ended_at,
        verdict=verdict,
        units=units,
        machine_id=machine_id,
        profile=profile,
        machine_tag=machine_id if host_key != hostname else None,
    )


def with_units(r: HostReport, units: Sequence[UnitRecord]) -> HostReport:
    return replace(r, units=tuple(units))


def with_part(evidence: Mapping[str, object], unit: UnitRow | UnitRecord) -> dict[str, object]:
    """A unit finding's evidence with the physical part to replace, where its report named it."""
    return {**evidence, "part": unit.part} if unit.part else dict(evidence)


def bare_unit(unit: str, cohort: str) -> UnitRecord:
    """A unit record with nothing but its id and cohort."""
    return UnitRecord(unit, cohort, "pass", None, (), (), (), (), None)


def unit_record(row: UnitRow) -> UnitRecord:
    """A `UnitRecord` without cases: identity, verdict, reason, re-test class and invariant failures."""
    invariant = (
        None
        if row.invariant_mismatches is None
        else Invariant(
            row.invariant_mismatches,
            row.invariant_first_case,
            tuple(row.invariant_workloads or ()),
            tuple(row.invariant_checks or ()),
        )
    )
    return UnitRecord(
        row.unit, row.cohort, row.verdict, row.reason, (), (), (), (), invariant, row.retest, part=row.part
    )


def own_blame(row: UnitRow) -> tuple[str, ...]:
    """`HostReport.own_blame` of a unit row: its run's convicting finding kinds when its verdict is fail."""
    return tuple(row.own_run_findings or ()) if row.verdict == "fail" else ()


def own_run_record(r: HostReport, row: UnitRow, kinds: tuple[str, ...]) -> dict[str, object]:
    """How the unit's own run named it failing: the run, its finding kinds, reason and re-test class."""
    return {"run": r.run_id, "findings": list(kinds), "reason": row.reason, "retest": row.retest}


def where_of(group: Group) -> Where:
    (sha, seed), cohort = group
    return {"profile_sha256": sha, "seed": seed, "cohort": cohort}


def duplicates(db: Rows) -> list[Skipped]:
    """The copies of a report the steps dropped (`duplicate_reports`), each naming the copy kept."""
    out = []
    for source, sha, kept_source, kept_sha in db.rows(
        "SELECT source, sha256, kept_source, kept_sha256 FROM duplicate_reports"
    ):
        why = "identical content" if sha and sha == kept_sha else "same host and run id"
        out.append(Skipped(source, f"duplicate of {kept_source} ({why})"))
    return out
