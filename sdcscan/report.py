"""The report: a versioned JSON document other tools read. Keys here are a contract; bump SCHEMA_VERSION on change.

Per-case records are stored column-wise per unit (`units[].cases` holds parallel lists `index`,
`workload`, `digest`, `status`, `seconds`) so a 10,000 s burn-in on a 128-core host stays compact.
Reports are written atomically by `sdcscan.files.write_json_atomic` and read by
`load_report` through the bounded reader `sdcscan.files.read_json`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sdcscan.errors import ReportError
from sdcscan.files import read_json
from sdcscan.outcomes import VERDICTS

__all__ = [
    "CASE_COLUMNS", "MAX_REPORT_BYTES", "REQUIRED_TOP", "REQUIRED_UNIT", "SCHEMA_PATH", "SCHEMA_VERSION",
    "VERDICTS", "case_records", "load_report", "validate_report",
]  # fmt: skip

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("report.schema.json")
MAX_REPORT_BYTES = 1 << 30  # refuse to parse anything larger: it is not one of ours

CASE_COLUMNS = ("index", "workload", "digest", "status", "seconds")
REQUIRED_TOP = ("schema_version", "tool", "verdict", "run", "host", "units", "findings")
REQUIRED_UNIT = ("id", "verdict", "cohort", "cases")


def case_records(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-case records of every unit as row dicts: {unit, index, workload, digest, status, seconds}."""
    rows = []
    for unit in report["units"]:
        cols = unit["cases"]
        for i in range(len(cols["index"])):
            rows.append({"unit": unit["id"], **{c: cols[c][i] for c in CASE_COLUMNS}})
    return rows


def load_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and structurally validate a report.

    Raises:
        ReportError: unreadable, too large, not JSON, of another schema version, or missing required keys;
            the message names the file and says which.
    """
    data = read_json(path, what="report", max_bytes=MAX_REPORT_BYTES)
    return validate_report(data, label=str(path))


def validate_report(data: Any, *, label: str = "report") -> dict[str, Any]:
    """Check the structure readers rely on; return the report unchanged."""
    if not isinstance(data, dict):
        raise ReportError(f"{label}: not a report (top level is not an object)")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ReportError(
            f"{label}: schema_version {version!r} is not supported (this sdcscan reads {SCHEMA_VERSION})"
        )
    for key in REQUIRED_TOP:
        if key not in data:
            raise ReportError(f"{label}: missing key {key!r}")
    if data["verdict"] not in VERDICTS or not isinstance(data["units"], list):
        raise ReportError(f"{label}: malformed verdict or units")
    for unit in data["units"]:
        if not isinstance(unit, dict) or any(k not in unit for k in REQUIRED_UNIT):
            raise ReportError(f"{label}: a unit lacks one of {', '.join(REQUIRED_UNIT)}")
        cols = unit["cases"]
        if not isinstance(cols, dict) or any(not isinstance(cols.get(c), list) for c in CASE_COLUMNS):
            raise ReportError(f"{label}: unit {unit.get('id')!r} has malformed cases")
        if len({len(cols[c]) for c in CASE_COLUMNS}) != 1:
            raise ReportError(f"{label}: unit {unit.get('id')!r} has case columns of different lengths")
    return data
