"""Reading a report: the validator compiled from the declaration (`sdcscan.report.document`), and
what readers derive from a validated report (its exit code, its case records).

Per-case records are stored column-wise per unit (`units[].cases` holds parallel lists `index`,
`workload`, `digest`, `status`, `seconds`) so a 10,000 s burn-in on a 128-core host stays compact.
Reports are written atomically by `sdcscan.files.write_json_atomic` and read by
`load_report` through the bounded reader `sdcscan.files.read_json`.

Reports come from other hosts and other hands, so every reader (the summary of `sdcscan report`,
`compare` and goldens, `export` to JUnit and Prometheus, the history) gets its report through
`validate_report`, which checks every declared field but those marked UNCHECKED: a refusal names the
file and the key path (`r.json: units[2].cases.seconds[5]: not a number`) and never echoes more
than a few dozen characters of what the file holds. `sdcscan report` exits with the code the
report's verdict implies (`verdict_exit_code`), never with the `exit_code` a file claims.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from typing import Literal, cast

from sdcscan.errors import EXIT_TERMINATED, ReportError
from sdcscan.files import read_json
from sdcscan.outcomes import CaseResult, Verdict, printable
from sdcscan.proof import rate_bound
from sdcscan.report.document import INT64_MAX, SCHEMA_VERSION, Cases, Checked, Range, Report
from sdcscan.report.fields import Declared, declared, fields_of

__all__ = [
    "CASE_COLUMNS",
    "MAX_DEPTH",
    "MAX_REPORT_BYTES",
    "case_records",
    "exit_code_disagreement",
    "load_report",
    "shown",
    "validate_report",
    "verdict_exit_code",
]  # fmt: skip

MAX_REPORT_BYTES = 1 << 30  # refuse to parse anything larger: it is not one of ours
MAX_DEPTH = 20  # a report nests 6 levels; deeper documents would exhaust the recursion of json.dump
SHOWN_CHARS = 40  # the most of a file's content an error message quotes

CaseColumn = Literal["index", "workload", "digest", "status", "seconds"]
CASE_COLUMNS: tuple[CaseColumn, ...] = ("index", "workload", "digest", "status", "seconds")

INT64_MIN = -(2**63)  # what the history database (SQLite) can store, with document.INT64_MAX
NUMBER_LIMIT = 10**300  # an integer in a number field must still convert to a float


def case_records(report: Report) -> list[CaseResult]:
    """The per-case records of every unit as rows (the report stores them column-wise)."""
    rows: list[CaseResult] = []
    for unit in report["units"]:
        cols = unit["cases"]
        for i in range(len(cols["index"])):
            rows.append(
                CaseResult(
                    unit=unit["id"],
                    index=cols["index"][i],
                    workload=cols["workload"][i],
                    status=cols["status"][i],
                    digest=cols["digest"][i],
                    seconds=cols["seconds"][i],
                )
            )
    return rows


def load_report(path: str | os.PathLike[str]) -> Report:
    """Read and validate a report.

    Raises:
        ReportError: unreadable, too large, not JSON, of another schema version, or a field the readers
            use is missing or of the wrong type; the message names the file and the key.
    """
    data = read_json(path, what="report", max_bytes=MAX_REPORT_BYTES)
    return validate_report(data, label=printable(str(path)))


def validate_report(data: object, *, label: str = "report") -> Report:
    """Check every field a reader of reports relies on; return the report unchanged.

    Readers may then index what is checked here without guarding: the summary table, findings and
    mismatch lines of `sdcscan report`, the extract `compare` and goldens keep, JUnit and Prometheus
    export, the history. Integers are bounded where they are stored (the seed fits 0..2**63-1), numbers
    are finite, bool is never a number, verdicts and statuses are the known words.

    Args:
        data: a parsed JSON document.
        label: the file, for messages.

    Raises:
        ReportError: `label: key.path: what is wrong`, e.g. `r.json: units[2].cases.seconds[5]: not a number`.
    """
    if not isinstance(data, dict):
        raise ReportError(f"{label}: not a report (top level is not an object)")
    version = data.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:  # not true, not 1.0
        raise ReportError(
            f"{label}: schema_version {shown(version)} is not supported (this sdcscan reads {SCHEMA_VERSION})"
        )
    try:
        _check_report(data)
    except _Bad as bad:
        where = _key_path(bad.path)
        raise ReportError(f"{label}: {where + ': ' if where else ''}{bad.problem}") from None
    report = cast(Report, data)  # every declared field was just checked
    if _too_deep(report):
        raise ReportError(f"{label}: nested more than {MAX_DEPTH} levels deep: not a report")
    return report


def verdict_exit_code(report: Report) -> int:
    """The exit code a validated report's verdicts imply (`Verdict.exit_code` of the worst of the run's
    and its units'), so that a report written before the run's verdict put `fail` above `invalid`
    (issue 43) exits 1 when a unit failed.

    A run stopped by SIGTERM exited 143, not 130, and its report says so in `run.interrupted_by`.
    The report's own `exit_code` field is never used: a hand-edited or hostile file must not make
    `sdcscan report` exit 1 ("SDC suspected") for a pass, nor 0 for a failure.
    """
    verdict = Verdict.worst([report["verdict"], *(unit["verdict"] for unit in report["units"])])
    if verdict is Verdict.INTERRUPTED and report["run"].get("interrupted_by") == "SIGTERM":
        return EXIT_TERMINATED
    return verdict.exit_code


def exit_code_disagreement(report: Report) -> str | None:
    """A sentence when a validated report's stored `exit_code` is not the one its verdict implies, else None."""
    stored, expected = report.get("exit_code"), verdict_exit_code(report)
    if stored is None or stored == expected:
        return None
    return (
        f"the report's exit_code {stored} does not match its verdicts (the run's {report['verdict']}, and "
        f"its units'); exiting {expected} as they say"
    )


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """A value from a file as an error message may quote it: printable, at most `limit` characters."""
    if isinstance(value, str):
        text = repr(value)  # escapes what `printable` escapes
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        text = f"a {value.bit_length()}-bit integer"  # str() of a 5000-digit int raises, and says nothing
    elif value is None or isinstance(value, bool | int | float):
        text = json.dumps(value)
    else:
        text = "an object" if isinstance(value, dict) else f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------------------------------
# The checks. Each takes a value and raises _Bad with the path below that value; the path is built
# only when a check fails, so a report with millions of cases is checked at the speed of a loop.

Check = Callable[[object], None]
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_:.+-]{1,40}")


class _Bad(Exception):
    """A field that readers cannot use: `path` (keys and list indices) and `problem` say which and why."""

    def __init__(self, problem: str, path: tuple[str | int, ...] = ()) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path = path

    def under(self, key: str | int) -> _Bad:
        return _Bad(self.problem, (key, *self.path))


def _key_path(path: tuple[str | int, ...]) -> str:
    """("units", 2, "cases", "seconds", 5) -> `units[2].cases.seconds[5]`; odd keys from the file quoted."""
    out = ""
    for key in path:
        if isinstance(key, int):
            out += f"[{key}]"
        else:
            name = key if _PLAIN_KEY.fullmatch(key) else shown(key)
            out += f".{name}" if out else name
    return out


def _string(value: object) -> None:
    if not isinstance(value, str):
        raise _Bad("not a string")


def _nullable(check: Check) -> Check:
    def nullable(value: object) -> None:
        if value is None:
            return
        try:
            check(value)
        except _Bad as bad:
            if bad.path:  # a part of the value is wrong, not the value itself
                raise
            raise _Bad(f"{bad.problem} or null") from None

    return nullable


def _integer(low: int = INT64_MIN, high: int = INT64_MAX) -> Check:
    def integer(value: object) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise _Bad("not an integer")
        if not low <= value <= high:
            raise _Bad(f"out of range ({low}..{high})")

    return integer


def _number(value: object) -> None:
    _as_number(value)


def _as_number(value: object) -> int | float:
    """A finite number (int or float, never bool) that converts to a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Bad("not a number")
    if isinstance(value, int):
        if not -NUMBER_LIMIT <= value <= NUMBER_LIMIT:
            raise _Bad("out of range")
    elif not math.isfinite(value):
        raise _Bad("not a finite number")
    return value


def _one_of(words: tuple[object, ...]) -> Check:
    kinds = {type(w) for w in words}  # 1 is not True, "1" is not 1

    def one_of(value: object) -> None:
        if type(value) not in kinds or value not in words:
            raise _Bad(f"not one of {', '.join(map(str, words))}")

    return one_of


def _matching(pattern: str) -> Check:
    regex = re.compile(pattern)

    def matching(value: object) -> None:
        if not isinstance(value, str):
            raise _Bad("not a string")
        if not regex.fullmatch(value):
            raise _Bad(f"{shown(value)} is not of the form {pattern}")

    return matching


def _boolean(value: object) -> None:
    if not isinstance(value, bool):
        raise _Bad("not true or false")


def _bounded_number(bounds: Range) -> Check:
    def bounded(value: object) -> None:
        value = _as_number(value)
        if bounds.low is not None and value < bounds.low:
            raise _Bad(f"less than {bounds.low}")
        if bounds.high is not None and value > bounds.high:
            raise _Bad(f"more than {bounds.high}")
        if bounds.above is not None and value <= bounds.above:
            raise _Bad(f"not more than {bounds.above}")

    return bounded


def _list_of(item: Check) -> Check:
    def list_of(value: object) -> None:
        if not isinstance(value, list):
            raise _Bad("not a list")
        for i, x in enumerate(value):
            try:
                item(x)
            except _Bad as bad:
                raise bad.under(i) from None

    return list_of


def _map_of(item: Check) -> Check:
    """An object whose every value passes `item` (its keys are JSON strings already)."""

    def map_of(value: object) -> None:
        if not isinstance(value, dict):
            raise _Bad("not an object")
        for key, x in value.items():
            try:
                item(x)
            except _Bad as bad:
                raise bad.under(key) from None

    return map_of


def _object(required: dict[str, Check], optional: dict[str, Check] | None = None) -> Check:
    """An object with the `required` keys and, where present, the `optional` ones; other keys are free."""

    def obj(value: object) -> None:
        if not isinstance(value, dict):
            raise _Bad("not an object")
        missing = next((key for key in required if key not in value), None)
        if missing is not None:
            raise _Bad(f"missing key {missing!r}")
        for key, check in (*required.items(), *(optional or {}).items()):
            if key in value:
                try:
                    check(value[key])
                except _Bad as bad:
                    raise bad.under(key) from None

    return obj


def _anything(value: object) -> None:
    """A field no reader interprets (kept for people); only its nesting depth is bounded."""


def _column(item: Check, clean: Callable[[list[object]], bool]) -> Check:
    """A case column: `clean` accepts a whole list at C speed (the usual case), else each item is checked
    by `item`, which finds the first bad one for the message."""
    each = _list_of(item)

    def column(value: object) -> None:
        if not (isinstance(value, list) and clean(value)):
            each(value)

    return column


def _types(values: list[object]) -> set[type]:
    return set(map(type, values))  # bool is its own type: never taken for an int here


# ---------------------------------------------------------------------------------------------------
# The checks compiled from the declaration (sdcscan.report.document), once, at first use.


def _compile(d: Declared) -> Check:
    """The check of one declared value."""
    if d.unchecked:
        return _anything
    if d.nullable:
        return _nullable(_compile(d.without_null()))
    if d.is_object:
        return _object_check(cast(type, d.base))
    if d.origin is list:
        item = declared(d.args[0])
        clean = _clean_column(item)
        return _list_of(_compile(item)) if clean is None else _column(_compile(item), clean)
    if d.origin is dict:
        return _map_of(_compile(declared(d.args[1])))
    if d.origin is Literal:
        return _one_of(d.args)
    if d.base is str:
        return _string if d.pattern is None else _matching(d.pattern)
    if d.base is bool:
        return _boolean
    if d.base is int:
        low, high = _int_bounds(d.range)
        return _integer(low, high)
    if d.base is float:
        return _number if d.range is None else _bounded_number(d.range)
    if d.base is object:
        return _anything
    raise TypeError(f"the report's declaration uses a type the validator does not know: {d.base!r}")


def _object_check(cls: type) -> Check:
    fields = fields_of(cls)
    required = {f.name: _compile(f.declared) for f in fields if f.required}
    optional = {f.name: _compile(f.declared) for f in fields if not f.required and not f.declared.unchecked}
    check = _object(required, optional)
    rule = _RULES.get(cls)
    if rule is None:
        return check

    def with_rule(value: object) -> None:
        check(value)
        rule(value)

    return with_rule


def _same_lengths(cases: object) -> None:
    """The i-th entries of the case columns form one record."""
    columns = cast(Cases, cases)  # the object check before this rule found every column a list
    if len({len(columns[c]) for c in CASE_COLUMNS}) != 1:
        raise _Bad("case columns of different lengths")


def _bound_follows(checked: object) -> None:
    """A workload's rate bound is never tighter than its own counts support (3 / (n·d)), and needs both."""
    c = cast(Checked, checked)  # the object check before this rule found every field of its type
    bound = c["sdc_rate_bound"]
    if bound is None:
        return
    least = rate_bound(c["checked_ops"], c["detection"])
    if least is None:
        raise _Bad("a rate bound without checked ops and a detection")
    if bound < least * (1 - 1e-9):
        raise _Bad(f"rate bound {shown(bound)} is tighter than 3 / (checked_ops * detection) allows")


# rules across the keys of one object
_RULES: dict[type, Check] = {Cases: _same_lengths, Checked: _bound_follows}


def _int_bounds(bounds: Range | None) -> tuple[int, int]:
    low = INT64_MIN if bounds is None or bounds.low is None else int(bounds.low)
    high = INT64_MAX if bounds is None or bounds.high is None else int(bounds.high)
    return low, high


def _clean_column(item: Declared) -> Callable[[list[object]], bool] | None:
    """A whole-list test for a list of scalars, at C speed (the usual case of the case columns); None
    for lists of other things. A list it does not pass is then checked item by item for the message."""
    if item.is_object or item.origin in (list, dict) or item.unchecked or item.pattern:
        return None
    if item.nullable and item.without_null().base is str:
        return lambda v: _types(v) <= {str, type(None)}
    if item.origin is Literal:
        words = set(item.args)
        return lambda v: _types(v) <= {str} and set(v) <= words
    if item.base is str:
        return lambda v: _types(v) <= {str}
    if item.base is int:
        return _clean_ints(*_int_bounds(item.range))
    if item.base is float:
        return _clean_floats(-math.inf if item.range is None or item.range.low is None else item.range.low)
    return None


def _clean_ints(low: int, high: int) -> Callable[[list[object]], bool]:
    def clean(values: list[object]) -> bool:
        if not _types(values) <= {int}:
            return False
        ints = cast(list[int], values)  # every item's type is int: checked just above
        return not ints or low <= min(ints) <= max(ints) <= high

    return clean


def _clean_floats(floor: float) -> Callable[[list[object]], bool]:
    def clean(values: list[object]) -> bool:
        if not _types(values) <= {float}:
            return False
        floats = cast(list[float], values)  # every item's type is float: checked just above
        return all(map(math.isfinite, floats)) and (not floats or min(floats) >= floor)

    return clean


_REPORT_CHECK: list[Check] = []  # compiled on first use: importing the package stays cheap


def _check_report(data: object) -> None:
    if not _REPORT_CHECK:
        _REPORT_CHECK.append(_object_check(Report))
    _REPORT_CHECK[0](data)


def _too_deep(report: Report) -> bool:
    """Whether any part of a checked report nests deeper than MAX_DEPTH.

    The case columns are skipped: they were just checked to hold only scalars, and they are most of
    a large report.
    """
    columns = {id(u["cases"][c]) for u in report["units"] for c in CASE_COLUMNS}
    stack: list[tuple[object, int]] = [(report, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, dict | list) and id(child) not in columns:
                stack.append((child, depth + 1))
    return False
