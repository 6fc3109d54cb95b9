"""`sdcscan sentinel` as a library call: check the outputs, scan the kernel's logs, record, publish.

The window starts where the last scan on record ended (or a week back on a host's first scan), so
scans from cron cover the host's log without gaps or double counting. Outputs are checked before
anything is read, as for `sdcscan run`. Only these standalone scans are recorded as sentinel scans:
the window of a `sdcscan run` goes into its report alone, so it never moves the next scan's start.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from sdcscan import units
from sdcscan.errors import UsageError
from sdcscan.files import check_output_target, write_text_atomic
from sdcscan.outputs import history
from sdcscan.outputs.prom import sentinel_prom_text
from sdcscan.outputs.publish import history_path
from sdcscan.outputs.sentinel_history import last_sentinel_scan, record_sentinel_scan
from sdcscan.sentinel.window import SentinelScan, default_since, scan_window
from sdcscan.timefmt import parse_duration, parse_iso_utc

MAX_LOOKBACK_S = 366 * 86400.0


@dataclass(frozen=True)
class SentinelOptions:
    since: str | None = None  # an ISO-8601 time or a duration ago; None: where the last scan ended
    prom: str | os.PathLike[str] | None = None
    history: str | os.PathLike[str] | None = None
    record_history: bool = True
    hostname: str | None = None


def parse_since(text: str, *, now: float) -> float:
    """`--since`: an ISO-8601 time (`2026-11-20T08:00:00Z`) or a duration ago (`24h`, `7d`).

    Raises:
        UsageError: neither, or a time in the future.
    """
    try:
        when = parse_iso_utc(text)
    except ValueError:
        try:
            when = now - parse_duration(text, max_s=MAX_LOOKBACK_S, require_unit=True, examples="24h, 7d")
        except UsageError as err:
            raise UsageError(f"--since: {err}, or an ISO-8601 time such as 2026-11-20T08:00:00Z") from None
    if when > now:
        raise UsageError(f"--since {text!r} is in the future")
    return when


def sentinel(opts: SentinelOptions) -> tuple[SentinelScan, str]:
    """Scan the kernel logs of this host for the window, record the scan, write the Prometheus file.

    Returns:
        The scan and the host name it was labelled with.

    Raises:
        UsageError: a bad `--since`, an output path that cannot be written, or a history that is
            unreadable, foreign or damaged: all before any log is read.
        RunError, ReportError: the history or the Prometheus file could not be written.
    """
    now = time.time()
    if opts.prom is not None:
        check_output_target(opts.prom, option="--prom")
    db = history_path(opts.history)
    if opts.record_history:
        history.check_health(db)
    since = parse_since(opts.since, now=now) if opts.since is not None else _since_last_scan(db, now)
    gpus = {u.pci: u.id for u in units.gpu_units() if u.pci}
    result = scan_window(since, now, gpu_units=gpus)
    hostname = opts.hostname or units.host_inventory()["hostname"]
    if opts.record_history and result.read_anything:  # a scan that read nothing must not move the start
        record_sentinel_scan(db, result.section, hostname)
    if opts.prom is not None:
        write_text_atomic(opts.prom, sentinel_prom_text(result.section, hostname))
    return result, hostname


def _since_last_scan(db: Path, now: float) -> float:
    last = last_sentinel_scan(db)  # None without a database or a scan
    return default_since(last.get("until") if last else None, now=now)
