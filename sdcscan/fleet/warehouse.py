"""`compare --from DIR`: the fleet consensus in SQL over a dataset written by `sdcscan ingest`.

The rules are those of `fleet.compare` and `fleet.consensus` (read their docstrings), computed over
rows instead of extracts, so that a fleet too large for one Python process is judged by DuckDB on one
machine, or by the same SQL on Spark or Trino (docs/fleet_sql.md):

  1. Inputs in order (REPORT_STEPS): one copy of each (hostname, machine id, run id): the newest, then
     the one with most cases, then the smallest hash and path (`model.dedupe`); machines sharing a
     hostname kept apart as `NAME (machine ID)` (`model.separate_machines`); one report per host and
     plan votes, the newest (`model.newest_per_plan`); the older ones are superseded.
  2. Votes (VOTE_STEPS), within each comparison group (plan and cohort): per case, the units behind
     each digest; per host, the strict majority of its voting units (units its own run convicted do
     not vote); per digest, the hosts that voted for it. A case is settled by the golden, else by
     agreement, else by the hosts: at least MIN_HOSTS voting, the winner holding more than
     SUPERMAJORITY_NUM/SUPERMAJORITY_DEN of them and leading the runner-up by MIN_LEAD. Else it is open.
  3. Outcomes (`unit_case_outcomes`): a digest that differs from its case's reference, or on an open
     case from its own host's vote, is a dispute; on an open case split among hosts, or where its
     host's units tie, it is undecided.

The heavy step is the host vote, one group per (host, comparison group, case), over integer keys only.
It keeps a summary: hosts whose units all agree on a case (nearly all) collapse into one row per
(case, digest); the few (host, case) pairs where units differ keep a row each and are judged from
their own rows (`mixed_rows`).

Only portable SQL: SELECT with joins, GROUP BY, CASE, COALESCE, `||`, ROW_NUMBER and SUM windows, no
engine's own functions. Each step is a module constant, registered as a view (or, in DuckDB, a table
where later steps read it more than once); `sql_script` prints them for another engine.

Python then assembles the same `FleetSummary` as `compare.summarize` from the few rows the SQL returns,
with the helpers `summarize` uses: evidence, partition groups (`consensus.partition_components`),
undecided hosts, invariant and invalid findings, calibration (`fleet.calibration` on one value per host
and key, reduced in SQL), kernel-log `sentinel` findings (`fleet.warehouse_sentinel`), slow units
(`fleet.perf` on each group's samples, which the SQL narrows to each host's newest report per profile)
and coverage (`fleet.coverage` on one small record per kept report).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from sdcscan.errors import ReportError, UsageError
from sdcscan.fleet import compare as fleet_compare
from sdcscan.fleet import perf
from sdcscan.fleet.calibration import calibration_findings
from sdcscan.fleet.compare import PartitionGroup, Where
from sdcscan.fleet.consensus import (
    FLEET,
    GOLDEN,
    HOST,
    MIN_HOSTS,
    MIN_LEAD,
    SUPERMAJORITY_DEN,
    SUPERMAJORITY_NUM,
    Side,
    Signature,
    partition_components,
    signature_order,
)
from sdcscan.fleet.findings import KINDS, Collector
from sdcscan.fleet.golden import GoldenIndex
from sdcscan.fleet.host_coverage import FUTURE_SKEW_S, coverage_findings, future_findings
from sdcscan.fleet.ingest import (
    MARKER,
    SCHEMA,
    SKIPPED_TABLE,
    TABLES,
    arrow,
    arrow_schema,
    check_marker,
    comparison_group,
    digest_key,
    require_fleet_extra,
)
from sdcscan.fleet.model import (
    Collision,
    HostReport,
    Interner,
    Invariant,
    PlanKey,
    Skipped,
    Superseded,
    UnitRecord,
)
from sdcscan.fleet.warehouse_sentinel import SENTINEL_RESULTS, SENTINEL_STEPS, sentinel_findings
from sdcscan.outcomes import printable, unit_order

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection

DEFAULT_MEMORY_LIMIT = "1GB"  # DuckDB's own buffers; beyond this its aggregates spill to disk
PROFILE_ENV = "SDCSCAN_WAREHOUSE_PROFILE"  # set: each step's time on stderr
INT64 = (-(2**63), 2**63 - 1)
AGREED = "agreed"

# ---------------------------------------------------------------------------------------------------
# The SQL. Base tables: reports, units, cases, throughput, calibrations, sentinel_sections,
# sentinel_outliers (`fleet.ingest.SCHEMA`) and golden (comparison_group, case_index, digest, workload;
# empty without --golden). Each step is a SELECT over the base tables and earlier steps, registered
# under its name; the sentinel steps are `fleet.warehouse_sentinel`'s.

CASE_KEY = "comparison_group, case_index"


def _on(left: str, right: str, columns: str = CASE_KEY) -> str:
    """`l.a = r.a AND l.b = r.b` for a comma-separated column list."""
    return " AND ".join(f"{left}.{c.strip()} = {right}.{c.strip()}" for c in columns.split(","))


REPORT_COPIES = """
SELECT report, source, sha256, hostname, machine_id, run_id, profile_name, profile_sha256, seed,
       ended_at, verdict, units, case_rows, tested_units,
       ROW_NUMBER() OVER (PARTITION BY hostname, COALESCE(machine_id, ''), run_id
                          ORDER BY ended_at DESC, case_rows DESC, sha256, source) AS copy_rank
FROM reports"""

DUPLICATE_REPORTS = """
SELECT d.source, d.sha256, k.source AS kept_source, k.sha256 AS kept_sha256
FROM report_copies d
JOIN report_copies k
  ON k.copy_rank = 1 AND d.hostname = k.hostname AND d.run_id = k.run_id
 AND COALESCE(d.machine_id, '') = COALESCE(k.machine_id, '')
WHERE d.copy_rank > 1"""

HOSTNAME_MACHINES = """
SELECT hostname, COUNT(DISTINCT machine_id) AS machines
FROM report_copies WHERE copy_rank = 1
GROUP BY hostname"""

KEYED_REPORTS = """
SELECT c.report, c.source, c.sha256, c.hostname, c.machine_id, c.run_id, c.profile_name,
       c.profile_sha256, c.seed, c.ended_at, c.verdict, c.units, c.case_rows, c.tested_units,
       CASE WHEN m.machines > 1 AND c.machine_id IS NOT NULL
            THEN c.hostname || ' (machine ' || c.machine_id || ')' ELSE c.hostname END AS host_key
FROM report_copies c JOIN hostname_machines m ON c.hostname = m.hostname
WHERE c.copy_rank = 1"""

PLAN_REPORTS = """
SELECT k.*,
       ROW_NUMBER() OVER (PARTITION BY host_key, profile_sha256, seed
                          ORDER BY ended_at DESC, run_id DESC, sha256 DESC, source DESC) AS plan_rank
FROM keyed_reports k"""

CURRENT_REPORTS = "SELECT * FROM plan_reports WHERE plan_rank = 1"

SUPERSEDED_REPORTS = """
SELECT o.report, n.report AS current_report
FROM plan_reports o
JOIN plan_reports n
  ON n.plan_rank = 1 AND o.host_key = n.host_key AND o.profile_sha256 = n.profile_sha256 AND o.seed = n.seed
WHERE o.plan_rank > 1"""

HOSTNAME_COLLISIONS = """
SELECT k.hostname, k.machine_id, COUNT(*) AS reports
FROM keyed_reports k JOIN hostname_machines m ON k.hostname = m.hostname
WHERE m.machines > 1
GROUP BY k.hostname, k.machine_id"""

CURRENT_UNITS = """
SELECT u.*, r.host_key, r.run_id
FROM units u JOIN current_reports r ON u.report = r.report"""

# Every vote step reads this view: the rows of the reports that vote.
CURRENT_CASES = """
SELECT c.report, c.comparison_group, c.unit, c.case_index, c.workload, c.digest, c.digest_key, c.voter
FROM cases c JOIN current_reports r ON c.report = r.report"""

REPORT_STEPS = (
    ("report_copies", REPORT_COPIES, False),
    ("duplicate_reports", DUPLICATE_REPORTS, False),
    ("hostname_machines", HOSTNAME_MACHINES, False),
    ("keyed_reports", KEYED_REPORTS, True),
    ("plan_reports", PLAN_REPORTS, True),
    ("current_reports", CURRENT_REPORTS, True),
    ("superseded_reports", SUPERSEDED_REPORTS, False),
    ("hostname_collisions", HOSTNAME_COLLISIONS, False),
    ("current_units", CURRENT_UNITS, False),
    ("current_cases", CURRENT_CASES, False),
)

# Units behind each digest of each case (every unit, convicted or not: what `sides` shows), and the
# digest of each key (two digests with one key: `digest_high` differs, and the dataset is refused).
CASE_DIGEST_UNITS = f"""
SELECT {CASE_KEY}, digest_key, COUNT(*) AS units, MIN(digest) AS digest, MAX(digest) AS digest_high
FROM current_cases WHERE digest_key IS NOT NULL
GROUP BY {CASE_KEY}, digest_key"""

# Per (host, group, case): the lowest voting digest, and whether all of the host's digests agree.
HOST_CASE_VOTES = f"""
SELECT report, {CASE_KEY},
       MIN(CASE WHEN voter THEN digest_key END) AS vote_low,
       MIN(digest_key) AS low, MAX(digest_key) AS high
FROM current_cases WHERE digest_key IS NOT NULL
GROUP BY report, {CASE_KEY}"""

# Hosts whose units agree collapse into one row per (case, vote); a host whose units differ keeps a
# row of its own (mixed_report), to be judged from its rows.
HOST_CASE_SUMMARY = f"""
SELECT {CASE_KEY},
       CASE WHEN low <> high THEN report END AS mixed_report,
       CASE WHEN low = high THEN vote_low END AS vote,
       COUNT(*) AS hosts
FROM host_case_votes
GROUP BY {CASE_KEY}, CASE WHEN low <> high THEN report END, CASE WHEN low = high THEN vote_low END"""

# EXISTS rather than a join: the engine then builds its hash table on the few mixed pairs.
MIXED_ROWS = f"""
SELECT c.report, c.comparison_group, c.case_index, c.unit, c.digest, c.digest_key, c.voter
FROM current_cases c
WHERE c.digest_key IS NOT NULL
  AND EXISTS (SELECT 1 FROM host_case_summary m WHERE m.mixed_report = c.report AND {_on("m", "c")})"""

# The vote of a host whose units differ: the digest a strict majority of its voting units produced.
MIXED_VOTES = f"""
SELECT report, {CASE_KEY}, digest_key
FROM (SELECT report, {CASE_KEY}, digest_key, COUNT(*) AS votes,
             SUM(COUNT(*)) OVER (PARTITION BY report, {CASE_KEY}) AS voters
      FROM mixed_rows WHERE voter
      GROUP BY report, {CASE_KEY}, digest_key) v
WHERE 2 * votes > voters"""

CASE_DIGEST_HOSTS = f"""
SELECT {CASE_KEY}, digest_key, SUM(hosts) AS hosts
FROM (SELECT {CASE_KEY}, vote AS digest_key, hosts FROM host_case_summary
      WHERE mixed_report IS NULL AND vote IS NOT NULL
      UNION ALL
      SELECT {CASE_KEY}, digest_key, 1 AS hosts FROM mixed_votes) v
GROUP BY {CASE_KEY}, digest_key"""

# Ties for first place never decide (the winner must lead by MIN_LEAD), so ordering ties by key is safe.
CASE_HOST_RANKS = f"""
SELECT {CASE_KEY}, digest_key, hosts,
       ROW_NUMBER() OVER (PARTITION BY {CASE_KEY} ORDER BY hosts DESC, digest_key) AS place,
       SUM(hosts) OVER (PARTITION BY {CASE_KEY}) AS voters,
       COUNT(*) OVER (PARTITION BY {CASE_KEY}) AS host_digests
FROM case_digest_hosts"""

CASE_FACTS = f"""
SELECT {CASE_KEY}, COUNT(*) AS digests, SUM(units) AS units, MIN(digest_key) AS only_key
FROM case_digest_units
GROUP BY {CASE_KEY}"""

# consensus.fleet_decision: enough hosts, a supermajority, and a lead over the runner-up.
_FLEET_DECIDES = (
    f"t.voters >= {MIN_HOSTS} AND {SUPERMAJORITY_DEN} * t.hosts > {SUPERMAJORITY_NUM} * t.voters "
    f"AND t.hosts - COALESCE(s.hosts, 0) >= {MIN_LEAD}"
)

CASE_REFERENCE = f"""
SELECT f.comparison_group, f.case_index, f.units, f.digests,
       g.digest AS golden_digest,
       COALESCE(t.voters, 0) AS hosts_voted,
       COALESCE(t.host_digests, 0) AS host_digests,
       CASE WHEN g.digest IS NOT NULL THEN g.digest_key
            WHEN f.digests = 1 THEN f.only_key
            WHEN {_FLEET_DECIDES} THEN t.digest_key END AS reference,
       CASE WHEN g.digest IS NOT NULL THEN '{GOLDEN}'
            WHEN f.digests = 1 THEN '{AGREED}'
            WHEN {_FLEET_DECIDES} THEN '{FLEET}' END AS basis,
       (g.digest IS NULL AND f.units < 2) AS lonely
FROM case_facts f
LEFT JOIN golden g ON {_on("g", "f")}
LEFT JOIN case_host_ranks t ON {_on("t", "f")} AND t.place = 1
LEFT JOIN case_host_ranks s ON {_on("s", "f")} AND s.place = 2"""

# The rows Python needs: each digest that differs from its reference, each digest on an open case,
# each digest on a case only one unit ran (for `cases_compared`), and each row of a unit its own run
# convicted. `outcome`: the basis of a dispute (golden, fleet, host), 'undecided', or null; `against`:
# the digest disputed. `host_vote` is the host's vote where it matters (null for convicted rows of
# hosts whose units agree).
UNIT_CASE_JUDGED = f"""
SELECT j.report, j.comparison_group, j.unit, j.case_index, j.workload, j.digest, j.voter, j.lonely,
       j.golden_digest, j.host_vote,
       CASE WHEN j.reference IS NOT NULL THEN CASE WHEN j.digest_key <> j.reference THEN j.basis END
            WHEN j.mixed AND j.host_vote IS NOT NULL AND j.digest_key <> j.host_vote THEN '{HOST}'
            WHEN NOT j.voter THEN NULL
            WHEN (j.mixed AND j.host_vote IS NULL) OR j.split THEN 'undecided' END AS outcome,
       CASE WHEN j.reference IS NOT NULL THEN j.reference ELSE j.host_vote END AS against
FROM (SELECT c.report, c.comparison_group, c.unit, c.case_index, c.workload, c.digest, c.digest_key,
             c.voter, c.reference, c.basis, c.lonely, c.golden_digest,
             (c.reference IS NULL AND c.host_digests > 1) AS split,
             m.report IS NOT NULL AS mixed,
             CASE WHEN m.report IS NOT NULL THEN v.digest_key WHEN c.voter THEN c.digest_key END AS host_vote
      FROM (SELECT c0.report, c0.comparison_group, c0.unit, c0.case_index, c0.workload, c0.digest,
                   c0.digest_key, c0.voter, f.reference, f.basis, f.lonely, f.host_digests, f.golden_digest
            FROM current_cases c0 JOIN case_reference f ON {_on("c0", "f")}
            WHERE c0.digest_key IS NOT NULL
              AND (f.reference IS NULL OR c0.digest_key <> f.reference OR f.lonely OR NOT c0.voter)) c
      LEFT JOIN (SELECT DISTINCT report, {CASE_KEY} FROM mixed_rows) m
        ON m.report = c.report AND {_on("m", "c")}
      LEFT JOIN mixed_votes v ON v.report = c.report AND {_on("v", "c")}) j"""

# ... with the keys turned back into digests (a golden's digest may be one no unit produced).
UNIT_CASE_OUTCOMES = f"""
SELECT j.report, j.comparison_group, j.unit, j.case_index, j.workload, j.digest, j.voter, j.lonely,
       j.golden_digest IS NOT NULL AS golden_covered, j.outcome,
       h.digest AS host_vote,
       CASE WHEN j.outcome = '{GOLDEN}' THEN j.golden_digest ELSE a.digest END AS against
FROM unit_case_judged j
LEFT JOIN case_digest_units h ON {_on("h", "j")} AND h.digest_key = j.host_vote
LEFT JOIN case_digest_units a ON {_on("a", "j")} AND a.digest_key = j.against"""

# One sample per host and profile for speed: its newest current report (`perf._newest_per_host`).
SLOW_SAMPLES = """
SELECT t.report, t.unit, t.profile_sha256, t.cohort, t.workload, t.measure, t.reading, t.reading_unit
FROM throughput t
JOIN (SELECT report
      FROM (SELECT report, ROW_NUMBER() OVER (PARTITION BY host_key, profile_sha256
                                              ORDER BY ended_at DESC, run_id DESC) AS newest
            FROM current_reports) n
      WHERE newest = 1) r
  ON t.report = r.report"""

VOTE_STEPS = (
    ("case_digest_units", CASE_DIGEST_UNITS, True),
    ("host_case_votes", HOST_CASE_VOTES, False),
    ("host_case_summary", HOST_CASE_SUMMARY, True),
    ("mixed_rows", MIXED_ROWS, True),
    ("mixed_votes", MIXED_VOTES, True),
    ("case_digest_hosts", CASE_DIGEST_HOSTS, True),
    ("case_host_ranks", CASE_HOST_RANKS, False),
    ("case_facts", CASE_FACTS, False),
    ("case_reference", CASE_REFERENCE, True),
    ("unit_case_judged", UNIT_CASE_JUDGED, True),
    ("unit_case_outcomes", UNIT_CASE_OUTCOMES, True),
    ("slow_samples", SLOW_SAMPLES, True),
)
STEPS = REPORT_STEPS + VOTE_STEPS + SENTINEL_STEPS

# Result queries: read by Python, by no step.
COMPARISON_GROUPS = """
SELECT comparison_group, MIN(profile_sha256), MIN(seed), MIN(cohort),
       COUNT(DISTINCT profile_sha256) + COUNT(DISTINCT seed) + COUNT(DISTINCT cohort) AS names
FROM units GROUP BY comparison_group"""
GROUP_UNITS = "SELECT comparison_group, COUNT(*) FROM current_units GROUP BY comparison_group"
GROUP_CASES_COMPARED = """
SELECT comparison_group, COUNT(*)
FROM case_reference WHERE golden_digest IS NOT NULL OR units >= 2
GROUP BY comparison_group"""
GOLDEN_JUDGED_UNITS = f"""
SELECT comparison_group, COUNT(*)
FROM (SELECT DISTINCT c.report, c.unit, c.comparison_group
      FROM current_cases c JOIN golden g ON {_on("c", "g")}
      WHERE c.digest IS NOT NULL) j
GROUP BY comparison_group"""
CITED_CASES = f"SELECT DISTINCT {CASE_KEY} FROM unit_case_outcomes WHERE outcome IS NOT NULL"
# Who stood where on the cases findings cite: units and host votes per digest, and the totals.
CASE_SIDES = f"""
SELECT d.comparison_group, d.case_index, d.digest, d.units, COALESCE(h.hosts, 0) AS hosts
FROM case_digest_units d
JOIN ({CITED_CASES}) n ON {_on("d", "n")}
LEFT JOIN case_digest_hosts h ON {_on("h", "d")} AND h.digest_key = d.digest_key"""
CASE_TOTALS = f"""
SELECT r.comparison_group, r.case_index, r.hosts_voted, r.units
FROM case_reference r JOIN ({CITED_CASES}) n ON {_on("r", "n")}"""
HOST_SIDES = f"""
SELECT r.report, r.comparison_group, r.case_index, r.digest, COUNT(*) AS units
FROM mixed_rows r
JOIN (SELECT DISTINCT report, {CASE_KEY} FROM unit_case_outcomes WHERE outcome = '{HOST}') n
  ON n.report = r.report AND {_on("n", "r")}
GROUP BY r.report, r.comparison_group, r.case_index, r.digest"""
# gemm_fp calibrations (`fleet.calibration`): per host and key, the e_max a strict majority of its
# units held, else the smallest (`calibration.peers.reference`).
HOST_CALIBRATIONS = """
SELECT report, cohort, dtype, checker, k,
       CASE WHEN 2 * top_units > units THEN top_e_max ELSE low_e_max END AS e_max
FROM (SELECT report, cohort, dtype, checker, k, e_max AS top_e_max, held AS top_units,
             SUM(held) OVER (PARTITION BY report, cohort, dtype, checker, k) AS units,
             MIN(e_max) OVER (PARTITION BY report, cohort, dtype, checker, k) AS low_e_max,
             ROW_NUMBER() OVER (PARTITION BY report, cohort, dtype, checker, k
                                ORDER BY held DESC, e_max) AS place
      FROM (SELECT c.report, c.cohort, c.dtype, c.checker, c.k, c.e_max, COUNT(*) AS held
            FROM calibrations c JOIN current_reports r ON c.report = r.report
            GROUP BY c.report, c.cohort, c.dtype, c.checker, c.k, c.e_max) v) w
WHERE place = 1"""

RESULTS = {
    "comparison_groups": COMPARISON_GROUPS,
    "group_units": GROUP_UNITS,
    "group_cases_compared": GROUP_CASES_COMPARED,
    "golden_judged_units": GOLDEN_JUDGED_UNITS,
    "case_sides": CASE_SIDES,
    "case_totals": CASE_TOTALS,
    "host_sides": HOST_SIDES,
    "host_calibrations": HOST_CALIBRATIONS,
    **SENTINEL_RESULTS,
}

GOLDEN_COLUMNS = (
    ("comparison_group", "int64"),
    ("case_index", "int64"),
    ("digest", "string"),
    ("digest_key", "int64"),
    ("workload", "string"),
)
# Two digests of one case with one key: the votes would merge them.
KEY_COLLISIONS = "SELECT COUNT(*) FROM case_digest_units WHERE digest <> digest_high"


def sql_script(create: str = "CREATE OR REPLACE TEMPORARY VIEW") -> str:
    """Every step as `CREATE ... VIEW name AS SELECT ...;` (Spark's form by default; Trino's is
    `CREATE OR REPLACE VIEW`), then the result queries, each headed by its name."""
    parts = [f"{create} {name} AS{sql};" for name, sql, _ in STEPS]
    parts += [f"-- result: {name}{sql};" for name, sql in RESULTS.items()]
    return "-- sdcscan fleet consensus: steps in order, then results\n\n" + "\n\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------------
# Running it.


@dataclass(frozen=True)
class Engine:
    """How DuckDB runs: threads (None: one per CPU) and its memory limit (it spills beyond it)."""

    threads: int | None = None
    memory_limit: str = DEFAULT_MEMORY_LIMIT


def compare_from(
    directory: str | os.PathLike[str],
    options: fleet_compare.Options | None = None,
    engine: Engine | None = None,
) -> fleet_compare.FleetSummary:
    """`compare.summarize` over an ingested dataset: the same findings, groups, counts and records.

    Args:
        directory: a dataset written by `sdcscan ingest`.
        options: as for `summarize` (thresholds, hosts, now, golden, fail_on_undecided).
        engine: DuckDB's threads and memory limit.

    Raises:
        UsageError: pyarrow or duckdb missing, not a dataset, or a dataset with no report (exit 2).
        ReportError: the dataset is damaged (unreadable files, two reports or groups with one key): exit 3.
        ValueError: `options.hosts` is given without `options.now`.
    """
    opts = options or fleet_compare.Options()
    if opts.hosts is not None and opts.now is None:
        raise ValueError("options.now is required with options.hosts")
    require_fleet_extra()
    root = Path(directory)
    check_marker(root)
    with _warehouse(root, opts.golden, engine or Engine()) as db:
        return _Assembler(db, opts).summary()


@contextmanager
def _warehouse(root: Path, golden: GoldenIndex | None, engine: Engine) -> Iterator[_Database]:
    """A DuckDB connection with the dataset's tables and the golden registered, and every step run.

    Raises:
        ReportError: DuckDB could not read the files or run a step.
    """
    import duckdb

    with tempfile.TemporaryDirectory(prefix="sdcscan-duckdb-") as spill:
        con = duckdb.connect(":memory:")
        try:
            db = _Database(con)
            try:
                db.configure(spill, engine)
                db.register_dataset(root)
                db.register_rows("golden", GOLDEN_COLUMNS, golden_rows(golden))
                db.run_steps()
            except duckdb.Error as err:
                raise ReportError(f"{printable(str(root))}: cannot read the dataset: {err}") from None
            yield db
        finally:
            con.close()


# A row of the `golden` table: (comparison_group, case_index, digest, digest_key, workload).
GoldenRow = tuple[int, int, str, int, str]


def golden_rows(golden: GoldenIndex | None) -> list[GoldenRow]:
    """The golden as rows of the `golden` table (GOLDEN_COLUMNS), for DuckDB or another engine.

    Entries no report can match (a seed or case index beyond 64 bits) are left out.
    """
    rows: list[GoldenRow] = []
    for ((sha, seed), cohort), entry in sorted((golden or {}).items()):
        if INT64[0] <= seed <= INT64[1]:
            key = comparison_group(sha, seed, cohort)
            rows += [
                (key, i, d, digest_key(d), w)
                for i, (d, w) in sorted(entry.items())
                if INT64[0] <= i <= INT64[1]
            ]
    return rows


def golden_table(golden: GoldenIndex | None) -> Any:
    """`golden_rows` as a pyarrow table (write it with `pyarrow.parquet.write_table` for Spark or Trino)."""
    rows = golden_rows(golden)
    data = {c: [r[k] for r in rows] for k, (c, _) in enumerate(GOLDEN_COLUMNS)}
    return arrow().Table.from_pydict(data, schema=arrow_schema(GOLDEN_COLUMNS))


@dataclass
class _Database:
    """The connection, and the few ways the assembler asks it for rows."""

    con: DuckDBPyConnection
    _wanted: int = 0

    def configure(self, spill: str, engine: Engine) -> None:
        con = self.con
        con.execute(f"SET temp_directory = '{_literal(spill)}'")
        con.execute(f"SET memory_limit = '{_literal(engine.memory_limit)}'")
        con.execute("SET enable_progress_bar = false")  # it writes to stdout, where the JSON goes
        con.execute("SET preserve_insertion_order = false")  # every result is sorted where it matters
        if engine.threads:
            con.execute(f"SET threads = {int(engine.threads)}")

    def register_dataset(self, root: Path) -> None:
        """A view per table over its Parquet files (an empty table when it has none)."""
        for table in (*TABLES, SKIPPED_TABLE):
            pattern = "*.parquet" if table == SKIPPED_TABLE else "*/*/*.parquet"
            found = [(p.stat().st_size, str(p)) for p in (root / table).glob(pattern)]
            # Largest first: DuckDB estimates a scan's rows from its first file, and a tiny first file
            # (one host's report on a day of its own) made it build hash tables on 10^8 case rows.
            files = [name for _, name in sorted(found, key=lambda f: (-f[0], f[1]))]
            if files:
                self.con.read_parquet(files, hive_partitioning=False).create_view(table)
            else:
                self.register_rows(table, SCHEMA[table], [])

    def register_rows(
        self, name: str, columns: Sequence[tuple[str, str]], rows: Sequence[tuple[object, ...]]
    ) -> None:
        """Rows from Python as a table."""
        data = {c: [r[k] for r in rows] for k, (c, _) in enumerate(columns)}
        self.con.register(name, arrow().Table.from_pydict(data, schema=arrow_schema(columns)))

    def run_steps(self) -> None:
        profile = bool(os.environ.get(PROFILE_ENV))
        for name, sql, materialize in STEPS:
            started = time.perf_counter()
            self.con.execute(f"CREATE TEMP {'TABLE' if materialize else 'VIEW'} {name} AS {sql}")
            if profile:
                print(f"step {name}: {time.perf_counter() - started:.2f} s", file=sys.stderr)

    # Rows as DuckDB types them (`fetchall`): the SQL, not Python, gives each column its type.
    def rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        return list(self.con.execute(sql, list(params)).fetchall())

    def batches(
        self, sql: str, params: Sequence[object] = (), size: int = 65536
    ) -> Iterator[tuple[Any, ...]]:
        """A query's rows, fetched `size` at a time (a million rows never sit in one list)."""
        result = self.con.execute(sql, list(params))
        while rows := result.fetchmany(size):
            yield from rows

    def column(self, sql: str, params: Sequence[object] = ()) -> list[float]:
        """The first column of a query's rows, a DOUBLE column, fetched as one numpy array."""
        return next(iter(self.con.execute(sql, list(params)).fetchnumpy().values())).tolist()

    @contextmanager
    def wanted(self, ids: Iterable[int]) -> Iterator[str]:
        """A temporary table `(report)` holding `ids`, to join with; yields its name."""
        self._wanted += 1
        name = f"wanted_{self._wanted}"
        self.register_rows(name, (("report", "int64"),), [(i,) for i in sorted(set(ids))])
        try:
            yield name
        finally:
            self.con.unregister(name)


def _literal(text: str) -> str:
    """A string inside a single-quoted SQL literal."""
    return text.replace("'", "''")


# ---------------------------------------------------------------------------------------------------
# Rows -> FleetSummary.

Group = tuple[PlanKey, str]  # (plan, cohort), as `summarize` orders comparison groups
REPORT_COLUMNS = (
    "report, host_key, hostname, machine_id, source, sha256, run_id, profile_name, profile_sha256, seed, "
    "ended_at, verdict"
)


class _UnitRow(NamedTuple):
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


UNIT_COLUMNS = ", ".join(_UnitRow._fields)


@dataclass
class _Unit:
    """What the outcome rows say about one unit of one comparison group."""

    report: int
    unit: str
    # (case, digest, digest disputed, basis, workload), by case
    disputes: list[tuple[int, str, str, str, str]] = field(default_factory=list)
    # (case, its host's vote, workload), by case
    undecided: list[tuple[int, str | None, str]] = field(default_factory=list)
    lonely: int = 0  # digests on cases no other unit produced (not compared)
    golden_covered: int = 0  # digests on golden-covered cases, counted where all rows are here


class _Assembler:
    """Builds the FleetSummary from the database's rows, in the order `summarize` adds findings."""

    def __init__(self, db: _Database, opts: fleet_compare.Options) -> None:
        self.db, self.opts = db, opts
        self.col = Collector()
        self._reports: dict[int, HostReport] = {}  # report id -> light record, fetched as needed
        self.groups: dict[int, Group] = {}  # comparison_group -> (plan, cohort)
        self.units: dict[tuple[int, str], _UnitRow] = {}  # (report, unit) -> row, of units findings cite

    def summary(self) -> fleet_compare.FleetSummary:
        """The summary, built in the order `summarize` builds it (the order its Collector needs).

        Raises:
            UsageError: no report in the dataset. ReportError: a shared key (`_check_keys`).
        """
        db, opts = self.db, self.opts
        self._check_keys()
        current, hosts, units, plans = db.rows(
            "SELECT COUNT(*), COUNT(DISTINCT host_key), COALESCE(SUM(units), 0), "
            "COUNT(DISTINCT profile_sha256 || ' ' || CAST(seed AS VARCHAR)) FROM current_reports"
        )[0]
        if not current:
            raise UsageError(f"no usable report to compare in the dataset: {self._first_skipped()}")
        superseded = self._superseded()
        counts: dict[str, int] = {
            "reports": current,
            "superseded": len(superseded),
            "skipped": 0,
            "hosts": hosts,
            "units": int(units),
            "plans": plans,
        }
        fleet_compare._collision_findings(self._collisions(), self.col)
        partitions = self._consensus(counts)
        fleet_compare._invariants(self._reports_with_units("invariant_mismatches IS NOT NULL"), self.col)
        fleet_compare._invalid(self._invalid_reports(), self.col)
        calibration_findings(self._calibration_reports(), self.col)
        sentinel_findings(self.db, self.reports, self.col)
        self._slow()
        # As in `summarize`, coverage looks at every kept report of a host, superseded ones too.
        if opts.hosts is not None and opts.now is not None:
            counts["unlisted_hosts"] = coverage_findings(
                self._kept_reports(), self.col, opts.hosts, now=opts.now, stale_s=opts.stale_s
            )
        elif opts.now is not None:
            future_findings(self._kept_reports(after=opts.now + FUTURE_SKEW_S), self.col, now=opts.now)
        skipped = tuple(sorted(self._skipped(), key=lambda s: (s.path, s.reason)))
        counts["skipped"] = len(skipped)
        counts["partition_groups"] = len(partitions)
        findings = self.col.findings()
        counts.update({k: sum(1 for f in findings if f.kind == k) for k in KINDS})
        return fleet_compare.FleetSummary(
            findings,
            tuple(partitions),
            skipped,
            counts,
            fleet_compare._options_record(opts),
            tuple(fleet_compare._superseded_record(s) for s in superseded),
            opts.fail_on_undecided,
        )

    # -- reports ------------------------------------------------------------------------------------

    def _check_keys(self) -> None:
        """Two reports with one id, or two groups with one key, would merge: refuse rather than guess.

        Raises:
            ReportError: a key is shared (a 63-bit hash collision, or files copied between datasets).
        """
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

    def _first_skipped(self) -> str:
        rows = self.db.rows("SELECT path, reason FROM skipped ORDER BY path, reason LIMIT 3")
        return "; ".join(printable(f"{p}: {r}") for p, r in rows) or f"no report was ingested ({MARKER} only)"

    def reports(self, ids: Iterable[int]) -> dict[int, HostReport]:
        """Light `HostReport`s (no units) of kept reports by id."""
        missing = {i for i in ids if i not in self._reports}
        if missing:
            with self.db.wanted(missing) as wanted:
                columns = ", ".join(f"k.{c.strip()}" for c in REPORT_COLUMNS.split(","))
                rows = self.db.rows(
                    f"SELECT {columns} FROM keyed_reports k JOIN {wanted} w ON k.report = w.report"
                )
            self._reports.update((row[0], _host_report(row)) for row in rows)
        return self._reports

    def _superseded(self) -> list[Superseded]:
        pairs = self.db.rows("SELECT report, current_report FROM superseded_reports")
        known = self.reports(i for pair in pairs for i in pair)
        out = [Superseded(known[old], known[new]) for old, new in pairs]
        out.sort(key=lambda s: (s.report.key, s.report.ended_at, s.report.run_id, s.report.source))
        return out

    def _collisions(self) -> list[Collision]:
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
        return [Collision(h, tuple(sorted(m)), untagged.get(h, 0)) for h, m in sorted(machines.items())]

    def _skipped(self) -> list[Skipped]:
        out = [Skipped(p, r) for p, r in self.db.rows("SELECT path, reason FROM skipped")]
        for source, sha, kept_source, kept_sha in self.db.rows("SELECT * FROM duplicate_reports"):
            why = "identical content" if sha and sha == kept_sha else "same host and run id"
            out.append(Skipped(source, f"duplicate of {kept_source} ({why})"))
        return out

    def _unit_rows(self, where: str, params: Sequence[object] = ()) -> list[_UnitRow]:
        sql = f"SELECT {UNIT_COLUMNS} FROM current_units WHERE {where} ORDER BY host_key, run_id, unit"
        return [_UnitRow(*row) for row in self.db.rows(sql, params)]

    def _reports_with_units(self, where: str, extra: Iterable[int] = ()) -> list[HostReport]:
        """Current reports (in `summarize`'s order) holding only their units that match `where`, and the
        reports `extra` (with no unit when none matches)."""
        by_report: dict[int, list[UnitRecord]] = {i: [] for i in extra}
        for row in self._unit_rows(where):
            if not extra or row.report in by_report:
                by_report.setdefault(row.report, []).append(_unit_record(row))
        known = self.reports(by_report)
        return sorted(
            (_with_units(known[i], us) for i, us in by_report.items()), key=lambda r: (r.key, r.run_id)
        )

    def _invalid_reports(self) -> list[HostReport]:
        invalid = [i for (i,) in self.db.rows("SELECT report FROM current_reports WHERE verdict = 'invalid'")]
        return self._reports_with_units("verdict = 'invalid'", extra=invalid) if invalid else []

    def _kept_reports(self, after: float | None = None) -> list[HostReport]:
        """Every kept report (superseded ones too), or those ending after `after`, each with stand-in
        units that test exactly what its units tested (`coverage.not_covering` looks at nothing else).

        A million hosts make a million of these: rows are read in batches, repeated strings shared,
        and the content hash (which coverage does not read) left out.
        """
        where, params = ("WHERE ended_at > ?", [after]) if after is not None else ("", [])
        sql = f"SELECT {REPORT_COLUMNS}, units, case_rows, tested_units FROM keyed_reports {where} ORDER BY hostname, run_id"
        shared = Interner()
        out = []
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
            out.append(
                _host_report((*light, seed, ended_at, shared(verdict)), _STAND_INS[_tested(*row[12:])])
            )
        return out

    def _calibration_reports(self) -> list[HostReport]:
        """Current reports holding calibrations; one unit per cohort carries its host's value per key."""
        by_report: dict[int, dict[str, list[tuple[str, str, int, float]]]] = {}
        for report, cohort, dtype, checker, k, e_max in self.db.rows(HOST_CALIBRATIONS):
            by_report.setdefault(report, {}).setdefault(cohort, []).append((dtype, checker, int(k), e_max))
        known = self.reports(by_report)
        out = []
        for report, cohorts in by_report.items():
            units = [
                replace(_bare_unit(f"calibration:{cohort}", cohort), calibration=tuple(sorted(held)))
                for cohort, held in sorted(cohorts.items())
            ]
            out.append(_with_units(known[report], units))
        return sorted(out, key=lambda r: (r.key, r.run_id))

    # -- consensus ---------------------------------------------------------------------------------

    def _consensus(self, counts: dict[str, int]) -> list[PartitionGroup]:
        """Divergent units, partition groups, own-run convictions and undecided hosts, group by group
        in `summarize`'s order; counts of groups and cases."""
        db = self.db
        group_units = dict(db.rows(GROUP_UNITS))
        compared = dict(db.rows(GROUP_CASES_COMPARED))
        counts.update(
            comparison_groups=len(group_units), cases_compared=sum(compared.values()), undecided_cases=0
        )
        if self.opts.golden is not None:
            judged = dict(db.rows(GOLDEN_JUDGED_UNITS))
            counts["golden_unjudged_units"] = sum(n - judged.get(g, 0) for g, n in group_units.items())
        outcomes = self._outcome_units()
        convicted = self._unit_rows("convicted")
        self.units = {(row.report, row.unit): row for row in convicted}
        self._load_units({k for members in outcomes.values() for k in members} - set(self.units))
        self.reports({report for report, _ in self.units})
        sides = _Sides(db)
        partitions: list[PartitionGroup] = []
        pending: dict[int, list[tuple[int, _Unit]]] = {}
        for key in sorted(group_units, key=lambda g: self.groups[g]):
            members = outcomes.get(key, {})
            counts["undecided_cases"] += len({c[0] for u in members.values() for c in u.undecided})
            divergent = sorted(
                (u for u in members.values() if u.disputes),
                key=lambda u: (self._reports[u.report].key, u.unit),
            )
            partitions += self._divergent(key, divergent, sides, first_id=len(partitions) + 1)
            self._own_run(key, members, {(u.report, u.unit) for u in divergent})
            for u in members.values():
                if u.undecided:
                    pending.setdefault(u.report, []).append((key, u))
        for report in sorted(pending, key=lambda i: (self._reports[i].key, self._reports[i].run_id)):
            r = self._reports[report]
            self.col.add(r, None, "undecided", self._undecided_evidence(r, pending[report], sides))
        return partitions

    def _outcome_units(self) -> dict[int, dict[tuple[int, str], _Unit]]:
        """The outcome rows, gathered per comparison group and unit, cases in order."""
        out: dict[int, dict[tuple[int, str], _Unit]] = {}
        rows = self.db.rows(
            "SELECT comparison_group, report, unit, case_index, workload, digest, lonely, golden_covered, "
            "host_vote, outcome, against FROM unit_case_outcomes ORDER BY comparison_group, report, unit, case_index"
        )
        for key, report, unit, case, workload, digest, lonely, covered, vote, outcome, against in rows:
            members = out.setdefault(key, {})
            u = members.get((report, unit))
            if u is None:
                u = members[(report, unit)] = _Unit(report, unit)
            u.lonely += bool(lonely)
            u.golden_covered += bool(covered)
            if outcome == "undecided":
                u.undecided.append((case, vote, workload))
            elif outcome is not None:
                u.disputes.append((case, digest, against, outcome, workload))
        return out

    def _load_units(self, keys: set[tuple[int, str]]) -> None:
        """The unit rows of (report, unit) pairs."""
        if not keys:
            return
        with self.db.wanted(report for report, _ in keys) as wanted:
            columns = ", ".join(f"u.{c}" for c in _UnitRow._fields)
            rows = self.db.rows(
                f"SELECT {columns} FROM current_units u JOIN {wanted} w ON u.report = w.report"
            )
        self.units.update(((row[0], row[1]), _UnitRow(*row)) for row in rows if (row[0], row[1]) in keys)

    def _divergent(
        self, key: int, divergent: list[_Unit], sides: _Sides, first_id: int
    ) -> list[PartitionGroup]:
        """A `divergent` finding per unit that disputes a reference, or one per host whose every unit of
        the group is divergent with the same digests (`compare._divergent`); return the partition groups."""
        where = _where(self.groups[key])
        partitions = self._partitions(key, divergent, first_id)
        group_of = {(m["host"], m["unit"]): g["id"] for g in partitions for m in g["members"]}
        evidence = {
            (u.report, u.unit): self._divergent_evidence(
                key, where, u, sides, group_of.get((self._reports[u.report].key, u.unit))
            )
            for u in divergent
        }
        by_host: dict[int, list[_Unit]] = {}
        for u in divergent:
            by_host.setdefault(u.report, []).append(u)
        eligible = {
            h: us for h, us in by_host.items() if not any("own_run" in evidence[(h, u.unit)] for u in us)
        }
        whole = self._whole_hosts(key, eligible)
        for report, us in by_host.items():
            r = self._reports[report]
            if report in whole:  # units in signature order: one signature, so by unit id
                self.col.add(
                    r, None, "divergent", {**evidence[(report, us[0].unit)], "units": [u.unit for u in us]}
                )
                continue
            for u in us:
                self.col.add(r, u.unit, "divergent", evidence[(report, u.unit)])
        return partitions

    def _divergent_evidence(
        self, key: int, where: Where, u: _Unit, sides: _Sides, gid: str | None
    ) -> dict[str, object]:
        """`compare._divergent_evidence` from the outcome rows."""
        case, digest, against, basis, workload = u.disputes[0]
        row = self.units[(u.report, u.unit)]
        hosts_voted, units_voted = sides.voters(key, case)
        ev: dict[str, object] = {
            **where,
            "basis": basis,
            "bases": sorted({d[3] for d in u.disputes}),
            "disputed_cases": len(u.disputes),
            "cases_compared": row.digests - u.lonely - len(u.undecided),
            "first_disputed_case": case,
            "workload": workload,
            "digest": digest,
            "reference_digest": against,
            "hosts_voted": hosts_voted,
            "units_voted": units_voted,
            "sides": sides.in_host(u.report, key, case, against) if basis == HOST else sides.of(key, case),
            "workloads": sorted({d[4] for d in u.disputes}),
            "group": gid,
        }
        kinds = _own_blame(row)
        if kinds:
            ev["own_run"] = fleet_compare._own_run_record(self._reports[u.report], _unit_record(row), kinds)
        return ev

    def _whole_hosts(self, key: int, candidates: dict[int, list[_Unit]]) -> set[int]:
        """Hosts all of whose units of the group (at least 2) are divergent with the same digests."""
        candidates = {h: us for h, us in candidates.items() if len(us) >= 2}
        if not candidates:
            return set()
        with self.db.wanted(candidates) as wanted:
            held = dict(
                self.db.rows(
                    f"SELECT u.report, COUNT(*) FROM current_units u JOIN {wanted} w ON u.report = w.report "
                    "WHERE u.comparison_group = ? GROUP BY u.report",
                    [key],
                )
            )
        candidates = {h: us for h, us in candidates.items() if held.get(h) == len(us)}
        if not candidates:
            return set()
        sigs = self._signatures(key, [u for us in candidates.values() for u in us])
        return {h for h, us in candidates.items() if len({sigs[(h, u.unit)] for u in us}) == 1}

    def _partitions(self, key: int, divergent: list[_Unit], first_id: int) -> list[PartitionGroup]:
        """`compare._partitions`: units sharing a wrong digest of a case, numbered in `summarize`'s order
        (by the signature order of each group's first unit, which only matters with two groups or more)."""
        minorities = {k: [(d[0], d[1]) for d in u.disputes] for k, u in enumerate(divergent)}
        comps = [c for c in partition_components(minorities, order=lambda k: k) if len(c) >= 2]
        if len(comps) > 1:
            order = self._judged_order(key, [divergent[k] for c in comps for k in c])
            rank = {k: order[(divergent[k].report, divergent[k].unit)] for c in comps for k in c}
            comps.sort(key=lambda c: min(rank[k] for k in c))
        out: list[PartitionGroup] = []
        for comp in comps:
            members = [(self._reports[divergent[k].report], divergent[k].unit) for k in comp]
            out.append(
                fleet_compare.partition_record(
                    f"G{first_id + len(out)}",
                    _where(self.groups[key]),
                    [minorities[k] for k in comp],
                    members,
                )
            )
        return out

    def _judged_order(
        self, key: int, units: list[_Unit]
    ) -> dict[tuple[int, str], tuple[tuple[tuple[int, ...], tuple[str, ...]], str, str]]:
        """`CohortConsensus.judge`'s order of some units: by signature, then host, then unit."""
        sigs = self._signatures(key, units)
        return {k: (signature_order(sig), self._reports[k[0]].key, k[1]) for k, sig in sigs.items()}

    def _signatures(self, key: int, units: list[_Unit]) -> dict[tuple[int, str], Signature]:
        """The (case indices, digests) of some units of a group (`consensus.signature`)."""
        cols: dict[tuple[int, str], tuple[list[int], list[str | None]]] = {
            (u.report, u.unit): ([], []) for u in units
        }
        with self.db.wanted(u.report for u in units) as wanted:
            rows = self.db.rows(
                f"SELECT c.report, c.unit, c.case_index, c.digest FROM cases c JOIN {wanted} w ON c.report = w.report "
                "WHERE c.comparison_group = ? ORDER BY c.report, c.unit, c.case_index",
                [key],
            )
        for report, unit, case, digest in rows:
            if (report, unit) in cols:
                cols[(report, unit)][0].append(case)
                cols[(report, unit)][1].append(digest)
        return {k: (tuple(i), tuple(d)) for k, (i, d) in cols.items()}

    def _own_run(
        self, key: int, members: dict[tuple[int, str], _Unit], reported: set[tuple[int, str]]
    ) -> None:
        """`compare._own_run`: units their own run named failing on consensus, with no dispute here,
        are still divergent, unless a golden covering every digest they produced clears them."""
        entry = (self.opts.golden or {}).get(self.groups[key])
        rows = [
            row
            for k, row in self.units.items()
            if row.convicted and row.comparison_group == key and k not in reported
        ]
        rows.sort(key=lambda row: (self._reports[row.report].key, self._reports[row.report].run_id, row.unit))
        for row in rows:
            kinds = _own_blame(row)
            if not set(kinds) & fleet_compare.OWN_RUN_CONSENSUS:
                continue
            u = members.get((row.report, row.unit)) or _Unit(row.report, row.unit)
            if entry and u.golden_covered == row.digests:
                continue  # matched the golden on every case (a dispute would have been reported)
            r = self._reports[row.report]
            ev = {
                **_where(self.groups[key]),
                "basis": "own run",
                "bases": ["own run"],
                "disputed_cases": 0,
                "cases_compared": row.digests - u.lonely,
                "group": None,
                "own_run": fleet_compare._own_run_record(r, _unit_record(row), kinds),
            }
            self.col.add(r, row.unit, "divergent", ev)

    def _undecided_evidence(
        self, r: HostReport, items: list[tuple[int, _Unit]], sides: _Sides
    ) -> dict[str, object]:
        """`compare._undecided_evidence` from the outcome rows."""
        cases = {(key, c[0]) for key, u in items for c in u.undecided}
        units = sorted({u.unit for _, u in items}, key=unit_order)
        key, u = min(items, key=lambda it: (it[1].undecided[0][0], it[1].unit))
        first, vote, workload = u.undecided[0]
        return fleet_compare.undecided_record(
            r,
            self.groups[key][1],
            cases=len(cases),
            units=units,
            first=(first, workload, vote),
            voters=sides.voters(key, first),
            sides=sides.of(key, first),
            host_counts=sides.host_counts(key, first),
        )

    # -- slow units ----------------------------------------------------------------------------------

    def _slow(self) -> None:
        """`perf.slow_findings` over each host's newest report per profile, one group at a time: the
        reference from all of a group's samples, the evidence from the reports holding a slow unit."""
        opts, db = self.opts, self.db
        refs: dict[perf.GroupKey, perf.Reference] = {}
        suspects: set[tuple[int, str]] = set()
        in_group = "profile_sha256 = ? AND cohort = ? AND workload = ? AND measure = ?"
        for sha, cohort, workload, measure, n in db.rows(
            "SELECT profile_sha256, cohort, workload, measure, COUNT(*) FROM slow_samples "
            "GROUP BY profile_sha256, cohort, workload, measure"
        ):
            key = (sha, cohort, workload, measure)
            if n < opts.slow_min_units:
                continue
            values = db.column(f"SELECT reading FROM slow_samples WHERE {in_group} ORDER BY reading", key)
            ref = perf.healthy_reference(values, z=opts.slow_z, drop=opts.slow_drop)
            if ref is None:
                continue
            refs[key] = ref
            cut = ref.median * (1.0 - opts.slow_drop)  # only these can be slow
            for report, unit, x in db.rows(
                f"SELECT report, unit, reading FROM slow_samples WHERE {in_group} AND reading <= ?",
                [*key, cut],
            ):
                if ref.is_slow(x):
                    suspects.add((report, unit))
        if suspects:
            self._slow_findings(suspects, refs)

    def _slow_findings(
        self, suspects: set[tuple[int, str]], refs: dict[perf.GroupKey, perf.Reference]
    ) -> None:
        with self.db.wanted(report for report, _ in suspects) as wanted:
            rows = self.db.rows(
                "SELECT s.report, s.unit, s.cohort, s.workload, s.reading, s.reading_unit "
                f"FROM slow_samples s JOIN {wanted} w ON s.report = w.report WHERE s.measure = 'ops_per_s'"
            )
        readings: dict[int, dict[tuple[str, str], list[tuple[str, float, str]]]] = {}
        for report, unit, cohort, workload, x, value_unit in rows:
            readings.setdefault(report, {}).setdefault((unit, cohort), []).append((workload, x, value_unit))
        known = self.reports(readings)
        hosts = []
        for report, by_unit in readings.items():
            units = [
                replace(_bare_unit(unit, cohort), throughput=tuple(sorted(tp)))
                for (unit, cohort), tp in by_unit.items()
            ]
            hosts.append((_with_units(known[report], sorted(units, key=lambda u: u.unit)), report))
        hosts.sort(key=lambda h: (h[0].key, h[0].plan[0]))  # `perf._newest_per_host`'s order
        for r, report in hosts:
            slow = [
                (u, ev)
                for u in r.units
                if (report, u.unit) in suspects and (ev := perf._unit_evidence(r, u, refs)) is not None
            ]
            if slow:
                perf._add_host_or_units(r, slow, refs, self.col)


class _Sides:
    """Who stood where on the cases findings cite (fetched once, for all of them)."""

    def __init__(self, db: _Database) -> None:
        self.digests: dict[tuple[int, int], list[tuple[str, int, int]]] = {}
        for key, case, digest, units, hosts in db.rows(CASE_SIDES):
            self.digests.setdefault((key, case), []).append((digest, units, hosts))
        self.totals = {(key, case): (hosts, units) for key, case, hosts, units in db.rows(CASE_TOTALS)}
        self._sides: dict[tuple[int, int], list[Side]] = {}
        self.host: dict[tuple[int, int, int], dict[str, int]] = {}
        for report, key, case, digest, units in db.rows(HOST_SIDES):
            self.host.setdefault((report, key, case), {})[digest] = units

    def of(self, key: int, case: int) -> list[Side]:
        """`CohortConsensus.sides`: per digest, its host votes and units, most hosts first.

        Made once per case and shared by every finding that cites it (nothing mutates evidence): in a
        fleet of a million hosts a case has thousands of digests and is cited by thousands of findings.
        """
        made = self._sides.get((key, case))
        if made is None:
            rows = sorted((-h, -n, d) for d, n, h in self.digests.get((key, case), []))
            made = self._sides[(key, case)] = [{"digest": d, "hosts": -h, "units": -n} for h, n, d in rows]
        return made

    def host_counts(self, key: int, case: int) -> dict[str, int]:
        """digest -> hosts that voted for it (digests no host voted for are left out)."""
        return {d: h for d, _, h in self.digests.get((key, case), []) if h}

    def voters(self, key: int, case: int) -> tuple[int, int]:
        """(hosts that voted, units that produced a digest) on a case."""
        return self.totals.get((key, case), (0, 0))

    def in_host(self, report: int, key: int, case: int, vote: str) -> list[Side]:
        """One host's units per digest on a case, its vote first (`compare._divergent_evidence`)."""
        counts = self.host.get((report, key, case), {})
        order = sorted(counts, key=lambda d: (d != vote, -counts[d], d))
        return [{"digest": d, "units": counts[d]} for d in order]


# ---------------------------------------------------------------------------------------------------
# Light records for the helpers shared with `summarize`.


# A REPORT_COLUMNS row: (report, host_key, hostname, machine_id, source, sha256, run_id, profile_name,
# profile_sha256, seed, ended_at, verdict).
ReportRow = tuple[int, str, str, "str | None", str, str, str, str, str, int, float, str]


def _host_report(row: ReportRow, units: tuple[UnitRecord, ...] = ()) -> HostReport:
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


def _with_units(r: HostReport, units: Sequence[UnitRecord]) -> HostReport:
    return replace(r, units=tuple(units))


def _bare_unit(unit: str, cohort: str) -> UnitRecord:
    return UnitRecord(unit, cohort, "pass", None, (), (), (), (), None)


def _unit_record(row: _UnitRow) -> UnitRecord:
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
    return UnitRecord(row.unit, row.cohort, row.verdict, row.reason, (), (), (), (), invariant, row.retest)


def _own_blame(row: _UnitRow) -> tuple[str, ...]:
    """`HostReport.own_blame` of a unit row: its run's convicting finding kinds when its verdict is fail."""
    return tuple(row.own_run_findings or ()) if row.verdict == "fail" else ()


def _stand_in(indices: tuple[int, ...], digests: tuple[str | None, ...]) -> tuple[UnitRecord, ...]:
    return (UnitRecord("stand-in", "", "pass", None, indices, digests, ("",) * len(indices), (), None),)


# What `coverage.not_covering` looks at, by what a report's units tested (`_tested`).
_STAND_INS: dict[str, tuple[UnitRecord, ...]] = {
    "no unit": (),
    "no case": _stand_in((), ()),
    "no digest": _stand_in((0,), (None,)),
    "tested": _stand_in((0,), ("",)),
}


def _tested(units: int, case_rows: int, tested_units: int) -> str:
    if not units:
        return "no unit"
    if not case_rows:
        return "no case"
    return "tested" if tested_units else "no digest"


def _where(group: Group) -> Where:
    (sha, seed), cohort = group
    return {"profile_sha256": sha, "seed": seed, "cohort": cohort}
