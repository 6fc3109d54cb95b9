"""The history database's schema, its versions, and the migration from one version to the next.

Version 1 held runs, per-unit verdicts and sticky flags. Version 2 adds what Ripple and Hardware
Sentinel need: the seconds of cases each unit ran (`unit_results.screened_s`, for coverage per day),
whether a run was a background one (`runs.background`), and the kernel-log scans (`sentinel_scans`).

Readers accept every version in READABLE_VERSIONS and never change the file (a version-1 history
simply has no coverage seconds and no sentinel scans). The first writer migrates an older version
inside its own immediate transaction, so a migration is all or nothing and no run or flag is lost.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sdcscan.errors import UsageError

DB_VERSION = 2
READABLE_VERSIONS = frozenset({1, 2})
_TABLES_V1 = frozenset({"runs", "unit_results", "flags"})
_TABLES = {1: _TABLES_V1, 2: _TABLES_V1 | {"sentinel_scans"}}

_SENTINEL_TABLE = """
CREATE TABLE IF NOT EXISTS sentinel_scans (
    id INTEGER PRIMARY KEY AUTOINCREMENT, recorded_at TEXT NOT NULL, host TEXT, since TEXT, until TEXT,
    sources TEXT, events INTEGER, outliers TEXT, section TEXT)
"""
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL UNIQUE, recorded_at TEXT NOT NULL,
    started_at TEXT, ended_at TEXT, host TEXT, profile TEXT, seed INTEGER, verdict TEXT NOT NULL,
    exit_code INTEGER, report_path TEXT, background INTEGER);
CREATE TABLE IF NOT EXISTS unit_results (
    run INTEGER NOT NULL REFERENCES runs(id), unit TEXT NOT NULL, verdict TEXT NOT NULL, reason TEXT,
    cases_run INTEGER, mismatches INTEGER, screened_s REAL, PRIMARY KEY (run, unit));
CREATE TABLE IF NOT EXISTS flags (
    id INTEGER PRIMARY KEY AUTOINCREMENT, unit TEXT NOT NULL, host TEXT, run_id TEXT NOT NULL,
    flagged_at TEXT NOT NULL, reason TEXT, failures INTEGER NOT NULL DEFAULT 1, last_run_id TEXT,
    cleared_at TEXT, clear_reason TEXT, cleared_by TEXT);
CREATE INDEX IF NOT EXISTS flags_open ON flags(unit) WHERE cleared_at IS NULL;
{_SENTINEL_TABLE};
"""
# What version 1 lacks. ALTER TABLE ... ADD COLUMN leaves existing rows NULL: "not recorded".
_ADDED_COLUMNS = (("unit_results", "screened_s", "REAL"), ("runs", "background", "INTEGER"))


def check_schema(conn: sqlite3.Connection, path: Path) -> int:
    """The version of the sdcscan history behind `conn`, one this sdcscan reads.

    Raises:
        UsageError: not an sdcscan history (no version, or tables missing), or a version not in
            READABLE_VERSIONS. sqlite3.Error: the file cannot be read.
    """
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    tables = table_names(conn)
    if version == 0 or not _TABLES_V1.issubset(tables):
        raise UsageError(f"history {path} is an SQLite database but not an sdcscan history")
    if version not in READABLE_VERSIONS:
        raise UsageError(f"history {path} has version {version}; this sdcscan reads version {DB_VERSION}")
    if not _TABLES[version].issubset(tables):
        raise UsageError(f"history {path} is an SQLite database but not an sdcscan history")
    return version


def table_names(conn: sqlite3.Connection) -> set[str]:
    """The tables of the database behind `conn`."""
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def has_column(conn: sqlite3.Connection, table: str, column: str) -> bool:
    """Whether `table` has `column` (a version-1 history lacks the coverage columns)."""
    return any(r[1] == column for r in conn.execute(f"PRAGMA table_info({table})"))


def build_schema(db_file: str) -> None:
    """Create every table of DB_VERSION in the new, empty database file `db_file`, in one transaction."""
    conn = sqlite3.connect(db_file, isolation_level=None)
    try:
        conn.execute("BEGIN")
        for statement in filter(str.strip, SCHEMA.split(";")):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version={DB_VERSION}")
        conn.execute("COMMIT")
    finally:
        conn.close()


def migrate(conn: sqlite3.Connection, version: int) -> None:
    """Bring a history of `version` up to DB_VERSION, inside the caller's open (immediate) transaction.

    Every step checks what is there first, so a file someone half-migrated by hand still ends complete.

    Raises:
        sqlite3.DatabaseError: `version` is not one this sdcscan can migrate (a newer one included).
    """
    if version == DB_VERSION:
        return
    if version != 1:
        raise sqlite3.DatabaseError(f"history version {version}; this sdcscan writes {DB_VERSION}")
    for table, column, kind in _ADDED_COLUMNS:
        if not has_column(conn, table, column):
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    conn.execute(_SENTINEL_TABLE)
    conn.execute(f"PRAGMA user_version={DB_VERSION}")  # part of the transaction: rolled back with it
