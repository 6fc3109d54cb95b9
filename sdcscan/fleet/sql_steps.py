"""The fleet rules, once: the SQL steps every `compare` runs, over the tables `sdcscan ingest` writes.

The rules (read `fleet.consensus` for the vote's constants and why they are what they are):

  1. Inputs in order (REPORT_STEPS): one copy of each (hostname, machine id, run id): the newest, then
     the one with most cases, then the smallest hash and path; machines sharing a hostname kept apart as
     `NAME (machine ID)`; one report per host and plan votes, the newest; the older ones are superseded.
  2. Votes (VOTE_STEPS), within each comparison group (plan and cohort): per case, the units behind
     each digest; per host, the strict majority of its voting units (units its own run convicted do
     not vote); per digest, the hosts that voted for it. A case is settled by the golden, else by
     agreement, else by the hosts: at least MIN_HOSTS voting, the winner holding more than
     SUPERMAJORITY_NUM/SUPERMAJORITY_DEN of them and leading the runner-up by MIN_LEAD. Else it is open.
  3. Outcomes (`unit_case_outcomes`): a digest that differs from its case's reference is a dispute. On
     an open case a digest that differs from its own host's vote is a dispute too, unless every other
     host that voted on the case holds that digest: then the fleet stands with the unit against its
     host, and the case is undecided, not the unit divergent. On an open case split among hosts, or
     where its host's units tie, the case is undecided.
  4. Speed (`slow_samples`): each host's RECENT_REPORTS newest current reports per profile give the
     samples (`fleet.slow` judges them).

The heavy step is the host vote, one group per (host, comparison group, case), over integer keys only.
It keeps a summary: hosts whose units all agree on a case (nearly all) collapse into one row per
(case, digest); the few (host, case) pairs where units differ keep a row each and are judged from
their own rows (`mixed_rows`).

Only portable SQL: SELECT with joins, GROUP BY, CASE, COALESCE, `||`, ROW_NUMBER and SUM windows, no
engine's own functions, so DuckDB and Spark run the same text (`fleet.engine`, `fleet.engine_spark`).
Each step is a module constant, registered as a view (or a table where later steps read it more than
once); `sql_script` prints them for another engine. Base tables: reports, units, cases, throughput,
calibrations, sentinel_sections, sentinel_outliers (`fleet.tables.SCHEMA`) and golden (GOLDEN_COLUMNS;
empty without --golden). The sentinel steps are `fleet.sentinel_steps`'s.
"""

from __future__ import annotations

from sdcscan.fleet.consensus import (
    AGREED,
    FLEET,
    GOLDEN,
    HOST,
    MIN_HOSTS,
    MIN_LEAD,
    SUPERMAJORITY_DEN,
    SUPERMAJORITY_NUM,
)
from sdcscan.fleet.perf import MEASURES
from sdcscan.fleet.sentinel_steps import SENTINEL_RESULTS, SENTINEL_STEPS

RECENT_REPORTS = 3  # a host's newest reports per profile whose speed counts (`slow_samples`)

CASE_KEY = "comparison_group, case_index"


def on(left: str, right: str, columns: str = CASE_KEY) -> str:
    """`l.a = r.a AND l.b = r.b` for a comma-separated column list."""
    return " AND ".join(f"{left}.{c.strip()} = {right}.{c.strip()}" for c in columns.split(","))


REPORT_COPIES = """
SELECT report, source, sha256, hostname, machine_id, run_id, profile_name, profile_sha256, seed,
       ended_at, verdict, units, case_rows, tested_units,
       ROW_NUMBER() OVER (PARTITION BY hostname, COALESCE(machine_id, ''), run_id, profile_sha256, seed
                          ORDER BY ended_at DESC, case_rows DESC, sha256, source) AS copy_rank
FROM reports"""

DUPLICATE_REPORTS = """
SELECT d.source, d.sha256, k.source AS kept_source, k.sha256 AS kept_sha256
FROM report_copies d
JOIN report_copies k
  ON k.copy_rank = 1 AND d.hostname = k.hostname AND d.run_id = k.run_id
 AND COALESCE(d.machine_id, '') = COALESCE(k.machine_id, '')
 AND d.profile_sha256 = k.profile_sha256 AND d.seed = k.seed
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
  AND EXISTS (SELECT 1 FROM host_case_summary m WHERE m.mixed_report = c.report AND {on("m", "c")})"""

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
FLEET_DECIDES = (
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
            WHEN {FLEET_DECIDES} THEN t.digest_key END AS reference,
       CASE WHEN g.digest IS NOT NULL THEN '{GOLDEN}'
            WHEN f.digests = 1 THEN '{AGREED}'
            WHEN {FLEET_DECIDES} THEN '{FLEET}' END AS basis,
       (g.digest IS NULL AND f.units < 2) AS lonely
FROM case_facts f
LEFT JOIN golden g ON {on("g", "f")}
LEFT JOIN case_host_ranks t ON {on("t", "f")} AND t.place = 1
LEFT JOIN case_host_ranks s ON {on("s", "f")} AND s.place = 2"""

# The rows the assembler needs: each digest that differs from its reference, each digest on an open
# case, each digest on a case only one unit ran (for `cases_compared`), and each row of a unit its own
# run convicted. `outcome`: the basis of a dispute (golden, fleet, host), 'undecided', or null;
# `against`: the digest disputed. `host_vote` is the host's vote where it matters (null for convicted
# rows of hosts whose units agree). `fleet_backs`: on an open case, every other host that voted holds
# this digest (at least one did): its own host's majority does not make the unit divergent then.
UNIT_CASE_JUDGED = f"""
SELECT j.report, j.comparison_group, j.unit, j.case_index, j.workload, j.digest, j.voter, j.lonely,
       j.golden_digest, j.host_vote,
       CASE WHEN j.reference IS NOT NULL THEN CASE WHEN j.digest_key <> j.reference THEN j.basis END
            WHEN j.mixed AND j.host_vote IS NOT NULL AND j.digest_key <> j.host_vote AND NOT j.fleet_backs
            THEN '{HOST}'
            WHEN NOT j.voter THEN NULL
            WHEN (j.mixed AND j.host_vote IS NULL) OR j.split THEN 'undecided' END AS outcome,
       CASE WHEN j.reference IS NOT NULL THEN j.reference ELSE j.host_vote END AS against
FROM (SELECT c.report, c.comparison_group, c.unit, c.case_index, c.workload, c.digest, c.digest_key,
             c.voter, c.reference, c.basis, c.lonely, c.golden_digest,
             (c.reference IS NULL AND c.host_digests > 1) AS split,
             (c.reference IS NULL AND COALESCE(b.hosts, 0) >= 1 AND COALESCE(b.hosts, 0) = c.hosts_voted - 1)
               AS fleet_backs,
             m.report IS NOT NULL AS mixed,
             CASE WHEN m.report IS NOT NULL THEN v.digest_key WHEN c.voter THEN c.digest_key END AS host_vote
      FROM (SELECT c0.report, c0.comparison_group, c0.unit, c0.case_index, c0.workload, c0.digest,
                   c0.digest_key, c0.voter, f.reference, f.basis, f.lonely, f.host_digests, f.hosts_voted,
                   f.golden_digest
            FROM current_cases c0 JOIN case_reference f ON {on("c0", "f")}
            WHERE c0.digest_key IS NOT NULL
              AND (f.reference IS NULL OR c0.digest_key <> f.reference OR f.lonely OR NOT c0.voter)) c
      LEFT JOIN (SELECT DISTINCT report, {CASE_KEY} FROM mixed_rows) m
        ON m.report = c.report AND {on("m", "c")}
      LEFT JOIN mixed_votes v ON v.report = c.report AND {on("v", "c")}
      LEFT JOIN case_digest_hosts b ON {on("b", "c")} AND b.digest_key = c.digest_key) j"""

# ... with the keys turned back into digests (a golden's digest may be one no unit produced).
UNIT_CASE_OUTCOMES = f"""
SELECT j.report, j.comparison_group, j.unit, j.case_index, j.workload, j.digest, j.voter, j.lonely,
       j.golden_digest IS NOT NULL AS golden_covered, j.outcome,
       h.digest AS host_vote,
       CASE WHEN j.outcome = '{GOLDEN}' THEN j.golden_digest ELSE a.digest END AS against
FROM unit_case_judged j
LEFT JOIN case_digest_units h ON {on("h", "j")} AND h.digest_key = j.host_vote
LEFT JOIN case_digest_units a ON {on("a", "j")} AND a.digest_key = j.against"""

# Speed samples of each host's RECENT_REPORTS newest current reports per profile (`recency` 1 is the
# newest): the newest gives the cohort's reference (one sample per host: a re-run adds no peer) and says
# whether a unit is slow now; the older ones add evidence against a unit that is slow run after run.
SLOW_SAMPLES = f"""
SELECT t.report, r.host_key, r.recency, t.unit, t.profile_sha256, t.cohort, t.workload, t.measure, t.reading,
       t.reading_unit
FROM throughput t
JOIN (SELECT report, host_key, recency
      FROM (SELECT report, host_key, ROW_NUMBER() OVER (PARTITION BY host_key, profile_sha256
                                                        ORDER BY ended_at DESC, run_id DESC) AS recency
            FROM current_reports) n
      WHERE recency <= {RECENT_REPORTS}) r
  ON t.report = r.report
WHERE t.measure IN ({", ".join(f"'{m}'" for m in MEASURES)})"""  # speeds only: never checked ops

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
      FROM current_cases c JOIN golden g ON {on("c", "g")}
      WHERE c.digest IS NOT NULL) j
GROUP BY comparison_group"""
CITED_CASES = f"SELECT DISTINCT {CASE_KEY} FROM unit_case_outcomes WHERE outcome IS NOT NULL"
# Who stood where on the cases findings cite: units and host votes per digest, and the totals.
CASE_SIDES = f"""
SELECT d.comparison_group, d.case_index, d.digest, d.units, COALESCE(h.hosts, 0) AS hosts
FROM case_digest_units d
JOIN ({CITED_CASES}) n ON {on("d", "n")}
LEFT JOIN case_digest_hosts h ON {on("h", "d")} AND h.digest_key = d.digest_key"""
CASE_TOTALS = f"""
SELECT r.comparison_group, r.case_index, r.hosts_voted, r.units
FROM case_reference r JOIN ({CITED_CASES}) n ON {on("r", "n")}"""
HOST_SIDES = f"""
SELECT r.report, r.comparison_group, r.case_index, r.digest, COUNT(*) AS units
FROM mixed_rows r
JOIN (SELECT DISTINCT report, {CASE_KEY} FROM unit_case_outcomes WHERE outcome = '{HOST}') n
  ON n.report = r.report AND {on("n", "r")}
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

# The reference digest of every case (what a golden records), the units behind it, and the workload.
CASE_REFERENCES = f"""
SELECT r.comparison_group, r.case_index, r.units, d.digest, d.units AS votes, w.workload
FROM case_reference r
JOIN (SELECT {CASE_KEY}, MIN(workload) AS workload FROM current_cases WHERE digest_key IS NOT NULL
      GROUP BY {CASE_KEY}) w ON {on("w", "r")}
LEFT JOIN case_digest_units d ON {on("d", "r")} AND d.digest_key = r.reference"""
# The host votes on each open case (why a golden refuses it).
OPEN_CASE_HOSTS = f"""
SELECT h.comparison_group, h.case_index, h.digest_key, h.hosts
FROM case_digest_hosts h JOIN case_reference r ON {on("r", "h")}
WHERE r.reference IS NULL"""

# What the checks of passing units covered (sdcscan.proof), per (profile, cohort, workload), over the
# current reports: units whose own run passed and that no case outcome here disputes. Each unit's checked
# ops come as two whole numbers (`fleet.convert.checked_measures`) whose integer sums are exact in any
# order and engine. `detected` < `unit_rows`: some unit gave no detection, so the cohort gets no bound.
CHECKED_OPS = f"""
SELECT r.profile_sha256, MIN(r.profile_name) AS profile, h.cohort, h.workload, MIN(h.reading_unit) AS op,
       COUNT(DISTINCT r.host_key || ' ' || h.unit) AS units,
       SUM(CAST(h.reading AS BIGINT)) AS ops_high, SUM(CAST(l.reading AS BIGINT)) AS ops_low,
       COUNT(d.reading) AS detected, COUNT(*) AS unit_rows, MIN(d.reading) AS detection
FROM throughput h
JOIN throughput l
  ON l.report = h.report AND l.unit = h.unit AND l.workload = h.workload AND l.measure = 'checked_ops_low'
JOIN current_reports r ON h.report = r.report
JOIN units u ON u.report = h.report AND u.unit = h.unit
LEFT JOIN throughput d
  ON d.report = h.report AND d.unit = h.unit AND d.workload = h.workload AND d.measure = 'detection'
WHERE h.measure = 'checked_ops_high' AND u.verdict = 'pass'
  AND NOT EXISTS (SELECT 1 FROM unit_case_outcomes o
                  WHERE o.report = h.report AND o.unit = h.unit AND o.outcome IN ('{GOLDEN}', '{FLEET}', '{HOST}'))
GROUP BY r.profile_sha256, h.cohort, h.workload"""

RESULTS = {
    "checked_ops": CHECKED_OPS,
    "comparison_groups": COMPARISON_GROUPS,
    "group_units": GROUP_UNITS,
    "group_cases_compared": GROUP_CASES_COMPARED,
    "golden_judged_units": GOLDEN_JUDGED_UNITS,
    "case_sides": CASE_SIDES,
    "case_totals": CASE_TOTALS,
    "host_sides": HOST_SIDES,
    "host_calibrations": HOST_CALIBRATIONS,
    "case_references": CASE_REFERENCES,
    "open_case_hosts": OPEN_CASE_HOSTS,
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
