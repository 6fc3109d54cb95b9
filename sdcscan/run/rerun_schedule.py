"""When each re-run happens: the schedule of the re-run phase after the main pass, pure.

`verdict.retest_plan` says WHAT to re-run, as (unit, case index) jobs in order; this module hands
those jobs out one at a time per unit as units come free, numbers each attempt and says when the
phase is over. The caller passes the time in (`now`), so the schedule reads no clock and owns no
process; `retest.py` then classifies what the re-runs showed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass

RETEST_MIN_S, RETEST_MAX_S, RETEST_SHARE = 5.0, 30.0, 0.05  # re-run window: 5% of the budget, 5..30 s
MAX_RETEST_CASES = 3  # failing cases re-run per unit: enough to classify, bounded in time


def retest_window(budget_s: float) -> float:
    """Seconds allowed for re-runs after the main pass: a share of the budget, within bounds."""
    return min(RETEST_MAX_S, max(RETEST_MIN_S, RETEST_SHARE * budget_s))


@dataclass(frozen=True, slots=True)
class Rerun:
    """One re-run to send to a unit now."""

    unit: str
    index: int  # the case
    attempt: int  # 1, 2, … per (unit, case): a new number draws injected faults afresh


class RerunSchedule:
    """Hands out the re-run jobs: one at a time per unit, each unit's jobs in plan order, until `until`."""

    def __init__(self, jobs: Iterable[tuple[str, int]], *, until: float) -> None:
        self.until = until
        # One queue per unit, units in the order they first appear in the plan.
        self._queues: dict[str, deque[int]] = {}
        for unit, index in jobs:
            self._queues.setdefault(unit, deque()).append(index)
        self._attempts: dict[tuple[str, int], int] = {}
        self.cases = tuple(sorted({i for q in self._queues.values() for i in q}))  # every case to re-run

    def is_open(self, now: float) -> bool:
        """The re-run window has not ended yet."""
        return now < self.until

    def assign(self, free: Collection[str]) -> list[Rerun]:
        """The next job of each free unit that has one left, in plan order of the units.

        Args:
            free: units that are alive and run nothing now.
        """
        out = []
        for unit, queue in self._queues.items():
            if unit in free and queue:
                index = queue.popleft()
                attempt = self._attempts.get((unit, index), 0) + 1
                self._attempts[(unit, index)] = attempt
                out.append(Rerun(unit, index, attempt))
        return out

    def waiting_on(self, alive: Collection[str], busy: Collection[str]) -> list[str]:
        """Units the phase still waits for: alive, with jobs left or one running. Empty: it is over."""
        return [u for u, q in self._queues.items() if u in alive and (q or u in busy)]
