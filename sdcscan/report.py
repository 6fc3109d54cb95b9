"""The report: a versioned JSON document other tools read. Keys here are a contract; bump SCHEMA_VERSION on change.

Per-case records are stored column-wise per unit (`units[].cases` holds parallel lists `index`,
`workload`, `digest`, `status`, `seconds`) so a 10,000 s burn-in on a 128-core host stays compact.
Reports are written atomically (temporary file + rename): a reader never sees half a report.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from sdcscan.errors import ReportError

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("report.schema.json")
MAX_REPORT_BYTES = 1 << 30  # refuse to parse anything larger: it is not one of ours

VERDICTS = ("pass", "fail", "invalid", "interrupted")
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


def write_json_atomic(path: str | os.PathLike[str], data: Any, *, indent: int | None = None) -> None:
    """Write JSON to `path` via a temporary file in the same directory and an atomic rename.

    Raises:
        ReportError: the directory is missing or unwritable, or the disk is full.
    """
    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    except OSError as err:
        raise ReportError(f"cannot write {target}: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            # No spaces after separators: a burn-in report holds millions of per-case values.
            separators = (",", ":") if indent is None else None
            json.dump(data, f, indent=indent, separators=separators, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except (OSError, ValueError) as err:
        with _suppress():
            os.unlink(tmp)
        raise ReportError(f"cannot write {target}: {getattr(err, 'strerror', None) or err}") from None


def load_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and structurally validate a report.

    Raises:
        ReportError: unreadable, too large, not JSON, of another schema version, or missing required keys;
            the message says which.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_REPORT_BYTES:
            raise ReportError(f"{p}: {size} bytes is too large for a report")
        raw = p.read_bytes()
    except OSError as err:
        raise ReportError(f"{p}: cannot read: {err.strerror or err}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except json.JSONDecodeError:
        raise ReportError(f"{p}: truncated or not JSON") from None
    except UnicodeDecodeError:
        raise ReportError(f"{p}: not UTF-8 JSON text") from None
    except RecursionError:
        raise ReportError(f"{p}: nested too deeply to be a report") from None
    return validate_report(data, label=str(p))


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


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True
