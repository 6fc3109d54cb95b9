"""The report: the versioned JSON document `sdcscan run` writes and other tools read.

- `document`: the report declared once, as types; everything below derives from it.
- `validation`: the validator every reader gets a report through, and what readers derive from a
  validated report (`load_report`, `validate_report`, `verdict_exit_code`, `case_records`).
- `schema`: the shipped JSON Schema, generated from the declaration.
- `assemble`: the writer: run results and their judgement -> the report (imported on its own: it
  reaches the judgement and the wording, which readers do not need).
"""

from sdcscan.report.document import SCHEMA_PATH, SCHEMA_VERSION, Report, Unit
from sdcscan.report.validation import (
    CASE_COLUMNS,
    MAX_DEPTH,
    MAX_REPORT_BYTES,
    case_records,
    exit_code_disagreement,
    load_report,
    shown,
    validate_report,
    verdict_exit_code,
)

__all__ = [
    "CASE_COLUMNS", "MAX_DEPTH", "MAX_REPORT_BYTES", "SCHEMA_PATH", "SCHEMA_VERSION", "Report", "Unit",
    "case_records", "exit_code_disagreement", "load_report", "shown", "validate_report", "verdict_exit_code",
]  # fmt: skip
