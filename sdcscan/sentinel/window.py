"""One sentinel scan: read the kernel's logs for a window and judge each core against its peers.

This is Meta's Hardware Sentinel in the small: no test runs, the evidence is the application crashes,
machine checks and GPU Xids the kernel already logged. The result is the report's `sentinel` section
(the same for `sdcscan sentinel` and for the window of an `sdcscan run`) plus report-style findings.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sdcscan.report.document import Finding, Sentinel
from sdcscan.sentinel.kernel_log import LogRead, read_kernel_log
from sdcscan.sentinel.outliers import KIND_OUTLIER, core_outliers, findings, host_counts, range_notes, tally
from sdcscan.timefmt import iso_utc

FIRST_WINDOW_S = 7 * 86400.0  # the first scan of a host looks back a week (the journal usually has it)
RUN_READ_S = 10.0  # the most a run's own window may spend reading the kernel log (a healthy read: < 1 s)


@dataclass(frozen=True)
class SentinelScan:
    """A scan's report section, its findings, and whether any kernel log could be read at all."""

    section: Sentinel
    findings: list[Finding]

    @property
    def read_anything(self) -> bool:
        """False when no kernel-log source could be read (permissions, no tool): nothing was judged."""
        return bool(self.section["sources"])

    @property
    def outliers(self) -> list[str]:
        """The cores far more programs crashed on than their peers make likely."""
        return [f["unit"] for f in self.findings if f["kind"] == KIND_OUTLIER and f["unit"] is not None]


def scan_window(
    since: float,
    until: float,
    *,
    cpus: int | None = None,
    gpu_units: Mapping[str, str] | None = None,
    read: Callable[[float, float], LogRead] | None = None,
) -> SentinelScan:
    """Read the kernel logs between `since` and `until` (seconds since the epoch) and judge them.

    Args:
        cpus: the host's logical CPUs (all of them, not only this process's affinity); default: the OS's count.
        gpu_units: PCI bus id -> `cuda:N`, so that Xids name the unit the report uses.
        read: the log reader (default `sources.read_kernel_log`; tests pass a fake).

    Raises:
        UsageError: a window that is not a time range (NaN, infinite, or `since` after `until`).
    """
    log = (read or read_kernel_log)(since, until)
    host_cpus = cpus or os.cpu_count() or 1
    tallies = tally(log.events, gpu_units=gpu_units or {})
    outliers = core_outliers(log.events, cpus=host_cpus)
    counts = host_counts(log.events)
    section: Sentinel = {
        "since": iso_utc(log.since),
        "until": iso_utc(log.until),
        "sources": list(log.sources),
        "notes": [*log.notes, *range_notes(log.events, cpus=host_cpus)],
        "stats": log.stats.to_dict(),
        "cpus": host_cpus,
        "host_counts": counts,
        "units": {unit: t.to_dict() for unit, t in tallies.items()},
        "outliers": [o.to_dict() for o in outliers],
    }
    return SentinelScan(section, findings(outliers, tallies, host=counts))


def default_since(last_until: str | None, *, now: float | None = None) -> float:
    """Where a scan starts when not told: the end of the last scan on record, else FIRST_WINDOW_S ago."""
    from sdcscan.timefmt import parse_iso_utc

    now = time.time() if now is None else now
    if last_until:
        try:
            return min(parse_iso_utc(last_until), now)
        except ValueError:
            pass  # a damaged record: fall back to the first window rather than fail the scan
    return now - FIRST_WINDOW_S


def scan_window_quietly(
    started: float, ended: float, gpus: Mapping[str, str], *, deadline: float | None = None
) -> SentinelScan | None:
    """The kernel-log evidence of a run's own window, for its report; None if it could not be had.

    `gpus`: PCI bus id -> `cuda:N`. `deadline` (seconds since the epoch): the run's end bound; the
    read is over by then and within RUN_READ_S whatever is given (a tool that hangs or floods is
    killed and named in the section's notes), and a signal the run holds ends it within
    `kernel_log.SIGNAL_GRACE_S`. Never raises: the run's verdict rests on its tests, and this is
    extra evidence beside them.
    """
    read_by = time.time() + RUN_READ_S
    read_by = read_by if deadline is None else min(read_by, deadline)
    try:
        return scan_window(
            started,
            max(started, ended),
            gpu_units=gpus,
            read=lambda since, until: read_kernel_log(since, until, deadline=read_by),
        )
    except Exception:  # a reader bug must not cost a judged run its report
        return None
