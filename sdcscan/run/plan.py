"""The plan: the endless, deterministic sequence of cases derived from (profile, run seed).

Every unit executes the plan from case 0 in order, so two units (or two hosts) that ran case 17
ran exactly the same computation, and their digests can be compared.
"""

from __future__ import annotations

import datetime as dt
import hashlib

from sdcscan.outcomes import Case
from sdcscan.profile import Profile


def week_seed(profile: Profile, now: dt.datetime | None = None) -> int:
    """The default seed: from the profile's plan hash and the current UTC ISO week.

    A fleet running the same profile in the same week runs the same plan, so reports compare.
    """
    now = now or dt.datetime.now(dt.timezone.utc)
    year, week, _ = now.astimezone(dt.timezone.utc).isocalendar()
    return _hash_int(f"{profile.sha256}:{year}-W{week:02d}")


def _hash_int(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def cases_per_round(profile: Profile) -> int:
    """Cases in one round of the plan's weighted round robin: each workload `weight` times."""
    return sum(w.weight for w in profile.workloads)


class Plan:
    """Cases of a profile for one run seed and one device kind and class (GPU units, and CPUs of a class
    the profile sizes for, may use other parameters)."""

    def __init__(
        self, profile: Profile, seed: int, device_kind: str = "cpu", unit_class: str | None = None
    ) -> None:
        self.seed = seed
        self._params = {w.name: w.params_for(device_kind, unit_class) for w in profile.workloads}
        # Names the plan: two processes with the same key run the same case at every index. A class
        # that changes no parameter leaves the key as it was, so such units still share one plan.
        sized = self._params != {w.name: w.params_for(device_kind) for w in profile.workloads}
        self.key = f"{profile.sha256}:{seed}:{device_kind}" + (f":{unit_class}" if sized else "")
        self.unit_class = unit_class
        # Weighted round robin: round r includes every workload whose weight exceeds r, so all
        # workloads appear within the first few cases and the mix follows the weights.
        rounds = max(w.weight for w in profile.workloads)
        self._pattern = [w.name for r in range(rounds) for w in profile.workloads if w.weight > r]
        self._per_cycle = {name: self._pattern.count(name) for name in self._params}

    def case(self, index: int) -> Case:
        cycle, pos = divmod(index, len(self._pattern))
        name = self._pattern[pos]
        occurrence = cycle * self._per_cycle[name] + self._pattern[:pos].count(name)
        return Case(
            index=index,
            workload=name,
            seed=_hash_int(f"{self.seed}:{index}"),
            occurrence=occurrence,
            params=self._params[name],
        )

    def workload_of(self, index: int) -> str:
        return self._pattern[index % len(self._pattern)]
