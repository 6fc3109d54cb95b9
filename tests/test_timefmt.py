"""Durations people type and the UTC instants sdcscan writes: one parser and one formatter for all callers."""

from __future__ import annotations

import pytest

from sdcscan.errors import UsageError
from sdcscan.timefmt import iso_utc, parse_duration, parse_iso_utc


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("90s", 90),
        ("15m", 900),
        ("2h", 7200),
        ("36h", 129600),
        ("60d", 5184000),
        ("8w", 4838400),
        ("1d12h", 129600),
        ("1h 30m", 5400),
        ("2H", 7200),
        ("45", 45),
        (30, 30),
        (0.25, 0.25),
    ],
)
def test_budgets_and_ages_parse_with_one_grammar(text: str | float, seconds: float) -> None:
    """ms, s, m, h, d, w and combinations; a bare number is seconds."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10x", "5y", "-5s", "s", "1d-2h", True])
def test_malformed_durations_say_what_was_expected(text: object) -> None:
    """Garbage raises UsageError quoting the text and the caller's examples."""
    with pytest.raises(UsageError, match=r"^invalid duration .*: expected e\.g\. 60d, 8w$"):
        parse_duration(text, examples="60d, 8w")  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["0s", "0", 0, float("nan")])
def test_a_duration_must_be_positive(text: object) -> None:
    """Zero (and NaN) is refused with no upper limit named when the caller sets none."""
    with pytest.raises(UsageError, match=r"must be more than 0$"):
        parse_duration(text)  # type: ignore[arg-type]


def test_the_callers_limit_is_enforced_and_named() -> None:
    """A maximum is optional: 99d is a fine age and too long for a 30-day budget."""
    assert parse_duration("99d") == 99 * 86400
    assert parse_duration("30d", max_s=30 * 86400) == 30 * 86400
    with pytest.raises(UsageError, match="must be more than 0 s and at most 30 days"):
        parse_duration("99d", max_s=30 * 86400)


@pytest.mark.parametrize("text", ["10", "1d10", 10])
def test_require_unit_refuses_bare_numbers(text: object) -> None:
    """Ages need a unit: `--stale 10` is refused rather than read as 10 seconds."""
    assert parse_duration("10s", require_unit=True) == 10
    with pytest.raises(UsageError, match="invalid duration"):
        parse_duration(text, require_unit=True)  # type: ignore[arg-type]


def test_iso_utc_writes_whole_seconds_with_z() -> None:
    """The format of every time sdcscan writes: `2026-01-02T03:04:05Z`, fractions dropped."""
    ts = 1767323045.75  # 2026-01-02T03:04:05.75Z
    assert iso_utc(ts) == "2026-01-02T03:04:05Z"
    assert iso_utc(0) == "1970-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("text", "ts"),
    [
        ("2026-01-02T03:04:05Z", 1767323045.0),
        ("2026-01-02T04:04:05+01:00", 1767323045.0),
        ("2026-01-02T03:04:05", 1767323045.0),  # no zone: UTC, as sdcscan writes
    ],
)
def test_parse_iso_utc_reads_what_iso_utc_writes(text: str, ts: float) -> None:
    """Round trip, other zones converted, a missing zone taken as UTC."""
    assert parse_iso_utc(text) == ts
    assert parse_iso_utc(iso_utc(ts)) == ts


@pytest.mark.parametrize("text", ["yesterday", "", None, 5])
def test_parse_iso_utc_refuses_non_times_with_value_error(text: object) -> None:
    """The caller decides the error (usage or report), so the parser raises ValueError."""
    with pytest.raises(ValueError, match=r"."):
        parse_iso_utc(text)  # type: ignore[arg-type]
