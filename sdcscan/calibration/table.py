"""The calibration table's format, checked without torch: the CLI parent refuses a bad `--calibration` at once.

`sdcscan.calibration.measure` measures and looks up e_max (it needs torch); a worker reads the table in
its `prepare`, long after the run started. Checking the file here first turns a missing or foreign table
into exit 2 before any worker starts, instead of every gemm_fp unit failing its set-up (exit 3).
Messages name the file and what is wrong with it, never its content: `--calibration` may point anywhere.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, cast

from sdcscan.checks.limits import UNIT_ROUNDOFF, e_max_ceiling
from sdcscan.errors import UsageError
from sdcscan.files import JSONFileError, read_bounded

SCHEMA = "sdcscan-calibration/1"
# An e_max's plausible range (`e_max_bounds`). The clean measurements behind the shipped table needed
# 0.35 (bf16, fp16) to 75 (fp64) times the output's unit roundoff at K = 4096: a hundredth of it leaves a
# margin of 35 and more, and is far above what a mistyped or scaled file holds (the 10^-3).
E_MAX_FLOOR = 0.01
# e_max = margin x the largest |D|/T a clean measurement needed. 2 keeps the largest clean tile of 10^6
# per distribution within 0.8 of its threshold (docs/abft.md §3.1b); more costs detection on every unit.
DEFAULT_MARGIN = 2.0
WIDEST = 2**20  # the widest GEMM (M or N) an entry may be meant for: a million columns
MAX_TABLE_BYTES = 16 << 20  # a table holds a few entries per device model; anything larger is not one
_KEY_FIELDS = ("device_model", "dtype", "checker")  # what `calibration.lookup` matches on
# The GEMM dtypes a table calibrates and, per dtype, its checker precisions (docs/abft.md §3.2): fp32 in
# fp32 (cheap) or fp64; low precision in fp32 from the exact low-precision operands. A float16 checker is
# never one: its checksums overflow. Torch-free here: gemm_fp's catalogue entry is checked against them.
DTYPE_NAMES = ("float32", "float64", "bfloat16", "float16")
CHECKERS = {
    "float32": ["float32", "float64"],
    "float64": ["float64"],
    "bfloat16": ["float32"],
    "float16": ["float32"],
}
# Inputs a dtype is not measured over (`measure.calibration_inputs`) and gemm_fp may not draw for it:
# entries spanning twelve decades do not fit fp16's normal range (6e-5..65504), and its subnormal outputs
# round by an absolute step, which no relative threshold models.
OUT_OF_RANGE: dict[str, tuple[str, ...]] = {"float16": ("log_scales",)}
# The operand distributions e_max is measured over (`measure.DISTRIBUTIONS` draws them, in this order)
DISTRIBUTION_NAMES = (
    "abs_normal",
    "normal",
    "shifted_normal",
    "uniform",
    "student_t3",
    "llm_like",
    "row_scales",
    "student_t4",
    "outlier_channels",
    "log_scales",
)
# Operand pairs e_max is measured over besides (`measure.PAIRS`): A and B of different kinds, as a
# layer's activations and weights are; not gemm_fp inputs
PAIR_NAMES = ("activations_weights",)


def check_table_file(path: str) -> dict[str, Any]:
    """Read and check the calibration table at `path`, without importing torch.

    Returns:
        The table (a mapping with `schema` and `entries`).
    Raises:
        UsageError: an empty path, a missing file, one that is not a regular file (a directory, FIFO
            or device), unreadable, too large, not UTF-8 JSON, or not a calibration table; the message
            names the file and the problem, never the file's content.
    """
    label = f"calibration table {path}"
    if not path:
        raise UsageError("calibration table: the path is empty")
    data = _parse(label, _read_regular_file(label, path))
    return check_table(data, label=label)


def check_schema(data: Any, *, label: str) -> dict[str, Any]:
    """Check a parsed document is a calibration table: the schema, and a list of entries.

    Raises:
        UsageError: the schema is not SCHEMA, or `entries` is not a list.
    """
    if (
        not isinstance(data, dict)
        or data.get("schema") != SCHEMA
        or not isinstance(data.get("entries"), list)
    ):
        raise UsageError(f"{label}: not an sdcscan calibration table (schema {SCHEMA!r})")
    return data


def check_table(data: Any, *, label: str) -> dict[str, Any]:
    """`check_schema`, and every entry one that `calibration.lookup` and gemm_fp can use.

    Raises:
        UsageError: not a table, or an entry lacks a key field, has an e_max that is not a positive
            finite number (0 would flag every row of correct hardware) or a k_max that is not an
            integer >= 1 (gemm_fp divides by it).
    """
    check_schema(data, label=label)
    for i, entry in enumerate(data["entries"]):
        problem = _entry_problem(entry)
        if problem:
            raise UsageError(f"{label}: entries[{i}]{problem}")
    return cast(dict[str, Any], data)


def _entry_problem(entry: Any) -> str:
    """'' for a usable entry, else `.key: what is wrong` (no values: they are the file's content)."""
    if not isinstance(entry, dict):
        return ": must be a mapping"
    for key in _KEY_FIELDS:
        if not isinstance(entry.get(key), str):
            return f".{key}: must be a string"
    e_max = entry.get("e_max")
    if isinstance(e_max, bool) or not isinstance(e_max, int | float) or not 0 < e_max < math.inf:
        return ".e_max: must be a positive finite number"
    k_max = entry.get("k_max")
    if isinstance(k_max, bool) or not isinstance(k_max, int) or k_max < 1:
        return ".k_max: must be an integer >= 1"
    bounds = e_max_bounds(entry["dtype"], entry["checker"], k_max)
    if bounds is not None and not bounds[0] <= e_max <= bounds[1]:
        low, high = bounds
        return (
            f".e_max: outside what the arithmetic allows for {entry['dtype']} checked in {entry['checker']} "
            f"at k_max ({low:.3g} .. {high:.3g}): it would flag clean rows, or pass corrupted ones"
        )
    e_mean = entry.get("e_mean", e_max)  # written by hand without it: e_max serves both terms
    if isinstance(e_mean, bool) or not isinstance(e_mean, int | float) or not 0 <= e_mean < math.inf:
        return ".e_mean: must be a finite number >= 0"
    if bounds is not None and e_mean > bounds[1]:
        return (
            f".e_mean: above what the arithmetic allows for {entry['dtype']} checked in {entry['checker']} "
            f"at k_max ({bounds[1]:.3g}): it would pass corrupted rows"
        )
    return ""


def e_max_bounds(dtype: str, checker: str, k_max: int) -> tuple[float, float] | None:
    """The e_max a correct device can need for `dtype` checked in `checker` at K = k_max, from the
    arithmetic alone; None for a dtype or checker gemm_fp does not know (its entries are never used).

    Above: `e_max_ceiling` for a GEMM WIDEST wide, the worst-case rounding of any summation order; more
    accepts errors as rounding. Below: E_MAX_FLOOR of the output's own unit roundoff, since every
    output element is rounded to its dtype once, whatever the hardware; less flags clean rows.
    """
    if dtype not in UNIT_ROUNDOFF or checker not in UNIT_ROUNDOFF:
        return None
    return E_MAX_FLOOR * UNIT_ROUNDOFF[dtype], gemm_e_max_ceiling(dtype, checker, k=k_max, width=WIDEST)


def gemm_e_max_ceiling(dtype: str, checker: str, *, k: int, width: int) -> float:
    """`limits.e_max_ceiling` for a GEMM in `dtype` (K deep, `width` the line whose check tiles are the
    widest) checked in `checker`: the unit roundoffs of its output, its accumulation and its checker."""
    u_out = UNIT_ROUNDOFF[dtype]
    u_acc = min(u_out, UNIT_ROUNDOFF["float32"])  # bf16/fp16 GEMMs accumulate in fp32
    return e_max_ceiling(k=k, width=width, u_acc=u_acc, u_chk=UNIT_ROUNDOFF[checker], u_out=u_out)


def _read_regular_file(label: str, path: str) -> bytes:
    """At most MAX_TABLE_BYTES of a regular file, through the one bounded reader (a FIFO or device is
    refused, never read)."""
    try:
        if not os.path.lexists(path):  # the commonest mistake, said plainly
            raise UsageError(f"{label}: no such file")
        return read_bounded(path, what="calibration table", max_bytes=MAX_TABLE_BYTES)
    except JSONFileError as err:
        raise UsageError(f"{label}: {err.reason}") from None
    except ValueError:  # a NUL in the path
        raise UsageError(f"{label}: not a valid path") from None


def _parse(label: str, raw: bytes) -> Any:
    """The JSON document; errors give the line and column only (json's messages never quote the text)."""
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{label}: not UTF-8 text, so not a calibration table") from None
    except json.JSONDecodeError as err:
        raise UsageError(
            f"{label}: not JSON (line {err.lineno}, column {err.colno}), so not a calibration table"
        ) from None
    except (RecursionError, ValueError):  # nesting too deep; an integer too long to convert
        raise UsageError(
            f"{label}: not a calibration table (JSON nested too deeply or a number too long)"
        ) from None
