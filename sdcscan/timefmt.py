"""Time as text: durations people type (`90s`, `1d12h`) and the UTC instants sdcscan writes (`…Z`).

One parser of durations serves run budgets (`--budget`, a profile's `budget`) and ages
(`compare --stale`); each caller passes its own limits. One formatter writes every time in reports,
calibration tables, the history and the run lock as `2026-01-02T03:04:05Z`, and one parser reads
those back. Standard library only: imported by the run core and the fleet side alike.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from sdcscan.errors import UsageError

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?", re.IGNORECASE)
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(
    text: str | float | int,
    *,
    max_s: float | None = None,
    require_unit: bool = False,
    examples: str = "90s, 15m, 2h",
) -> float:
    """Parse `500ms`, `90s`, `15m`, `2h`, `2d`, `8w`, combinations (`1h30m`, `1d12h`) or plain seconds.

    Args:
        text: the duration; a number (not a bool) is seconds.
        max_s: the largest duration allowed, or None for no limit.
        require_unit: refuse a bare number such as `10` (for ages, where plain seconds are never meant).
        examples: shown in the error, in the caller's terms.

    Returns:
        Seconds, more than 0 and at most `max_s`.

    Raises:
        UsageError: `invalid duration '<text>': …` saying what was expected or which limit was broken.
    """
    malformed = UsageError(f"invalid duration {text!r}: expected e.g. {examples}")
    if isinstance(text, bool):
        raise malformed
    if isinstance(text, int | float):
        if require_unit:
            raise malformed
        seconds = float(text)
    else:
        seconds = _sum_parts(str(text).strip().replace(" ", ""), require_unit, malformed)
    if not seconds > 0 or (max_s is not None and seconds > max_s):
        limit = "" if max_s is None else f" s and at most {_say(max_s)}"
        raise UsageError(f"invalid duration {text!r}: must be more than 0{limit}")
    return seconds


def _sum_parts(s: str, require_unit: bool, malformed: UsageError) -> float:
    """`1d12h` -> 129600.0; raise `malformed` for anything that is not number-unit pairs."""
    if not s:
        raise malformed
    pos, seconds = 0, 0.0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if not m or (require_unit and m.group(2) is None):
            raise malformed
        seconds += float(m.group(1)) * _UNIT_S[(m.group(2) or "s").lower()]
        pos = m.end()
    return seconds


def _say(seconds: float) -> str:
    """A limit in words: 2592000 -> `30 days`."""
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def iso_utc(ts: float) -> str:
    """POSIX seconds -> `2026-01-02T03:04:05Z` (UTC, whole seconds: the format of every sdcscan file)."""
    when = datetime.fromtimestamp(ts, timezone.utc)
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_iso_utc(text: str) -> float:
    """An ISO-8601 time (`…Z`, `…+02:00`, or no zone, taken as UTC) -> POSIX seconds.

    Raises:
        ValueError: not an ISO-8601 time (the caller says which field it was).
    """
    if not isinstance(text, str):
        raise ValueError(f"not an ISO-8601 time: {text!r}")
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()
