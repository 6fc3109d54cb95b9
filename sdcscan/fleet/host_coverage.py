"""Coverage of a fleet: which listed hosts did not report, reported too long ago, or reported nothing testable.

Pure: no I/O, no clock (`now` is passed in).

Rules, each with its reason in the finding's evidence:

- A report *covers* its host when it tested something: at least one unit ran a case that left a
  digest to compare, or failed an invariant check. A report with no unit, whose units ran no case, or
  whose cases all left no digest (every case errored) tested nothing and does not cover the host.
- A report that ends more than `FUTURE_SKEW_S` after `now` comes from a host whose clock is ahead (or
  a hand-edited file): its true age cannot be known, so it never counts as fresh. It gets a `future`
  warning and does not cover its host; an older report of that host still can.
- A listed host covered by no report is `missing`, with why (no report at all, or what was wrong with
  the ones it sent). One whose newest covering report is more than `stale_s` old is `stale`; exactly
  `stale_s` old is not. The ages in the evidence carry as many decimals as it takes to show the age
  above the limit ("60.00001 days old (limit 60.0)", never "60.0 days old (limit 60.0)").
- Inventory names and reported hostnames are matched exactly first. A name that differs from an
  inventory entry only by case or by domain suffix (`NODE1.example.com` for `node1`; IP addresses
  are compared whole) is treated as that host when the match is one-to-one, and an `alias` finding
  says so; when several names could match each other, nothing is merged, and the `missing` and
  `unlisted` findings name the near-matches. A reported host matching no inventory entry is named in
  an `unlisted` finding (a warning: the inventory may be out of date).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from typing import NamedTuple

from sdcscan.fleet.findings import Collector
from sdcscan.fleet.model import HostReport
from sdcscan.timefmt import iso_utc

FUTURE_SKEW_S = 3600.0  # clocks of healthy hosts disagree by seconds; an hour ahead is a wrong clock
DAY_S = 86400.0
MAX_DECIMALS = 12


class Covered(NamedTuple):
    """A kept report (no cases), and what its units tested: all coverage needs of it."""

    report: HostReport
    units: int
    case_rows: int  # cases over all its units
    tested_units: int  # units that left a digest or failed an invariant check


def coverage_findings(
    reported: Iterable[str],
    by_host: Iterable[tuple[str, list[Covered]]],
    col: Collector,
    hosts: tuple[str, ...],
    *,
    now: float,
    stale_s: float,
) -> int:
    """Add `missing`, `stale`, `alias`, `unlisted` and `future` findings for an inventory of hosts.

    Args:
        reported: every hostname that has a report among `by_host`.
        by_host: (hostname, its de-duplicated, usable reports), one item per host (a corrupt file does
            not count as coverage). Read once, host by host: a million hosts' reports are never held.
        col: where findings go.
        hosts: hostnames that should have reported (the inventory).
        now: POSIX seconds to measure age against (passed in, so tests are deterministic).
        stale_s: maximum age of a host's newest covering report; exactly this old is not stale.

    Returns:
        How many reported hosts are not in the inventory (an alias counts as listed).
    """
    match = match_inventory(hosts, reported)
    alias_of = {seen: name for name, seen in match.reported_as.items() if seen != name}
    for host, reports in by_host:
        future_findings([c.report for c in reports], col, now=now)
        name = alias_of.get(host, host if host in match.listed else None)
        if name is None:
            continue  # unlisted: below
        if name != host:
            col.add_host(name, None, "alias", _alias_evidence(name, host))
        _judge_host(name, reports, col, now=now, stale_s=stale_s)
    for name in sorted(match.listed - match.reported_as.keys()):
        near = tuple(n for n in match.near(name) if n not in match.listed)
        col.add_host(name, None, "missing", {"reason": _missing_reason([], near)})
    for host in match.unlisted:
        near = tuple(n for n in match.near(host) if n in match.listed)
        col.add_host(host, None, "unlisted", _unlisted_evidence(host, near))
    return len(match.unlisted)


def future_findings(reports: Iterable[HostReport], col: Collector, *, now: float) -> None:
    """Add a `future` warning for each host whose newest report ends more than FUTURE_SKEW_S after `now`."""
    ahead: dict[str, HostReport] = {}
    for r in reports:
        if r.ended_at > now + FUTURE_SKEW_S and (r.host not in ahead or _newer(r, ahead[r.host])):
            ahead[r.host] = r
    for host, r in sorted(ahead.items()):
        days = _days(r.ended_at - now)
        col.add_host(
            host,
            None,
            "future",
            {
                "run": r.run_id,
                "ended_at": iso_utc(r.ended_at),
                "days_ahead": days,
                "reason": (
                    f"report {r.run_id} says it ended {iso_utc(r.ended_at)}, {days} days in the future: "
                    "the host's clock is wrong (or the file was edited); its age is unknown, so it does "
                    "not count as a fresh report. Fix the clock (NTP) and run sdcscan again."
                ),
            },
        )


def _newer(a: HostReport, b: HostReport) -> bool:
    return (a.ended_at, a.run_id) > (b.ended_at, b.run_id)


def _judge_host(name: str, reports: list[Covered], col: Collector, *, now: float, stale_s: float) -> None:
    """`missing` when no report of the host covers it, `stale` when the newest that does is too old."""
    covering = [c for c in reports if not_covering(c, now=now) is None]
    if not covering:
        col.add_host(name, None, "missing", {"reason": _missing_reason(reports, (), now=now)})
        return
    when = max(c.report.ended_at for c in covering)
    age = now - when
    if age > stale_s:  # exactly stale_s old is still fresh
        age_days, limit_days = distinct_days(age, stale_s)
        col.add_host(
            name,
            None,
            "stale",
            {
                "newest_report_at": iso_utc(when),
                "age_days": age_days,
                "stale_after_days": limit_days,
                "reason": (
                    f"newest report {iso_utc(when)} is {age_days} days old, older than the limit of "
                    f"{limit_days} days"
                ),
            },
        )


def not_covering(c: Covered, *, now: float = math.inf) -> str | None:
    """Why a report does not cover its host (it tested nothing, or its time is in the future), or None."""
    if c.report.ended_at > now + FUTURE_SKEW_S:
        return f"it ends {iso_utc(c.report.ended_at)}, in the future (clock ahead): its age is unknown"
    if not c.units:
        return "it has no unit"
    if not c.case_rows:
        return "its units ran no case"
    if not c.tested_units:
        return "its cases left no digest to compare (every case failed to run)"
    return None


def _missing_reason(reports: list[Covered], near: tuple[str, ...], *, now: float = math.inf) -> str:
    """`no usable report`, or why the reports it sent do not count, plus any near-matching names."""
    if not reports:
        reason = "no usable report"
    else:
        newest = max(reports, key=lambda c: (c.report.ended_at, c.report.run_id))
        why = not_covering(newest, now=now)
        more = (
            f" (and {len(reports) - 1} other report(s) that do not count either)" if len(reports) > 1 else ""
        )
        reason = f"no report that tested this host: in {newest.report.source}, {why}{more}"
    if near:
        reason += f"; near-matches that reported: {', '.join(near)} (differ by case or domain)"
    return reason


def _alias_evidence(name: str, reported: str) -> dict[str, str]:
    return {
        "reported_as": reported,
        "reason": (
            f"reports come from {reported}, which differs from the inventory's {name} only by case or "
            "domain: counted as this host. Fix the inventory or the hostname to make them equal."
        ),
    }


def _unlisted_evidence(host: str, near: tuple[str, ...]) -> dict[str, str]:
    reason = "reported, but not in the --hosts inventory (is the inventory out of date?)"
    if near:
        reason += (
            f"; near-matches in the inventory: {', '.join(near)} (differ by case or domain; not merged "
            "because the match is not one-to-one)"
        )
    return {"reason": reason}


# ---------------------------------------------------------------------------------------------------
# Matching the inventory with the hostnames that reported.


def name_key(name: str) -> str:
    """What two names of one host share: the first label, case-folded; an IP address whole.

    `node1`, `NODE1` and `node1.example.com.` give `node1`; `10.0.0.1` stays `10.0.0.1` (its labels
    are not a domain).
    """
    bare = name.strip().rstrip(".").casefold()
    # Only a name of digits and dots (IPv4) or with a colon (IPv6) can be an address: parsing every
    # hostname as one cost tens of seconds at a million hosts.
    if ":" in bare or bare.replace(".", "").isdigit():
        try:
            ipaddress.ip_address(bare)
            return bare
        except ValueError:
            pass
    return bare.split(".", 1)[0]


@dataclass(frozen=True)
class InventoryMatch:
    """How inventory names map to reported hostnames.

    Attributes:
        reported_as: inventory name -> the reported hostname standing for it (itself, or an alias).
        unlisted: reported hostnames standing for no inventory name, sorted.
        keys: name_key -> every inventory name and reported hostname with that key, sorted, for the keys
            of names left without an exact match that more than one name shares.
        listed: the inventory.
    """

    reported_as: dict[str, str]
    unlisted: tuple[str, ...]
    keys: dict[str, tuple[str, ...]]
    listed: frozenset[str]

    def near(self, name: str) -> tuple[str, ...]:
        """Other names (listed or reported) that differ from `name`, a name without an exact match
        (missing or unlisted), only by case or domain."""
        return tuple(n for n in self.keys.get(name_key(name), ()) if n != name)


def match_inventory(hosts: Iterable[str], reported: Iterable[str]) -> InventoryMatch:
    """Match inventory names with reported hostnames: exactly, else one-to-one by `name_key`.

    A pair that differs only by case or domain is merged only when it is the one inventory name and
    the one unmatched reported name with that key: `node1` in the inventory and reports from both
    `node1.a.com` and `node1.b.com` (two machines?) are not merged, and each is named as a near-match.

    Only the names without an exact match (a few, in a fleet that reports) get anything more than the
    two sets: at a million hosts, a set of names per key of every name held half a gigabyte.
    """
    listed, seen = frozenset(hosts), set(reported)
    reported_as = {h: h for h in listed & seen}
    spare_seen = sorted(seen - listed)
    spare_listed: dict[str, list[str]] = {}
    by_key: dict[str, list[str]] = {}
    for h in sorted(listed - seen):
        spare_listed.setdefault(name_key(h), []).append(h)
    for h in spare_seen:
        by_key.setdefault(name_key(h), []).append(h)
    merged: set[str] = set()
    for key, names in spare_listed.items():
        others = by_key.get(key, [])
        if len(names) == 1 and len(others) == 1:
            reported_as[names[0]] = others[0]
            merged.add(others[0])
    keys: dict[str, set[str]] = {}
    wanted = spare_listed.keys() | by_key.keys()
    if wanted:
        for h in chain(listed, spare_seen):  # every name once: a reported name is listed or spare
            key = name_key(h)
            if key in wanted:
                keys.setdefault(key, set()).add(h)
    return InventoryMatch(
        reported_as=reported_as,
        unlisted=tuple(h for h in spare_seen if h not in merged),
        keys={k: tuple(sorted(v)) for k, v in keys.items() if len(v) > 1},
        listed=listed,
    )


# ---------------------------------------------------------------------------------------------------
# Ages in days that never read "60.0 days old (limit 60.0)".


def distinct_days(age_s: float, limit_s: float) -> tuple[float, float]:
    """(age, limit) in days, rounded to the fewest decimals (at least one) that keep age > limit visible.

    Args:
        age_s: an age strictly greater than `limit_s`.
        limit_s: the limit, in seconds.
    """
    age, limit = age_s / DAY_S, limit_s / DAY_S
    for decimals in range(1, MAX_DECIMALS + 1):
        shown_age, shown_limit = round(age, decimals), round(limit, decimals)
        if shown_age > shown_limit:
            return shown_age, shown_limit
    return age, limit  # closer than 1e-12 days (under a microsecond): the floats themselves differ


def _days(seconds: float) -> float:
    return round(seconds / DAY_S, 1) if seconds >= DAY_S / 10 else round(seconds / DAY_S, 4)
