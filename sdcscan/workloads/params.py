"""What values a workload parameter accepts: types and ranges the parent checks when it loads a profile.

Each workload's catalogue entry (`sdcscan.workloads.SPECS`) declares one `Param` per parameter. A value
out of range must be refused at load time (exit 2, naming the file and the key), not discovered by every
worker after the run started (exit 3), or worse, computed: a batch of 0 makes `train`'s loss NaN, which
its finite-loss invariant reports as a miscomputing unit. Torch-free, like the catalogue.

A problem is a phrase such as `must be an integer >= 1 (got 0)`; the values it quotes are cut to
SHOWN_CHARS, because a profile path may name a file that is not a profile at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard

from sdcscan.calibration.table import check_table_file
from sdcscan.errors import UsageError

MAX_INT = 10**9  # no count or size is meaningfully larger; it also keeps YAML's unbounded ints out of torch
MAX_NUMBER = 1e9
SHOWN_CHARS = 40


def shown(value: object) -> str:
    """A value for a message: its repr, cut to SHOWN_CHARS characters."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # nested too deeply; an integer too long for repr
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


class Param(Protocol):
    """The values one parameter accepts."""

    def describe(self) -> str:
        """What is accepted, as a noun phrase: `an integer >= 1`."""

    def problem(self, value: object) -> str | None:
        """None when `value` is accepted, else what is wrong: `must be an integer >= 1 (got 0)`."""


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    # an int is checked as is: YAML's may exceed any float, so it never goes through isfinite
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


@dataclass(frozen=True)
class Int:
    """An integer in [low, high], optionally a multiple of `multiple_of`."""

    low: int = 1
    high: int = MAX_INT
    multiple_of: int = 1

    def describe(self) -> str:
        span = (
            f"an integer >= {self.low}" if self.high == MAX_INT else f"an integer in {self.low}..{self.high}"
        )
        return span + (f", a multiple of {self.multiple_of}" if self.multiple_of > 1 else "")

    def problem(self, value: object) -> str | None:
        if not _is_int(value) or value < self.low or value % self.multiple_of:
            return f"must be {self.describe()} (got {shown(value)})"
        if value > self.high:
            return f"must be at most {self.high} (got {shown(value)})"
        return None


@dataclass(frozen=True)
class Number:
    """A finite number (an integer is one too) above `low` (or at least `low`) and at most `high`."""

    low: float
    high: float = MAX_NUMBER
    low_open: bool = False  # True: `low` itself is refused

    def describe(self) -> str:
        above = f"> {self.low:g}" if self.low_open else f">= {self.low:g}"
        return f"a number {above}" + ("" if self.high == MAX_NUMBER else f" and <= {self.high:g}")

    def problem(self, value: object) -> str | None:
        wanted = f"must be {self.describe()} (got {shown(value)})"
        if not _is_number(value) or (value <= self.low if self.low_open else value < self.low):
            return wanted
        if value > self.high:
            return (
                wanted if self.high != MAX_NUMBER else f"must be at most {self.high:g} (got {shown(value)})"
            )
        return None


@dataclass(frozen=True)
class Choice:
    """One of a fixed set of names."""

    options: tuple[str, ...]

    def describe(self) -> str:
        return "one of " + ", ".join(self.options)

    def problem(self, value: object) -> str | None:
        return None if value in self.options else f"must be {self.describe()} (got {shown(value)})"


@dataclass(frozen=True)
class Flag:
    """true or false."""

    def describe(self) -> str:
        return "true or false"

    def problem(self, value: object) -> str | None:
        return None if isinstance(value, bool) else f"must be true or false (got {shown(value)})"


@dataclass(frozen=True)
class ListOf:
    """A non-empty list whose every item is accepted by `item`; `length`: exactly that many items."""

    item: Param
    length: int | None = None

    def describe(self) -> str:
        size = f"a list of {self.length}" if self.length else "a non-empty list"
        return f"{size}, each {self.item.describe()}"

    def problem(self, value: object) -> str | None:
        if not isinstance(value, list) or not value or (self.length and len(value) != self.length):
            return f"must be {self.describe()} (got {shown(value)})"
        for i, v in enumerate(value):
            wrong = self.item.problem(v)
            if wrong:
                return f"item [{i}] {wrong}"
        return None


@dataclass(frozen=True)
class Shape:
    """A GEMM shape [m, k, n] of integers, each dimension with its own range."""

    m: Int = Int()
    k: Int = Int()
    n: Int = Int()

    def describe(self) -> str:
        return f"[m, k, n] with m {self.m.describe()}, k {self.k.describe()}, n {self.n.describe()}"

    def problem(self, value: object) -> str | None:
        if not isinstance(value, list) or len(value) != 3:
            return f"must be [m, k, n] (got {shown(value)})"
        for name, dim, v in zip("mkn", (self.m, self.k, self.n), value, strict=True):
            wrong = dim.problem(v)
            if wrong:
                return f"{name} {wrong}"
        return None


@dataclass(frozen=True)
class CalibrationPath:
    """The path of a calibration table (checked: it exists and is one), or "" for the one shipped."""

    def describe(self) -> str:
        return "the path of a calibration table, or '' for the shipped one"

    def problem(self, value: object) -> str | None:
        if not isinstance(value, str):
            return f"must be {self.describe()} (got {shown(value)})"
        if value:
            try:
                check_table_file(value)
            except UsageError as err:
                return str(err)
        return None


def one_per_dtype(params: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, str] | None:
    """(key, problem) for the first list in `keys` without one entry per item of `params["dtypes"]`.

    Workloads with per-dtype lists index them by the same slot: a short list fails mid-run.
    """
    n = len(params["dtypes"])
    for key in keys:
        if len(params[key]) != n:
            return key, f"needs one entry per dtype (dtypes has {n}, {key} has {len(params[key])})"
    return None
