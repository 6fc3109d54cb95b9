"""The one assembler: an engine's rows (its steps run) -> the `FleetSummary` that `compare` writes.

Every `compare` ends here, whatever its input (report files, a dataset) and whatever its engine (DuckDB,
Spark): the rows are the same, so the document is the same. Findings are added in a fixed order
(collisions, consensus, invariant, invalid, calibration, sentinel, slow, coverage); the collector sorts
them by kind, host and unit.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from itertools import groupby

from sdcscan.errors import ReportError
from sdcscan.fleet.calibration import calibration_findings
from sdcscan.fleet.checked_ops import checked_cohorts
from sdcscan.fleet.divergence import Divergence
from sdcscan.fleet.engine import Rows
from sdcscan.fleet.findings import KINDS, Collector
from sdcscan.fleet.host_coverage import FUTURE_SKEW_S, Covered, coverage_findings, future_findings
from sdcscan.fleet.model import HostReport, Interner, Skipped, Superseded, UnitRecord
from sdcscan.fleet.overview_rows import fleet_overview
from sdcscan.fleet.records import (
    REPORT_COLUMNS,
    UNIT_COLUMNS,
    Group,
    ReportBook,
    UnitRow,
    bare_unit,
    duplicates,
    host_report,
    unit_record,
    with_part,
    with_units,
)
from sdcscan.fleet.sentinel_steps import sentinel_findings
from sdcscan.fleet.slow import slow_findings
from sdcscan.fleet.sql_steps import COMPARISON_GROUPS, HOST_CALIBRATIONS, KEY_COLLISIONS
from sdcscan.fleet.summary import FleetSummary, Options, SupersededReport, options_record
from sdcscan.timefmt import iso_utc


def decide(db: Rows, opts: Options) -> FleetSummary:
    """The summary of the reports `db` holds (every step run), judged with `opts`.

    Raises:
        ReportError: two reports or comparison groups share a key, or two digests of a case do (exit 3).
    """
    return _Assembler(db, opts).summary()


class _Assembler:
    def __init__(self, db: Rows, opts: Options) -> None:
        self.db, self.opts = db, opts
        self.col = Collector()
        self.reports = ReportBook(db)
        self.groups: dict[int, Group] = {}  # comparison_group -> (plan, cohort)

    def summary(self) -> FleetSummary:
        db, opts = self.db, self.opts
        self._check_keys()
        current, hosts, units = db.rows(
            "SELECT COUNT(*), COUNT(DISTINCT host_key), COALESCE(SUM(units), 0) FROM current_reports"
        )[0]
        plans = db.rows("SELECT COUNT(*) FROM (SELECT DISTINCT profile_sha256, seed FROM current_reports) p")[
            0
        ][0]
        superseded = self._superseded()
        counts: dict[str, int] = {
            "reports": current,
            "superseded": len(superseded),
            "skipped": 0,
            "hosts": hosts,
            "units": int(units),
            "plans": plans,
        }
        self._collisions()
        partitions = Divergence(db, opts, self.col, self.reports, self.groups).add_findings(counts)
        self._invariants()
        self._invalid()
        calibration_findings(self._calibration_reports(), self.col)
        sentinel_findings(db, self.reports.fetch, self.col)
        slow_refs = slow_findings(db, opts, self.reports, self.col)
        # Coverage looks at every kept report of a host, superseded ones too: an older report of the same
        # plan still covers a host whose newest one is dated in the future or tested nothing.
        if opts.hosts is not None and opts.now is not None:
            reported = (host for (host,) in self.db.batches("SELECT DISTINCT hostname FROM keyed_reports"))
            by_host = ((host, list(group)) for host, group in groupby(self._covered(), _host_of))
            counts["unlisted_hosts"] = coverage_findings(
                reported, by_host, self.col, opts.hosts, now=opts.now, stale_s=opts.stale_s
            )
        elif opts.now is not None:
            future_findings(
                [c.report for c in self._covered(after=opts.now + FUTURE_SKEW_S)], self.col, now=opts.now
            )
        skipped = tuple(sorted(self._skipped(), key=lambda s: (s.path, s.reason)))
        counts["skipped"] = len(skipped)
        counts["partition_groups"] = len(partitions)
        findings = self.col.findings()
        counts.update({k: sum(1 for f in findings if f.kind == k) for k in KINDS})
        return FleetSummary(
            findings,
            tuple(partitions),
            skipped,
            counts,
            options_record(opts),
            tuple(_superseded_record(s) for s in superseded),
            opts.fail_on_undecided,
            fleet_overview(db, opts, findings, slow_refs) if opts.overview else None,
            checked_cohorts(db),
        )

    # -- reports ------------------------------------------------------------------------------------

    def _check_keys(self) -> None:
        """Two reports with one id, or two groups with one key, would merge: refuse rather than guess."""
        twice = self.db.rows("SELECT report FROM reports GROUP BY report HAVING COUNT(*) > 1 LIMIT 1")
        if twice:
            raise ReportError(
                f"the dataset holds two reports with id {twice[0][0]}; ingest into a new directory"
            )
        for key, sha, seed, cohort, names in self.db.rows(COMPARISON_GROUPS):
            if names > 3:  # one profile, one seed, one cohort
                raise ReportError(
                    f"the dataset holds two comparison groups with key {key}; ingest into a new directory"
                )
            self.groups[key] = ((sha, seed), cohort)
        if self.db.rows(KEY_COLLISIONS)[0][0]:
            raise ReportError(
                "the dataset holds two digests of one case with the same key; it cannot be compared"
            )

    def _superseded(self) -> list[Superseded]:
        pairs = self.db.rows("SELECT report, current_report FROM superseded_reports")
        known = self.reports.fetch(i for pair in pairs for i in pair)
        out = [Superseded(known[old], known[new]) for old, new in pairs]
        out.sort(key=lambda s: (s.report.key, s.report.ended_at, s.report.run_id, s.report.source))
        return out

    def _collisions(self) -> None:
        """One `collision` finding per hostname that several machines use (they are kept apart)."""
        machines: dict[str, list[str]] = {}
        untagged: dict[str, int] = {}
        for hostname, machine_id, n in self.db.rows(
            "SELECT hostname, machine_id, reports FROM hostname_collisions"
        ):
            machines.setdefault(hostname, [])
            if machine_id is None:
                untagged[hostname] = n
            else:
                machines[hostname].append(f"{hostname} (machine {machine_id})")
        for hostname, tagged in sorted(machines.items()):
            evidence = {
                "hostname": hostname,
                "machines": sorted(tagged),
                "untagged_reports": untagged.get(hostname, 0),
            }
            self.col.add_host(hostname, None, "collision", evidence)

    def _skipped(self) -> list[Skipped]:
        return [Skipped(p, r) for p, r in self.db.rows("SELECT path, reason FROM skipped")] + duplicates(
            self.db
        )

    def _unit_rows(self, where: str) -> list[UnitRow]:
        sql = f"SELECT {UNIT_COLUMNS} FROM current_units WHERE {where} ORDER BY host_key, run_id, unit"
        return [UnitRow(*row) for row in self.db.rows(sql)]

    def _reports_with_units(self, where: str, extra: Iterable[int] = ()) -> list[HostReport]:
        """Current reports (by host and run) holding only their units that match `where`, and the reports
        `extra` (with no unit when none matches)."""
        by_report: dict[int, list[UnitRecord]] = {i: [] for i in extra}
        for row in self._unit_rows(where):
            if not extra or row.report in by_report:
                by_report.setdefault(row.report, []).append(unit_record(row))
        known = self.reports.fetch(by_report)
        return sorted(
            (with_units(known[i], us) for i, us in by_report.items()), key=lambda r: (r.key, r.run_id)
        )

    # -- findings the reports carry ----------------------------------------------------------------

    def _invariants(self) -> None:
        """Invariant findings carried by reports (ABFT, golden matmul, NaN/Inf, `run --golden`)."""
        for r in self._reports_with_units("invariant_mismatches IS NOT NULL"):
            for u in r.units:
                inv = u.invariant
                if inv is not None:
                    ev = {
                        "mismatches": inv.mismatches,
                        "first_case": inv.first_case,
                        "workloads": list(inv.workloads),
                        "checks": list(inv.checks),
                    }
                    self.col.add(r, u.unit, "invariant", with_part(ev, u))

    def _invalid(self) -> None:
        """Per invalid unit of an invalid run, or for the host when none is named."""
        invalid = [i for (i,) in self.db.rows("SELECT report FROM current_reports WHERE verdict = 'invalid'")]
        if not invalid:
            return
        for r in self._reports_with_units("verdict = 'invalid'", extra=invalid):
            for u in r.units:
                self.col.add(r, u.unit, "invalid", with_part({"reason": u.reason}, u))
            if not r.units:
                self.col.add(r, None, "invalid", {"reason": "the run was invalid"})

    def _calibration_reports(self) -> list[HostReport]:
        """Current reports holding calibrations; one unit per cohort carries its host's value per key."""
        by_report: dict[int, dict[str, list[tuple[str, str, int, float]]]] = {}
        for report, cohort, dtype, checker, k, e_max in self.db.rows(HOST_CALIBRATIONS):
            by_report.setdefault(report, {}).setdefault(cohort, []).append((dtype, checker, int(k), e_max))
        known = self.reports.fetch(by_report)
        out = []
        for report, cohorts in by_report.items():
            units = [
                replace(bare_unit(f"calibration:{cohort}", cohort), calibration=tuple(sorted(held)))
                for cohort, held in sorted(cohorts.items())
            ]
            out.append(with_units(known[report], units))
        return sorted(out, key=lambda r: (r.key, r.run_id))

    # -- coverage ------------------------------------------------------------------------------------

    def _covered(self, after: float | None = None) -> Iterator[Covered]:
        """Every kept report (superseded ones too), or those ending after `after`, with what its units
        tested, by hostname (a host's reports one after another). A million hosts make a million of
        these: rows are read in batches, repeated strings shared, and the content hash (which coverage
        does not read) left out."""
        where, params = ("WHERE ended_at > ?", [after]) if after is not None else ("", [])
        sql = (
            f"SELECT {REPORT_COLUMNS}, units, case_rows, tested_units FROM keyed_reports {where} "
            "ORDER BY hostname, run_id"
        )
        shared = Interner()
        for row in self.db.batches(sql, params):
            (
                report,
                host_key,
                hostname,
                machine_id,
                source,
                _,
                run_id,
                profile,
                sha,
                seed,
                ended_at,
                verdict,
            ) = row[:12]
            light = (report, host_key, hostname, machine_id, source, "", run_id, shared(profile), shared(sha))
            units, case_rows, tested_units = row[12:]
            yield Covered(
                host_report((*light, seed, ended_at, shared(verdict))), units, case_rows, tested_units
            )


def _host_of(c: Covered) -> str:
    return c.report.host


def _superseded_record(s: Superseded) -> SupersededReport:
    """An older report that does not vote, and the newer one that replaces it."""
    old, new = s.report, s.by
    return {
        "host": old.key,
        "path": old.source,
        "run": old.run_id,
        "ended_at": iso_utc(old.ended_at),
        "verdict": old.verdict,
        "profile_sha256": old.plan[0],
        "seed": old.plan[1],
        "superseded_by": {
            "path": new.source,
            "run": new.run_id,
            "ended_at": iso_utc(new.ended_at),
            "verdict": new.verdict,
        },
    }
