"""The `sentinel` findings of every `compare` (files, a dataset, Spark) from the sentinel tables.

`sdcscan ingest` stores each report's kernel-log section as `read_section` keeps it: one row in
`sentinel_sections` (CPU model, window) and one in `sentinel_outliers` per outlier core. Here SQL picks
each host's newest current report that carries a section, and counts those hosts per CPU model; Python
then builds the findings with `fleet.kernel_evidence`'s helpers, so the text is the text `compare` writes. Only hosts
whose section names an outlier come back to Python: a fleet of a million hosts with clean sections
costs one row per CPU model. Like `compare`, nothing here changes the exit code.

The steps are portable SQL; `fleet.sql_steps` runs them after its own, in every engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from sdcscan.errors import ReportError
from sdcscan.fleet.findings import Collector
from sdcscan.fleet.kernel_evidence import SentinelCore, SentinelSection, host_findings, same_core_findings
from sdcscan.fleet.model import HostReport

# The sections of current reports, with what orders a host's reports.
SENTINEL_CURRENT = """
SELECT s.report, r.host_key, r.profile_sha256, r.seed, r.run_id, r.ended_at, s.cpu_model, s.since, s.until
FROM sentinel_sections s JOIN current_reports r ON s.report = r.report"""

# Where `summarize`'s list of current reports puts each (host, plan): at the first report of it in
# `model.dedupe`'s order (hostname, run id, newest, most cases, hash, path). It only breaks a tie of
# end time and run id between two current reports of one host (a report without a machine id beside
# one with it), which that list's order settles.
SENTINEL_PLAN_FIRST = """
SELECT host_key, profile_sha256, seed, run_id, ended_at, case_rows, sha256, source
FROM (SELECT k.host_key, k.profile_sha256, k.seed, k.run_id, k.ended_at, k.case_rows, k.sha256, k.source,
             ROW_NUMBER() OVER (PARTITION BY k.host_key, k.profile_sha256, k.seed
                                ORDER BY k.run_id, k.ended_at DESC, k.case_rows DESC, k.sha256, k.source)
               AS place
      FROM keyed_reports k
      WHERE EXISTS (SELECT 1 FROM sentinel_current c WHERE c.host_key = k.host_key)) f
WHERE place = 1"""

# Per host, the latest end time, then the greater run id, then the list order.
SENTINEL_NEWEST = """
SELECT report, host_key, cpu_model, since, until
FROM (SELECT c.report, c.host_key, c.cpu_model, c.since, c.until,
             ROW_NUMBER() OVER (PARTITION BY c.host_key
                                ORDER BY c.ended_at DESC, c.run_id DESC, f.run_id, f.ended_at DESC,
                                         f.case_rows DESC, f.sha256, f.source, c.report) AS newest
      FROM sentinel_current c
      JOIN sentinel_plan_first f
        ON f.host_key = c.host_key AND f.profile_sha256 = c.profile_sha256 AND f.seed = c.seed) n
WHERE newest = 1"""

SENTINEL_STEPS = (
    ("sentinel_current", SENTINEL_CURRENT, True),
    ("sentinel_plan_first", SENTINEL_PLAN_FIRST, False),
    ("sentinel_newest", SENTINEL_NEWEST, True),
)

# Result queries: the outlier cores of the hosts' newest sections, and the hosts with a section per model.
SENTINEL_CORES = """
SELECT n.report, n.cpu_model, n.since, n.until, o.unit, o.programs, o.expected, o.p_value, o.examples
FROM sentinel_newest n JOIN sentinel_outliers o ON o.report = n.report"""
SENTINEL_MODEL_HOSTS = """
SELECT cpu_model, COUNT(*) AS hosts
FROM sentinel_newest WHERE cpu_model IS NOT NULL
GROUP BY cpu_model"""
SENTINEL_RESULTS = {"sentinel_cores": SENTINEL_CORES, "sentinel_model_hosts": SENTINEL_MODEL_HOSTS}

# A copied part file would repeat a section or an outlier (and count its host twice).
_REPEATS = (
    "SELECT report FROM sentinel_sections GROUP BY report HAVING COUNT(*) > 1 LIMIT 1",
    "SELECT report FROM sentinel_outliers GROUP BY report, unit HAVING COUNT(*) > 1 LIMIT 1",
)


class Rows(Protocol):
    """What is read of the engine (`fleet.engine.Rows` has it; not imported: the engine imports the steps)."""

    # Rows as DuckDB types them: the SQL, not Python, gives each column its type.
    def rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]: ...


ReportsById = Callable[[Iterable[int]], Mapping[int, HostReport]]


def sentinel_findings(db: Rows, reports: ReportsById, col: Collector) -> None:
    """Add the `sentinel` findings `compare._sentinel` adds: per outlier core of each host's newest
    section, then one per core index that is an outlier on several hosts of one CPU model.

    Args:
        db: the database, every step run (SENTINEL_STEPS included).
        reports: light `HostReport`s (no units) of kept reports by id (`_Assembler.reports`).
        col: the collector of the summary.

    Raises:
        ReportError: the dataset repeats a section or an outlier of one report (a copied part file).
    """
    for sql in _REPEATS:
        if db.rows(sql):
            raise ReportError("the dataset repeats a report's sentinel rows; ingest into a new directory")
    hosts = _newest_with_outliers(db, reports)
    if not hosts:
        return
    for r, unit, evidence in host_findings(hosts):
        col.add(r, unit, "sentinel", evidence)
    totals = {model: n for model, n in db.rows(SENTINEL_MODEL_HOSTS)}
    for label, unit, evidence in _fleet_findings(hosts, totals):
        col.add_host(label, unit, "sentinel", evidence)


def _newest_with_outliers(db: Rows, reports: ReportsById) -> list[HostReport]:
    """Each host's newest report with a section, where that section names an outlier; by host key."""
    sections: dict[int, tuple[str | None, str | None, str | None]] = {}
    cores: dict[int, list[SentinelCore]] = {}
    for report, model, since, until, unit, programs, expected, p_value, examples in db.rows(SENTINEL_CORES):
        sections[report] = (model, since, until)
        cores.setdefault(report, []).append(
            SentinelCore(unit, programs, expected, p_value, tuple(examples or ()))
        )
    known = reports(sections)
    out = []
    for report, (model, since, until) in sections.items():
        held = tuple(sorted(cores[report], key=lambda c: int(c.unit[4:])))  # `read_section`'s order
        section = SentinelSection(outliers=held, since=since, until=until, ignored=0)
        out.append(replace(known[report], cpu_model=model, sentinel=section))
    return sorted(out, key=lambda r: r.key)


def _fleet_findings(
    hosts: list[HostReport], totals: Mapping[str, int]
) -> list[tuple[str, str, dict[str, object]]]:
    """`same_core_findings` over the hosts with outliers, with each model's count of hosts with a
    section from SQL (hosts with clean sections count there but never come to Python)."""
    by_model: dict[str, dict[str, list[str]]] = {}
    for r in hosts:
        if r.cpu_model is not None and r.sentinel is not None:
            for core in r.sentinel.outliers:
                by_model.setdefault(r.cpu_model, {}).setdefault(core.unit, []).append(r.key)
    return same_core_findings(by_model, totals)
