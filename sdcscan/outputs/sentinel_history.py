"""Kernel-log (Hardware Sentinel) scans in the run history: what each `sdcscan sentinel` found, and when.

A sentinel scan reads the kernel log over a window; recording each scan lets the next one start
where the last one ended (its default `--since` is the last scan's `until`) and lets `sdcscan status`
show the last scan. The section comes from the sentinel package, but it is stored defensively: a
value of the wrong type is left out (stored as NULL or skipped), never a crash, because a scan must
not fail on what it writes down. The whole section is kept as JSON, up to SECTION_MAX_CHARS.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Mapping

from typing_extensions import NotRequired, TypedDict

from sdcscan.outputs.history_db import now_iso, reading, writing
from sdcscan.outputs.history_schema import table_names
from sdcscan.timefmt import parse_iso_utc

SECTION_MAX_CHARS = 1_000_000  # a scan's section as JSON; a bigger one is stored without its per-unit tallies
_MAX_COUNT = 2**53  # a count of kernel events beyond this is not one (and would not fit SQLite's integers)


class SentinelScan(TypedDict):
    """A recorded sentinel scan (a row of `sentinel_scans`); times are ISO-8601 UTC text or None."""

    recorded_at: str
    host: str | None
    since: str | None
    until: str | None
    events: int | None
    sources: list[str]
    outliers: list[str]  # unit ids
    section: NotRequired[dict[str, object] | None]  # the scan's whole section, when asked for


_INSERT = (
    "INSERT INTO sentinel_scans (recorded_at, host, since, until, sources, events, outliers, section) "
    "VALUES (?,?,?,?,?,?,?,?)"
)


def record_sentinel_scan(db_path: str | os.PathLike[str], section: Mapping[str, object], host: str) -> None:
    """Record one sentinel scan of `host` (the report's `sentinel` section) in the history.

    Args:
        db_path: the history database (created if missing, migrated if older).
        section: `{"since", "until", "sources", "host_counts", "units", "outliers", ...}`; fields of
            the wrong type are stored as NULL or skipped.
        host: the scanned host's name.

    Raises:
        RunError: the database could not be created, opened or written (a full disk included).
    """
    doc: Mapping[str, object] = section if isinstance(section, Mapping) else {}
    values = (
        now_iso(),
        _clean_text(host if isinstance(host, str) else str(host)),
        _iso_or_none(doc.get("since")),
        _iso_or_none(doc.get("until")),
        json.dumps(sources(doc)),
        total_events(doc),
        json.dumps(outlier_units(doc)),
        _section_json(doc),
    )
    with writing(db_path) as db:
        db.execute(_INSERT, values)


def last_sentinel_scan(db_path: str | os.PathLike[str]) -> SentinelScan | None:
    """The most recently recorded sentinel scan; None without a database, scan or version 2. Read-only.

    Returns:
        `{"recorded_at", "host", "since", "until", "sources": [str], "events": int | None,
        "outliers": [unit id], "section": dict | None}`; times are ISO-8601 UTC text or None.

    Raises:
        UsageError: the database is unreadable, empty, foreign or of another version.
    """
    with reading(db_path) as db:
        return None if db is None else last_scan(db, with_section=True)


def last_scan(db: sqlite3.Connection, *, with_section: bool) -> SentinelScan | None:
    """`last_sentinel_scan` on an open reader; without the (large) section unless `with_section`."""
    if "sentinel_scans" not in table_names(db):
        return None
    r = db.execute("SELECT * FROM sentinel_scans ORDER BY id DESC LIMIT 1").fetchone()
    if r is None:
        return None
    scan: SentinelScan = {
        "recorded_at": r["recorded_at"],
        "host": r["host"],
        "since": r["since"],
        "until": r["until"],
        "events": r["events"],
        "sources": [s for s in _json_list(r["sources"]) if isinstance(s, str)],
        "outliers": [u for u in _json_list(r["outliers"]) if isinstance(u, str)],
    }
    if with_section:
        section = _json_load(r["section"])
        scan["section"] = section if isinstance(section, dict) else None
    return scan


def sources(section: Mapping[str, object]) -> list[str]:
    """The log sources a scan read (journal, kmsg, dmesg, rasdaemon); non-strings skipped."""
    found = section.get("sources")
    return [_clean_text(s) for s in found if isinstance(s, str)] if isinstance(found, list) else []


def outlier_units(section: Mapping[str, object]) -> list[str]:
    """The units named by the section's outliers, in its order, each once; malformed entries skipped."""
    found = section.get("outliers")
    units: list[str] = []
    for o in found if isinstance(found, list) else []:
        unit = o.get("unit") if isinstance(o, Mapping) else None
        if isinstance(unit, str) and _clean_text(unit) not in units:
            units.append(_clean_text(unit))
    return units


def total_events(section: Mapping[str, object]) -> int:
    """Kernel events the scan found: the sum of `host_counts` (it covers the whole host, events
    without a CPU included), else of the units' counts when the section has no host counts."""
    host = section.get("host_counts")
    if isinstance(host, Mapping):
        return sum(count_values(host))
    units = section.get("units")
    tallies = units.values() if isinstance(units, Mapping) else []
    return sum(sum(count_values(t.get("counts"))) for t in tallies if isinstance(t, Mapping))


def count_values(counts: object) -> list[int]:
    """The valid counts of a `{kind: count}` mapping: non-negative integers below 2**53 (not bools)."""
    if not isinstance(counts, Mapping):
        return []
    return [c for k, c in counts.items() if isinstance(k, str) and is_count(c)]


def is_count(value: object) -> bool:
    """A count of events: an int (not a bool), 0 <= value < 2**53."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _MAX_COUNT


def _iso_or_none(value: object) -> str | None:
    """The text of an ISO-8601 time, as given (the next scan resumes from it exactly); None otherwise."""
    if not isinstance(value, str):
        return None
    try:
        parse_iso_utc(value)
    except (ValueError, OverflowError):
        return None
    return value


def _section_json(section: Mapping[str, object]) -> str | None:
    """The section as JSON; without per-unit tallies, notes and stats when it is too big or they cannot
    be written; None when even that fails."""
    for doc in (section, {k: v for k, v in section.items() if k not in ("units", "notes", "stats")}):
        try:
            text = json.dumps(doc, default=str)  # ensure_ascii: lone surrogates become escapes
        except (TypeError, ValueError, RecursionError):  # tuple keys, 5000-digit ints, deep nesting
            continue
        if len(text) <= SECTION_MAX_CHARS:
            return text
    return None


def _clean_text(text: str) -> str:
    """`text` with what UTF-8 cannot encode (lone surrogates) replaced: SQLite stores UTF-8."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _json_load(text: object) -> object:
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _json_list(text: object) -> list[object]:
    found = _json_load(text)
    return found if isinstance(found, list) else []
