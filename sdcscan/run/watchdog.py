"""When a unit's worker counts as stuck: the watchdog's policy, pure.

The runner asks `Watchdog.check` about each live worker on every poll and stops the ones it names.
The caller passes the time in (`now`, seconds since the epoch), so the policy reads no clock, owns
no process and is tested with plain floats. A worker whose process died is the runner's business.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

CASE_TIME_WINDOW = 512  # case times per workload the median looks at
READY_TIMEOUT_S = 180.0  # importing torch and preparing workloads on a loaded host
WATCHDOG_FLOOR_S = 5.0  # never call a case hung sooner than this
WATCHDOG_FACTOR = 10.0  # ... or sooner than this many times the workload's median case time
WATCHDOG_FIRST_S = 60.0  # before any case of a workload has finished anywhere
OVERRUN_S = 10.0  # after the budget, the main pass's last cases get this long; then whoever is busy is stuck


@dataclass(frozen=True, slots=True)
class CaseInFlight:
    """The case a worker said it started and has not reported yet."""

    index: int
    workload: str
    since: float  # when the worker started it, by its own clock (seconds since the epoch)
    kind: str = ""  # the unit's kind (cpu, cuda): its case times are learned apart from other kinds'


class Watchdog:
    """Decides when a worker is hung, never started, or runs on past the budget.

    It learns the case times of the main pass (`case_finished`) per unit kind and workload, in a
    bounded window: the check runs on every message, and a 10,000 s burn-in on 128 units records over a
    million cases. Kinds are apart because a GPU unit runs other parameters than a CPU unit: on an H200
    the CPU units' 0.1 s embbag_int8 cases set a 5 s limit that killed the GPU's first, longer case.
    """

    def __init__(self, window: int = CASE_TIME_WINDOW) -> None:
        self._window = window
        self._case_times: dict[tuple[str, str], deque[float]] = {}
        self._limits: dict[tuple[str, str], float] = {}  # case_limit per key, until its next finished case
        self.spawned_at = 0.0
        self.overrun_at: float | None = None  # main pass only: a unit still busy after this is stuck

    def main_pass_started(self, *, spawned_at: float, deadline: float) -> None:
        """The workers were started at `spawned_at` and told to stop starting cases at `deadline`."""
        self.spawned_at = spawned_at
        self.overrun_at = deadline + OVERRUN_S

    def main_pass_ended(self) -> None:
        """Re-runs follow: they have their own time window, so overrunning the budget no longer counts."""
        self.overrun_at = None

    def case_finished(self, workload: str, seconds: float, kind: str = "") -> None:
        """Record how long a main-pass case of `workload` took on a unit of `kind`."""
        key = (kind, workload)
        times = self._case_times.setdefault(key, deque(maxlen=self._window))
        times.append(seconds)
        self._limits.pop(key, None)

    def case_limit(self, workload: str, kind: str = "") -> float:
        """Seconds a case of `workload` on a unit of `kind` may run before it counts as hung."""
        key = (kind, workload)
        times = self._case_times.get(key)
        if not times:
            return WATCHDOG_FIRST_S
        # Cached: `check` asks for every busy unit on every message, and a median sorts the window.
        limit = self._limits.get(key)
        if limit is None:
            limit = self._limits[key] = max(WATCHDOG_FLOOR_S, WATCHDOG_FACTOR * statistics.median(times))
        return limit

    def overrun(self, now: float) -> bool:
        """The main pass runs past the budget by more than OVERRUN_S: whoever is still busy is stuck."""
        return self.overrun_at is not None and now > self.overrun_at

    def check(
        self,
        now: float,
        *,
        ready: bool,
        busy: bool,
        current: CaseInFlight | None,
        starved_s: float = 0.0,
        grace_s: float = 0.0,
    ) -> str | None:
        """Why a live worker must be stopped at `now`, or None while it may go on.

        Args:
            now: the time, seconds since the epoch.
            ready: the worker said it has prepared its workloads.
            busy: the worker has work it has not said it finished (the plan, or a re-run).
            current: the case it is running, if any.
            starved_s: seconds of that case (or of the start-up, before `ready`) the worker spent
                runnable but waiting for a CPU that other work held (background mode): not its fault.
            grace_s: seconds it may wait on its peers (a distributed case, or the agreement between
                cases, bounded by the collective timeout), past the budget and past its case limit.
        Returns:
            The reason, as the report states it, or None.
        """
        overrun = self.overrun(now - grace_s)
        waited = now - self.spawned_at - (0.0 if ready else starved_s)
        if not ready and (waited > READY_TIMEOUT_S or overrun):
            why = " and the budget ended" if overrun else ""
            # The wall time, not `waited`: a starved worker's own time can be nearly nothing.
            return f"worker did not start within {now - self.spawned_at:.0f} s{why}"
        if current is not None:
            running = now - current.since - starved_s
            if running > self.case_limit(current.workload, current.kind) + grace_s or overrun:
                return f"case {current.index} ({current.workload}) hung: no result after {running:.0f} s; worker killed"
            return None
        if busy and overrun:  # stuck outside any case, e.g. sending its results
            return f"worker did not finish its plan {OVERRUN_S:.0f} s after the budget ended; killed"
        return None
