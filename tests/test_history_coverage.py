"""History version 2: migration from version 1, coverage per window and per UTC day, sentinel scans."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sdcscan.errors import RunError, UsageError
from sdcscan.outputs.history import (
    DB_VERSION,
    check_health,
    coverage,
    coverage_by_day,
    flagged,
    last_sentinel_scan,
    record_run,
    record_sentinel_scan,
    runs,
    status,
)
from sdcscan.outputs.sentinel_history import SECTION_MAX_CHARS
from sdcscan.timefmt import iso_utc, parse_iso_utc
from tests.helpers.reports import make_report

NOW = parse_iso_utc("2026-03-10T12:00:00Z")
HOUR = 3600.0

# The schema as sdcscan wrote it at version 1 (before issue 14), verbatim.
_V1_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL UNIQUE, recorded_at TEXT NOT NULL,
    started_at TEXT, ended_at TEXT, host TEXT, profile TEXT, seed INTEGER, verdict TEXT NOT NULL,
    exit_code INTEGER, report_path TEXT);
CREATE TABLE IF NOT EXISTS unit_results (
    run INTEGER NOT NULL REFERENCES runs(id), unit TEXT NOT NULL, verdict TEXT NOT NULL, reason TEXT,
    cases_run INTEGER, mismatches INTEGER, PRIMARY KEY (run, unit));
CREATE TABLE IF NOT EXISTS flags (
    id INTEGER PRIMARY KEY AUTOINCREMENT, unit TEXT NOT NULL, host TEXT, run_id TEXT NOT NULL,
    flagged_at TEXT NOT NULL, reason TEXT, failures INTEGER NOT NULL DEFAULT 1, last_run_id TEXT,
    cleared_at TEXT, clear_reason TEXT, cleared_by TEXT);
CREATE INDEX IF NOT EXISTS flags_open ON flags(unit) WHERE cleared_at IS NULL;
"""


def _v1_history(path: Path) -> None:
    """A version-1 history as the old sdcscan left it: one run in which cpu:1 failed, its flag open."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(_V1_SCHEMA)
    conn.execute(
        "INSERT INTO runs (run_id, recorded_at, started_at, ended_at, host, profile, seed, verdict, "
        "exit_code, report_path) VALUES ('old-1', ?, ?, ?, 'node-a', 'quick', 7, 'fail', 1, NULL)",
        (iso_utc(NOW - HOUR), iso_utc(NOW - 2 * HOUR), iso_utc(NOW - HOUR)),
    )
    for unit, verdict in (("cpu:0", "pass"), ("cpu:1", "fail")):
        conn.execute("INSERT INTO unit_results VALUES (1, ?, ?, NULL, 8, 0)", (unit, verdict))
    conn.execute(
        "INSERT INTO flags (unit, host, run_id, flagged_at, reason, last_run_id) "
        "VALUES ('cpu:1', 'node-a', 'old-1', ?, 'golden mismatch', 'old-1')",
        (iso_utc(NOW - HOUR),),
    )
    conn.execute("PRAGMA user_version=1")
    conn.close()


def _report(run_id: str, ended: float, *, fail_unit: str | None = None) -> dict[str, Any]:
    """The usual two-unit report (8 cases of 0.25 s per unit: 2.0 s screened each) ending at `ended`."""
    return make_report(fail_unit=fail_unit, run_id=run_id, ended_at=iso_utc(ended))


def _version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def test_first_write_migrates_a_version_1_history_keeping_runs_and_open_flags(tmp_path: Path) -> None:
    """A run recorded into a version-1 file migrates it to 2: the old run and its open flag survive."""
    db = tmp_path / "h.sqlite3"
    _v1_history(db)
    record_run(db, _report("new-2", NOW, fail_unit="cpu:1"), None)
    assert _version(db) == DB_VERSION == 2
    listed = runs(db)
    assert [r["run_id"] for r in listed] == ["new-2", "old-1"]
    assert [u["screened_s"] for u in listed[1]["units"]] == [None, None]  # never recorded, not 0
    assert [u["screened_s"] for u in listed[0]["units"]] == [2.0, 2.0]
    assert [(f["unit"], f["run_id"], f["failures"]) for f in flagged(db)] == [("cpu:1", "old-1", 2)]
    check_health(db)


def test_a_failed_first_write_leaves_the_version_1_history_untouched(tmp_path: Path) -> None:
    """The migration runs in the writer's transaction: a write that fails rolls it back with it."""
    db = tmp_path / "h.sqlite3"
    _v1_history(db)
    before = db.read_bytes()
    broken = _report("new-2", NOW)
    del broken["units"][1]["verdict"]
    with pytest.raises(KeyError):
        record_run(db, broken, None)
    assert _version(db) == 1 and db.read_bytes() == before


def test_a_version_1_history_is_read_read_only_with_no_coverage_or_scans(tmp_path: Path) -> None:
    """Readers accept version 1 (status works, coverage empty, no scan) and never migrate or write it."""
    db = tmp_path / "h.sqlite3"
    _v1_history(db)
    db.chmod(0o444)
    before = (db.read_bytes(), db.stat().st_mtime_ns, sorted(os.listdir(tmp_path)))
    state = status(db, now=NOW)
    assert [f["unit"] for f in state["flagged"]] == ["cpu:1"]
    assert state["last_run"]["run_id"] == "old-1" and state["last_run"]["background"] is None
    assert state["coverage_24h"] == {} and state["last_sentinel"] is None
    assert coverage(db, now=NOW) == {} and coverage_by_day(db, now=NOW) == []
    assert last_sentinel_scan(db) is None
    check_health(db)
    assert (db.read_bytes(), db.stat().st_mtime_ns, sorted(os.listdir(tmp_path))) == before


def test_a_newer_version_is_refused_by_readers_and_writers_unchanged(tmp_path: Path) -> None:
    """Version 3 (a newer sdcscan's): one-line UsageError to readers, RunError to writers; not rewritten."""
    db = tmp_path / "h.sqlite3"
    record_run(db, _report("r1", NOW), None)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version=3")
    conn.close()
    before = db.read_bytes()
    for read in (status, coverage, coverage_by_day, last_sentinel_scan, check_health):
        with pytest.raises(UsageError, match=r"has version 3; this sdcscan reads version 2$"):
            read(db)
    with pytest.raises(RunError, match="history version 3"):
        record_run(db, _report("r2", NOW), None)
    with pytest.raises(RunError, match="history version 3"):
        record_sentinel_scan(db, {"until": iso_utc(NOW)}, "node-a")
    assert db.read_bytes() == before


def test_coverage_sums_the_runs_of_the_window_and_ignores_older_and_future_ones(tmp_path: Path) -> None:
    """Two runs in the last 24 h count; one 25 h ago and one dated after `now` do not."""
    db = tmp_path / "h.sqlite3"
    for n, ended in enumerate((NOW - HOUR, NOW - 23 * HOUR, NOW - 25 * HOUR, NOW + 60)):
        record_run(db, _report(f"r{n}", ended), None)
    assert coverage(db, now=NOW) == {
        "cpu:0": {"cases": 16, "seconds": 4.0, "runs": 2},
        "cpu:1": {"cases": 16, "seconds": 4.0, "runs": 2},
    }
    assert coverage(db, now=NOW, window_s=2 * HOUR)["cpu:0"] == {"cases": 8, "seconds": 2.0, "runs": 1}
    assert coverage(db, now=NOW, window_s=26 * HOUR)["cpu:1"]["runs"] == 3
    assert status(db, now=NOW)["coverage_24h"] == coverage(db, now=NOW)
    assert coverage(db, now=NOW - 30 * HOUR) == {}


def test_a_unit_without_throughput_counts_its_cases_but_no_seconds(tmp_path: Path) -> None:
    """No `throughput` in the report: screened_s is NULL (unknown), and coverage adds no seconds for it."""
    db = tmp_path / "h.sqlite3"
    report = _report("r1", NOW - HOUR)
    del report["units"][0]["throughput"]
    report["units"][1]["throughput"]["train"]["seconds"] = float("nan")  # a damaged entry is skipped
    record_run(db, report, None)
    assert [u["screened_s"] for u in runs(db)[0]["units"]] == [None, 1.0]
    assert coverage(db, now=NOW) == {
        "cpu:0": {"cases": 8, "seconds": 0.0, "runs": 1},
        "cpu:1": {"cases": 8, "seconds": 1.0, "runs": 1},
    }


def test_coverage_orders_units_naturally(tmp_path: Path) -> None:
    """cpu:2 comes before cpu:10 (a 128-core host reads in core order), GPUs after CPUs."""
    db = tmp_path / "h.sqlite3"
    report = _report("r1", NOW - HOUR)
    for uid in ("cuda:0", "cpu:10", "cpu:2"):
        report["units"].append({**report["units"][0], "id": uid})
    record_run(db, report, None)
    assert list(coverage(db, now=NOW)) == ["cpu:0", "cpu:1", "cpu:2", "cpu:10", "cuda:0"]


def test_coverage_by_day_splits_at_utc_midnight(tmp_path: Path) -> None:
    """A run ending 23:59:59 and one ending 00:00:00 UTC fall on two days; `days` counts today in."""
    db = tmp_path / "h.sqlite3"
    midnight = parse_iso_utc("2026-03-10T00:00:00Z")
    for n, ended in enumerate((midnight - 1, midnight, midnight + 60, midnight - 2 * 86400)):
        record_run(db, _report(f"r{n}", ended), None)
    rows = coverage_by_day(db, days=2, now=NOW)
    assert [(r["day"], r["unit"], r["runs"], r["cases"], r["seconds"]) for r in rows] == [
        ("2026-03-09", "cpu:0", 1, 8, 2.0),
        ("2026-03-09", "cpu:1", 1, 8, 2.0),
        ("2026-03-10", "cpu:0", 2, 16, 4.0),
        ("2026-03-10", "cpu:1", 2, 16, 4.0),
    ]
    assert {r["day"] for r in coverage_by_day(db, days=1, now=NOW)} == {"2026-03-10"}
    assert {r["day"] for r in coverage_by_day(db, days=3, now=NOW)} == {
        "2026-03-08",
        "2026-03-09",
        "2026-03-10",
    }


def test_coverage_of_no_history_is_empty_and_bad_windows_are_usage_errors(tmp_path: Path) -> None:
    """No database: nothing screened, nothing created; a window of 0 s or 0 days is refused."""
    db = tmp_path / "none.sqlite3"
    assert coverage(db) == {} and coverage_by_day(db) == [] and last_sentinel_scan(db) is None
    assert not db.exists()
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(UsageError, match="positive number of seconds"):
            coverage(db, window_s=bad)
    for days in (0, -3, True):
        with pytest.raises(UsageError, match="positive whole number of days"):
            coverage_by_day(db, days=days)


@pytest.mark.parametrize(
    ("background", "stored"), [({"pacing": {"screen": True}}, 1), (True, 1), (False, 0), (None, None)]
)
def test_runs_record_whether_they_were_background(
    tmp_path: Path, background: Any, stored: int | None
) -> None:
    """`run.background` (the background section, or a bool) becomes 1/0; no such key is NULL."""
    db = tmp_path / "h.sqlite3"
    report = _report("r1", NOW)
    if background is not None:
        report["run"]["background"] = background
    record_run(db, report, None)
    assert runs(db)[0]["background"] == stored


def _section(until: str = "2026-03-10T11:00:00Z", outliers: tuple[str, ...] = ("cpu:7",)) -> dict[str, Any]:
    """A sentinel section of the shape the sentinel package writes."""
    return {
        "since": "2026-03-10T10:00:00Z",
        "until": until,
        "sources": ["journal", "rasdaemon"],
        "notes": [],
        "stats": {"lines": 100, "events": 9, "skipped": 1},
        "host_counts": {"segfault": 7, "trap": 1, "mce": 1},
        "units": {
            "cpu:7": {"counts": {"segfault": 6, "mce": 1}, "processes": 6, "programs": 5,
                      "first_seen": 1.0, "last_seen": 2.0},
            "cpu:2": {"counts": {"segfault": 1}, "processes": 1, "programs": 1, "first_seen": None,
                      "last_seen": None},
        },
        "outliers": [{"unit": u, "programs": 5, "expected": 0.4, "p_value": 1e-6, "events": 7,
                      "examples": ["python3"]} for u in outliers],
    }  # fmt: skip


def test_sentinel_scans_are_recorded_and_the_last_one_read_back(tmp_path: Path) -> None:
    """The last scan gives the window the next scan resumes from, its events and outlier cores."""
    db = tmp_path / "h.sqlite3"
    assert last_sentinel_scan(db) is None
    record_sentinel_scan(db, _section(until="2026-03-10T11:00:00Z"), "node-a")
    record_sentinel_scan(db, _section(until="2026-03-10T11:30:00.5+00:00", outliers=()), "node-a")
    last = last_sentinel_scan(db)
    assert last is not None
    assert (last["since"], last["until"], last["host"]) == (
        "2026-03-10T10:00:00Z",
        "2026-03-10T11:30:00.5+00:00",
        "node-a",
    )
    assert (last["events"], last["outliers"], last["sources"]) == (9, [], ["journal", "rasdaemon"])
    assert last["recorded_at"].endswith("Z") and last["section"] == _section(until=last["until"], outliers=())
    shown = status(db)["last_sentinel"]
    assert shown == {k: v for k, v in last.items() if k != "section"}
    assert runs(db) == [] and flagged(db) == []  # a scan is not a run, and flags nothing


def test_a_scan_recorded_into_a_version_1_history_migrates_it(tmp_path: Path) -> None:
    """record_sentinel_scan is a writer like record_run: the old run and flag survive the migration."""
    db = tmp_path / "h.sqlite3"
    _v1_history(db)
    record_sentinel_scan(db, _section(), "node-a")
    assert _version(db) == 2 and [f["unit"] for f in flagged(db)] == ["cpu:1"]
    scan = last_sentinel_scan(db)
    assert scan is not None and scan["outliers"] == ["cpu:7"] and scan["events"] == 9


def _nested(depth: int) -> list[Any]:
    """A list nested `depth` deep: json.dumps gives up (RecursionError) long before 5000."""
    out: list[Any] = []
    for _ in range(depth):
        out = [out]
    return out


HOSTILE_SECTIONS: list[tuple[str, Any]] = [
    ("not-a-dict", ["cpu:7"]),
    ("empty", {}),
    ("times-wrong-type", {**_section(), "since": 5, "until": ["x"]}),
    ("times-not-iso", {**_section(), "since": "yesterday", "until": "\ud800"}),
    ("sources-wrong", {**_section(), "sources": [1, None, "journal", "kmsg\ud800"]}),
    ("counts-wrong", {**_section(), "host_counts": {"segfault": True, "mce": 2**64, "trap": -1, "xid": 2.5,
                                                    "bad": "3", "ok": 4}}),
    ("outliers-wrong", {**_section(), "outliers": [None, "cpu:3", {"unit": 5}, {"unit": "cpu:7"},
                                                   {"unit": "cpu:7"}]}),
    ("units-wrong", {**_section(), "host_counts": None, "units": {"cpu:1": {"counts": {"trap": 2}}, "cpu:2": 3,
                                                                  "cpu:3": {"counts": [1]}}}),
    ("huge-int", {**_section(), "stats": {"lines": 10**5000}}),
    ("deep-nesting", {**_section(), "notes": _nested(5000)}),
    ("tuple-keys", {**_section(), "stats": {(1, 2): 3}}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "section"), HOSTILE_SECTIONS, ids=[n for n, _ in HOSTILE_SECTIONS])
def test_hostile_section_values_are_left_out_never_a_crash(tmp_path: Path, name: str, section: Any) -> None:
    """Wrong types, bad times, huge or negative counts, odd keys: stored as NULL or skipped."""
    db = tmp_path / "h.sqlite3"
    record_sentinel_scan(db, section, "node\ud800-a")
    last = last_sentinel_scan(db)
    assert last is not None and last["host"] == "node?-a"
    expected: dict[str, tuple[str, Any]] = {
        "not-a-dict": ("events", 0),
        "empty": ("outliers", []),
        "times-wrong-type": ("until", None),
        "times-not-iso": ("since", None),
        "sources-wrong": ("sources", ["journal", "kmsg?"]),
        "counts-wrong": ("events", 4),
        "outliers-wrong": ("outliers", ["cpu:7"]),
        "units-wrong": ("events", 2),
        "huge-int": ("section", _kept_without_tallies()),
        "deep-nesting": ("section", _kept_without_tallies()),
        "tuple-keys": ("section", _kept_without_tallies()),
    }
    key, value = expected[name]
    assert last[key] == value
    json.dumps(status(db)["last_sentinel"])  # what `status --json` prints stays JSON


def _kept_without_tallies() -> dict[str, Any]:
    """What is stored of a section JSON cannot write whole: everything but units, notes and stats."""
    return {k: v for k, v in _section().items() if k not in ("units", "notes", "stats")}


def test_an_oversized_section_is_kept_without_its_per_unit_tallies(tmp_path: Path) -> None:
    """A section over SECTION_MAX_CHARS is stored without units/notes/stats; window and outliers stay."""
    db = tmp_path / "h.sqlite3"
    section = _section()
    section["notes"] = ["x" * 1000] * (SECTION_MAX_CHARS // 1000 + 1)
    record_sentinel_scan(db, section, "node-a")
    last = last_sentinel_scan(db)
    assert last is not None and last["section"] is not None
    assert "notes" not in last["section"] and last["section"]["outliers"][0]["unit"] == "cpu:7"
    assert last["outliers"] == ["cpu:7"] and last["until"] == section["until"]
