"""The tables of a fleet: their columns, the keys that join them, and where a report's rows go.

The same tables hold a fleet whether `sdcscan ingest` wrote them as a Parquet dataset
(`fleet.dataset`) or `compare FILES` holds them in memory (`fleet.convert`); every engine runs the steps
(`fleet.sql_steps`) over them. The dataset's layout and what each table holds are in `fleet.dataset`.

pyarrow is imported inside the functions that need it: importing this module costs nothing, and a
missing pyarrow is a one-line usage error (`require_fleet_extra`).
"""

from __future__ import annotations

import hashlib
import importlib
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from sdcscan.errors import UsageError

FORMAT = "sdcscan-fleet-parquet"
# 2: the sentinel tables (a version-1 dataset lacks its reports' kernel-log evidence); 3: units' `part`.
FORMAT_VERSION = 3
MARKER = "sdcscan-fleet.json"
INSTALL_HINT = "pip install 'sdcscan[fleet]'"  # the extra that brings them (a screened host needs neither)
# Written in this order at commit: a `reports` row is what makes a report's other rows count.
CHECKED_SPLIT = 2**32  # a unit's checked ops = high * CHECKED_SPLIT + low (`convert.checked_measures`)
TABLES = ("cases", "units", "throughput", "calibrations", "sentinel_sections", "sentinel_outliers", "reports")
SKIPPED_TABLE = "skipped"
_HEX64 = re.compile(r"[0-9a-f]{64}")

# Columns of every table: (name, type). Types are Arrow's; in SQL: int64 BIGINT, float64 DOUBLE,
# string VARCHAR, bool BOOLEAN, list<string> ARRAY(VARCHAR). Kept as plain data so that importing
# this module needs no pyarrow, and docs/fleet_sql.md can be checked against it.
SCHEMA: dict[str, tuple[tuple[str, str], ...]] = {
    "reports": (
        ("report", "int64"),  # this ingest's id of the report: the key of every table
        ("source", "string"),  # the file it was read from
        ("sha256", "string"),  # of the file's (gunzipped) bytes
        ("hostname", "string"),
        ("machine_id", "string"),  # null when the report has none
        ("run_id", "string"),
        ("profile_name", "string"),
        ("profile_sha256", "string"),
        ("seed", "int64"),
        ("ended_at", "float64"),  # POSIX seconds, UTC
        ("verdict", "string"),
        ("units", "int64"),
        ("case_rows", "int64"),  # cases over all units (a duplicate with more cases is kept)
        ("tested_units", "int64"),  # units that left a digest or failed an invariant check
    ),
    "units": (
        ("report", "int64"),
        ("profile_sha256", "string"),
        ("seed", "int64"),
        ("comparison_group", "int64"),  # `comparison_group(profile_sha256, seed, cohort)`
        ("unit", "string"),
        ("cohort", "string"),
        ("verdict", "string"),
        ("reason", "string"),
        ("retest", "string"),  # the run's re-test classification, or null
        ("convicted", "bool"),  # the host's own run named it failing: it does not vote
        ("own_run_findings", "list<string>"),  # the finding kinds by which its run named it
        ("case_rows", "int64"),
        ("digests", "int64"),  # cases that left a digest to compare
        ("invariant_mismatches", "int64"),  # null when no invariant check failed
        ("invariant_first_case", "int64"),
        ("invariant_workloads", "list<string>"),
        ("invariant_checks", "list<string>"),
        ("part", "string"),  # the physical part in words (socket and core; serial and UUID), or null
    ),
    "cases": (
        ("report", "int64"),
        ("profile_sha256", "string"),
        ("seed", "int64"),
        ("cohort", "string"),
        ("comparison_group", "int64"),  # the SQL groups and joins on this, never on the strings
        ("unit", "string"),
        ("case_index", "int64"),
        ("workload", "string"),
        ("digest", "string"),  # null: the case left no comparable digest
        ("digest_key", "int64"),  # `digest_key(digest)`: what the SQL votes with (integers are fast)
        ("voter", "bool"),  # false for units their own run convicted
    ),
    "throughput": (
        ("report", "int64"),
        ("profile_sha256", "string"),
        ("seed", "int64"),
        ("cohort", "string"),
        ("unit", "string"),
        ("workload", "string"),
        (
            "measure",
            "string",
        ),  # speeds (fleet.perf.MEASURES), `checked_ops_high`/`_low` and `detection` (sdcscan.proof)
        ("reading", "float64"),
        ("reading_unit", "string"),
    ),
    "calibrations": (
        ("report", "int64"),
        ("profile_sha256", "string"),
        ("seed", "int64"),
        ("cohort", "string"),
        ("unit", "string"),
        ("dtype", "string"),
        ("checker", "string"),
        ("k", "string"),  # gemm_fp's K, in decimal: a report may hold any integer
        ("e_max", "float64"),
    ),
    # A report's kernel-log evidence, as `fleet.sentinel.read_section` keeps it (`compare --from` gives
    # the `sentinel` findings `compare` gives: `fleet.sentinel_steps`).
    "sentinel_sections": (
        ("report", "int64"),  # one row per report whose `sentinel` section is an object
        ("cpu_model", "string"),  # host.cpu_model as `compare` keeps it (groups hosts), or null
        ("since", "string"),  # the kernel-log window the section says it read, or null
        ("until", "string"),
    ),
    "sentinel_outliers": (
        ("report", "int64"),
        ("unit", "string"),  # `cpu:N`
        ("programs", "int64"),  # distinct programs that crashed on it; null: not a count in the report
        ("expected", "float64"),  # what its peers make likely, or null
        ("p_value", "float64"),  # or null
        ("examples", "list<string>"),  # a few program names
    ),
    SKIPPED_TABLE: (("path", "string"), ("reason", "string")),
}

Partition = str  # `plan=PLAN/ended_on=DAY`
UNPARTITIONED = "plan=all/ended_on=all"  # the one partition of the rows `compare FILES` converts


def require_fleet_extra() -> None:
    """Check that pyarrow and duckdb can be imported.

    Raises:
        UsageError: one of them is missing (exit 2), with the command that installs them.
    """
    try:
        for name in ("pyarrow", "pyarrow.parquet", "duckdb"):
            importlib.import_module(name)
    except ImportError as err:
        raise UsageError(
            f"comparing a fleet needs pyarrow and duckdb ({err.name or 'one'} is not installed): {INSTALL_HINT}"
        ) from None


def arrow() -> Any:
    """The pyarrow module (imported here, on first use, and typed Any: pyarrow ships no type hints)."""
    return importlib.import_module("pyarrow")


def arrow_schema(table: str | Sequence[tuple[str, str]]) -> Any:
    """The pyarrow schema of `table` (a key of SCHEMA), or of a list of (name, type) columns."""
    pa = arrow()

    types = {
        "int64": pa.int64(),
        "float64": pa.float64(),
        "string": pa.string(),
        "bool": pa.bool_(),
        "list<string>": pa.list_(pa.string()),
    }
    columns = SCHEMA[table] if isinstance(table, str) else table
    return pa.schema([(name, types[kind]) for name, kind in columns])


def partition_of(plan: tuple[str, int], ended_at: float) -> Partition:
    """The directory of a report's rows: `plan=SHA256-SEED/ended_on=YYYY-MM-DD`.

    A profile hash that is not 64 lower-case hex digits (a hand-made report) is named by its own
    hash instead: a partition name must never carry `/`, `=` or `..` from a file into a path.
    """
    sha, seed = plan
    name = sha if _HEX64.fullmatch(sha) else "h" + hashlib.sha256(sha.encode("utf-8", "replace")).hexdigest()
    try:
        day = datetime.fromtimestamp(ended_at, timezone.utc).date().isoformat()
    except (OverflowError, ValueError, OSError):
        day = "unknown"
    return f"plan={name}-{seed}/ended_on={day}"


def comparison_group(profile_sha256: str, seed: int, cohort: str) -> int:
    """The 63-bit key of a (plan, cohort): its units' digests are compared with each other only.

    An integer, so that grouping 10^9 case rows hashes 8 bytes, not a 64-character profile hash and a
    cohort name. `compare --from` refuses a dataset where two groups share a key.
    """
    text = f"{profile_sha256}\0{seed}\0{cohort}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") >> 1


def report_id(ingest: str, position: int) -> int:
    """A 63-bit id for the report at `position` of one ingest (`compare --from` refuses a collision)."""
    digest = hashlib.blake2b(f"{ingest}:{position}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1
