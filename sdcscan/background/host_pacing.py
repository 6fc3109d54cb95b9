"""Background mode's host pacing: whether a run starts at all, from the host's load and how long it has gone
unscreened (OpenDCDiag's service mode paces itself in the same spirit).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from sdcscan.report.document import Pacing as PacingDoc

NOT_SCREENED = "not screened"  # how the reason of a unit the host's own work kept from running begins
MAX_UNSCREENED_S = 24 * 3600.0  # a host unscreened this long is screened whatever its load
LOAD_QUIET = 0.25  # load per CPU under which a just-screened host counts as quiet enough
LOAD_ANY = 1.0  # ... the bar rises linearly to this as the time since the last screen nears the maximum
HOST_CHECK_S = 10.0  # how often a waiting run looks at the load again


def load_threshold(unscreened_s: float | None, max_unscreened_s: float = MAX_UNSCREENED_S) -> float:
    """The load per CPU under which a host may be screened now; infinity once it is due (or never was).

    The longer a host has gone unscreened, the busier it may be: a busy host still gets screened, in
    the quieter part of its day, and never goes longer than `max_unscreened_s` without.
    """
    if unscreened_s is None or unscreened_s >= max_unscreened_s:
        return float("inf")
    rise = max(0.0, unscreened_s) / max_unscreened_s
    return LOAD_QUIET + (LOAD_ANY - LOAD_QUIET) * rise


def load_per_cpu(*, loadavg_path: str = "/proc/loadavg", cpus: int | None = None) -> float | None:
    """The host's one-minute load average per logical CPU, or None where it cannot be read."""
    try:
        with open(loadavg_path) as f:
            load = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return load / (cpus or os.cpu_count() or 1)


@dataclass(frozen=True)
class Pacing:
    """What the host gate decided: the report's `run.background.pacing`."""

    screen: bool  # False: the host stayed busy until the budget ended
    forced: bool  # due (or never screened): the load was not asked
    unscreened_s: float | None  # since the last judged run; None: never screened
    load_per_cpu: float | None  # the last load looked at
    threshold: float | None  # the bar it was held against (None when forced)
    waited_s: float

    def to_dict(self) -> PacingDoc:
        return {
            "screen": self.screen,
            "forced": self.forced,
            "unscreened_s": None if self.unscreened_s is None else round(self.unscreened_s, 1),
            "load_per_cpu": None if self.load_per_cpu is None else round(self.load_per_cpu, 3),
            "threshold": None if self.threshold is None else round(self.threshold, 3),
            "waited_s": round(self.waited_s, 1),
        }


def wait_for_quiet_host(
    *,
    unscreened_s: float | None,
    deadline: float,
    max_unscreened_s: float = MAX_UNSCREENED_S,
    read_load: Callable[[], float | None] | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> Pacing:
    """Wait until the host is quiet enough for a screen, or due for one, or the budget is over.

    A load that cannot be read does not hold a screen back. Signals end the wait like any sleep.
    """
    read_load = read_load or load_per_cpu
    started = clock()
    load = None
    while True:
        waited = clock() - started
        since = None if unscreened_s is None else unscreened_s + waited
        threshold = load_threshold(since, max_unscreened_s)
        if threshold == float("inf"):
            return Pacing(True, True, unscreened_s, load, None, waited)
        load = read_load()
        if load is None or load <= threshold:
            return Pacing(True, False, unscreened_s, load, threshold, waited)
        if clock() + HOST_CHECK_S > deadline:
            return Pacing(False, False, unscreened_s, load, threshold, waited)
        sleep(HOST_CHECK_S)
