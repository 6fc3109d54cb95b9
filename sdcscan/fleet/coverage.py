"""Coverage of a fleet: which listed hosts did not report, or reported too long ago. Pure: no I/O, no clock."""

from __future__ import annotations

import math

from sdcscan.fleet.findings import Collector
from sdcscan.fleet.model import HostReport
from sdcscan.timefmt import iso_utc


def coverage_findings(
    reports: list[HostReport], col: Collector, hosts: tuple[str, ...], *, now: float, stale_s: float
) -> int:
    """Add `missing` and `stale` findings for the listed hosts.

    Args:
        reports: de-duplicated, usable reports (a corrupt file does not count as coverage).
        col: where findings go.
        hosts: hostnames that should have reported.
        now: POSIX seconds to measure age against (passed in, so tests are deterministic).
        stale_s: maximum age of a host's newest report.

    Returns:
        How many hosts reported but are not in the list.
    """
    newest: dict[str, float] = {}
    for r in reports:
        newest[r.host] = max(newest.get(r.host, -math.inf), r.ended_at)
    listed = set(hosts)
    for host in sorted(listed):
        when = newest.get(host)
        if when is None:
            col.add_host(host, None, "missing", {"reason": "no usable report"})
        elif now - when > stale_s:
            col.add_host(
                host,
                None,
                "stale",
                {
                    "newest_report_at": iso_utc(when),
                    "age_days": round((now - when) / 86400, 1),
                    "stale_after_days": round(stale_s / 86400, 3),
                },
            )
    return len(set(newest) - listed)
