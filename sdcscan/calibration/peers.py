"""gemm_fp's calibrations held against the unit's peers: a unit must not calibrate away its own faults.

Each unit takes e_max from a file, the cache, the shipped table or its own fresh measurement
(`calibration.measure.resolve`). The measurement is deterministic: correct units of one cohort (same
device model, same software, same threads) measure bit-identical numbers, and a cache or file gives them
all the same value. So units of one cohort that hold different e_max for one (dtype, checker, K) show
that some measurement saw errors, not rounding. The ceiling (`checks.limits.e_max_ceiling`) refuses gross
inflation on one unit alone; this check catches what stays under it, wherever a unit has peers.

Which side is out of line: the value a strict majority of the cohort holds is the reference; without
one, the smallest value is (an inflated e_max hides faults, a deflated one makes its own unit fail its
checks, which is seen anyway). Every unit that holds another value is out of line: its gemm_fp checks
are not trusted, so it is judged `invalid` with the reason, and the cache files the disagreeing units
used are forgotten, so the next run measures again instead of repeating a value a faulty unit wrote.
Torch-free: it reads the case records' `detail`, as the journal keeps them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sdcscan.report.document import Calibration

WORKLOAD = "gemm_fp"


@dataclass(frozen=True, slots=True)
class Held:
    """The e_max one unit held for one (dtype, checker, K), and where it came from."""

    dtype: str
    checker: str
    k: int
    e_max: float
    source: str  # file, cache, shipped or fresh
    cache: str  # the cache file's name, "" when none was read or written

    def to_dict(self) -> Calibration:
        return {
            "dtype": self.dtype,
            "checker": self.checker,
            "k": self.k,
            "e_max": self.e_max,
            "source": self.source,
        }


Key = tuple[str, str, int]  # (dtype, checker, K)


def held_thresholds(outcomes: Iterable[Mapping[str, Any]]) -> dict[str, dict[Key, Held]]:
    """unit -> (dtype, checker, K) -> the e_max its gemm_fp cases were checked with.

    Only main-pass cases that reached a check carry one; a record without the fields (an older journal,
    a refused calibration) is left out.
    """
    out: dict[str, dict[Key, Held]] = defaultdict(dict)
    for o in outcomes:
        d = o.get("detail")
        if o.get("workload") != WORKLOAD or o.get("attempt", 0) or not isinstance(d, Mapping):
            continue
        e_max, k = d.get("e_max"), d.get("k")
        if not isinstance(e_max, int | float) or isinstance(e_max, bool) or not isinstance(k, int):
            continue
        held = Held(
            str(d.get("dtype")),
            str(d.get("checker")),
            k,
            float(e_max),
            str(d.get("threshold_source", "")),
            str(d.get("calibration_cache") or ""),
        )
        out[o["unit"]].setdefault((held.dtype, held.checker, held.k), held)
    return dict(out)


def out_of_line(cohort_of: Mapping[str, str], held: Mapping[str, Mapping[Key, Held]]) -> dict[str, str]:
    """unit -> why its gemm_fp checks are not trusted: an e_max its cohort peers do not hold."""
    groups: dict[tuple[str, Key], dict[str, Held]] = defaultdict(dict)
    for unit, per_key in held.items():
        for key, h in per_key.items():
            groups[(cohort_of.get(unit, ""), key)][unit] = h
    out: dict[str, str] = {}
    for (_, (dtype, checker, k)), members in sorted(groups.items()):
        values = {h.e_max for h in members.values()}
        if len(values) < 2:
            continue
        ref = reference(h.e_max for h in members.values())
        peers = sum(1 for h in members.values() if h.e_max == ref)
        for unit, h in sorted(members.items()):
            if h.e_max != ref and unit not in out:
                out[unit] = (
                    f"gemm_fp {dtype} ({checker} checker) K={k}: its e_max {h.e_max:.3g} ({h.source}) differs "
                    f"from the {ref:.3g} that {peers} peer(s) of its cohort hold; a deterministic "
                    f"calibration that differs saw errors, so its gemm_fp checks are not trusted"
                )
    return out


def reference(values: Iterable[float]) -> float:
    """The value a strict majority holds, else the smallest (inflation is what would hide faults)."""
    counts: dict[float, int] = defaultdict(int)
    for v in values:
        counts[v] += 1
    total = sum(counts.values())
    top = max(counts, key=lambda v: (counts[v], -v))
    return top if 2 * counts[top] > total else min(counts)


def caches_to_forget(cohort_of: Mapping[str, str], outcomes: Iterable[Mapping[str, Any]]) -> set[str]:
    """The cache files behind every disagreement: a faulty unit may have written any of them last."""
    held = held_thresholds(outcomes)
    keys = {key for unit in out_of_line(cohort_of, held) for key in held[unit]}
    return {h.cache for per_key in held.values() for key, h in per_key.items() if key in keys and h.cache}
