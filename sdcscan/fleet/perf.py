"""Slow units: measured speed far below what the healthy units of their cohort reach. Needs no digests.

Thresholds come from the fleet itself, not from per-model constants: DCGM's fixed thresholds missed a
GPU running three times slower (DCGM #122). Pure: no I/O, no clock.

The rule, for each group of units that must perform alike: (profile sha256, cohort, workload,
measure); its n units are the "peers". The measures are throughput (ops/s) and, where reports carry
it, efficiency (achieved over the unit's own plain-op peak); see `MEASURES`.

1. A healthy reference a slow batch cannot absorb. The median and MAD of all peers move toward a
   throttled batch as it grows (with 20% of a cohort 25% slow, half the slow units were missed; with
   30%, nearly all). Slowness only moves values down, so while fewer than 75% of the peers are slow,
   the upper quantiles q75 and q90 are values of healthy units. Reading healthy noise as normal,
   they give a first spread s0 = (q90 - q75) / 0.6071 and centre c0 = q90 - 1.2816 s0 (0.6071 and
   1.2816 are the standard normal's q90 - q75 and q90). A slow batch only makes c0 lower and s0
   larger, so the error is on the safe side. The "healthy peers" are the units at or above
   c0 - max(3 s0, drop * c0). A 25% slowdown in a fleet with 3% spread is 8 spreads below, so the
   batch falls outside. A batch of a third or half of the cohort moves q75 and q90 up the healthy
   units' own distribution, and the band would take most of it in: when more than 1% of the peers lie
   below the band, the fit is redone for the share that lies there (`_band_edge`). The healthy median
   m and the healthy MAD are then taken over the healthy peers only. The band is never narrower than
   `drop`, so in a small cohort where the upper quantiles happen to sit close together, m is not
   pushed up.
2. A threshold that grows with the cohort. z = 0.6745 (x - m) / MAD (the robust z-score, about
   N(0, 1) for healthy units). Among n healthy peers, about n * Phi(-t) fall below -t. A fixed t
   therefore gives false findings in proportion to fleet size (3.5: 14, 72 and 181 at 10k, 50k and
   100k hosts). The threshold is `z` (--slow-z) up to REFERENCE_PEERS = 40 peers. Beyond that,
   Bonferroni keeps the expected number of healthy peers flagged at what it is with 40 peers,
   alpha = 40 Phi(-z) (0.0093 at z = 3.5): t_n = Phi^-1(1 - alpha / n). This grows like
   sqrt(2 ln(n / alpha)): 4.3 at 1,000 peers, 5.2 at 80,000 (10k hosts of 8 units), 5.6 at 800,000.
   It is applied to each workload on its own, and does not rely on noise being independent across
   workloads: a unit's clock or cooling moves all of its workloads together.
3. A relevant loss. The unit must also be at least `drop` below m: in a very uniform fleet the
   z-score alone would flag tiny, harmless differences.
4. Slow on most of its workloads. A unit is slow when a strict majority of the workloads judged for
   it are slow, which means all of them when it ran 1 or 2. Where each workload's noise is its own
   (measurement noise), a healthy unit would need two or more tail events at once. A throttled,
   under-clocked or degraded unit is slow on everything. The false findings of the old rule were
   all slow on one workload only.
5. Host roll-up. When at least 2 units of a host are slow and they are a strict majority of its
   judged units, the host gets one finding (unit None). Its evidence carries each unit's details, so
   the output shows one row ("all 8 units are 25% slow"), not 8 unrelated ones.
6. One sample per host and profile for the reference: its newest report. A re-run does not add
   peers, and a host that was fixed stops being slow.
7. Combined evidence (`fleet.slow`): a unit whose every workload is slow in each of its host's recent
   reports is judged on one score over all of them, standardized by the cohort's own spread of that
   score (`score_reference`), against the same t_n; its loss, on average over those reports too, must
   be at least `drop` (one run slowed by other work does not make a throttle).
8. The cohort's own tails (`tail_cut`). t_n assumes normal tails. Runs now and then slowed by other
   work have a long tail on the slow side, and with them a healthy fleet of 10,000 hosts had 153
   units named slow (scripts/bench_slow.py --noise skewed). So each cohort's healthy tail is read from
   its units whose other workloads lie above their medians (a slow unit is slow on every workload, so
   these are healthy units, whatever share of the cohort is slow), and a threshold moves deeper than
   t_n where that tail puts more healthy units past it than the normal model's budget: per workload
   for steps 2-4 (a majority of workloads that far down), and for a unit with one report, on its
   combined score (every workload that far down). It never moves a threshold up. It assumes that the
   noise slowing a healthy unit's workloads is independent from one workload to the next; where a
   unit's clock moves them all, the tail read this way is shorter than the true one, and t_n's own
   standardization (step 7) is what holds.

The price of step 2: a loss is only found when it is t_n spreads deep. A 25% loss is 8 spreads deep
in a fleet with 3% spread, and every such unit is found (scripts/bench_slow.py). With 5% spread it is
5 spreads deep, below t_n for 80,000 peers, and one report cannot find it; step 7 can when the spread
is run-to-run noise and the host has several reports (README: the measured recall table). A lower
--slow-z trades false findings for recall at every size.

Evidence of a unit: the worst slow workload's `workload`, `measure`, `value`, `value_unit`,
`healthy_median`, `drop`, `z` (None when the healthy MAD is 0), `z_threshold`, `peers` and
`healthy_peers`. Also `slow_workloads`, `judged_workloads`, and `workloads`, which holds one such
record (plus `slow`) for every judged workload. Evidence of a host: `units_slow`, `units_judged`,
`drop` (the median over its slow units' slow workloads), `drop_min`, `drop_max`, `cohorts`, and
`units`, which holds the evidence of each slow unit.

"All units of host X agree with each other but not with the fleet" is a statement about digests.
The host-level consensus (`compare`) makes it, not this module.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sdcscan.fleet.findings import Collector
from sdcscan.fleet.model import HostReport

MAD_TO_SIGMA = 0.6745  # robust z = 0.6745 (x - median) / MAD (Iglewicz and Hoaglin)
REFERENCE_PEERS = 40  # up to this many peers the threshold is --slow-z; beyond, it rises (Bonferroni)
UPPER_Q, LOWER_Q = 0.90, 0.75  # quantiles left to healthy units while fewer than 75% are slow
_NORMAL = NormalDist()
HEALTHY_BAND = 3.0  # healthy peers lie within this many first-estimate spreads of the centre
# Below this share of units under the first band, the first estimate stands (healthy tails put 0.13% of
# a normal cohort there); above, the estimate is redone for a slow batch of that size (`_band_edge`).
BATCH_SHARE = 0.01
MAX_SLOW_SHARE = 0.6  # the refit holds while fewer units than this are slow: q75 and q90 stay healthy
REFERENCE_MIN_UNITS = 20  # fewest units whose combined scores can show their own spread
# A cohort's own tail is read only where it rests on this many healthy units per workload: shallower
# than that, a cut would stand on one or two units (`tail_cut`).
MIN_TAIL_COUNT = 5
CALM = 0.0  # robust z above which a unit's other workloads show it healthy (`tail_cut`'s samples)

Reading = tuple[str, float, str]  # (workload, value, value unit), higher is better
# Measures (the `measure` column of the samples), each a list of readings per workload. A workload is
# slow when any measure is. Throughput sees a unit that is slow at everything (clocks, power, cooling).
# Efficiency (achieved over the unit's own plain-op peak, measured at its start) sees a workload running
# far below the same unit's plain op; a unit throttled as a whole keeps its efficiency, and throughput
# sees it.
MEASURES = ("ops_per_s", "efficiency")
UnitReadings = dict[str, list[Reading]]  # measure -> readings

GroupKey = tuple[str, str, str, str]  # (profile sha256, cohort, workload, measure)


class Judged(NamedTuple):
    """One unit's samples in its host's newest report of a profile."""

    unit: str
    cohort: str
    readings: UnitReadings


def robust_z(x: float, med: float, mad: float) -> float:
    """Robust z-score of `x`; -inf/+inf when the MAD is 0 and `x` is off the median."""
    if mad > 0:
        return MAD_TO_SIGMA * (x - med) / mad
    if x == med:
        return 0.0
    return -math.inf if x < med else math.inf


def slow_threshold(z: float, peers: int) -> float:
    """The z-score a unit must be below among `peers` units.

    That is `z` for up to REFERENCE_PEERS peers. For more, it is raised so that the expected number of
    healthy peers flagged stays what it is at REFERENCE_PEERS (Bonferroni, normal tails).
    """
    tail = REFERENCE_PEERS * _NORMAL.cdf(-z) / max(peers, 1)
    if peers <= REFERENCE_PEERS or tail <= 0.0:  # 0: z is so large (> 37) that it flags nothing anyway
        return z
    return -_NORMAL.inv_cdf(tail)


@dataclass(frozen=True, slots=True)
class Reference:
    """What the healthy peers of one group reach, and where slow begins."""

    peers: int
    healthy_peers: int
    median: float  # of the healthy peers
    mad: float  # of the healthy peers; 0 when they agree exactly
    z_threshold: float
    drop: float

    def is_slow(self, x: float) -> bool:
        """Both far below (z) and relevantly below (drop) the healthy median."""
        return x <= self.median * (1.0 - self.drop) and self.z(x) <= -self.z_threshold

    @property
    def slow_below(self) -> float:
        """The value at and below which `is_slow` holds, both conditions together (a page draws it)."""
        by_z = self.median - self.z_threshold * self.mad / MAD_TO_SIGMA if self.mad > 0 else self.median
        return min(self.median * (1.0 - self.drop), by_z)

    def z(self, x: float) -> float:
        """Robust z-score of `x` against the healthy peers."""
        return robust_z(x, self.median, self.mad)

    def evidence(self, x: float) -> dict[str, Any]:
        """Where `x` stands: healthy median, drop, z, threshold, peers."""
        z = self.z(x)
        return {
            "healthy_median": self.median,
            "drop": round(1.0 - x / self.median, 4),
            "z": round(z, 2) if math.isfinite(z) else None,
            "z_threshold": round(self.z_threshold, 2),
            "peers": self.peers,
            "healthy_peers": self.healthy_peers,
        }


def healthy_reference(
    values: Sequence[float] | npt.NDArray[np.float64], *, z: float, drop: float
) -> Reference | None:
    """The reference of one group (module docstring, steps 1 to 3); None when it has no positive median.

    Args:
        values: the group's finite values, any order. An array stays an array: a million hosts' units
            are 8 million readings, and as Python floats, copied for each step, they held 0.5 GB.
        z: the z-score floor (`--slow-z`).
        drop: fraction below the healthy median a slow unit must also be.
    """
    v = np.sort(np.asarray(values, dtype=np.float64))
    if not v.size:
        return None
    healthy = v[int(np.searchsorted(v, _band_edge(v, drop), side="left")) :]
    med = _sorted_median(healthy)
    if not med > 0:  # zero or negative speeds: nothing to measure a loss against
        return None
    mad = _sorted_median(np.sort(np.abs(healthy - med)))
    return Reference(len(v), len(healthy), med, mad, slow_threshold(z, len(v)), drop)


@dataclass(frozen=True, slots=True)
class ScoreReference:
    """Where the healthy units of a cohort stand on the combined score (`fleet.slow`), and where slow
    begins: `cut`, t_n robust spreads below their median."""

    units: int
    median: float
    mad: float
    z_threshold: float

    @property
    def cut(self) -> float:
        return self.median - self.z_threshold * self.mad / MAD_TO_SIGMA

    def z(self, score: float) -> float:
        return robust_z(score, self.median, self.mad)


def score_reference(scores: Sequence[float] | npt.NDArray[np.float64], *, z: float) -> ScoreReference | None:
    """The healthy reference of a cohort's combined scores, or None when it cannot be told (too few
    units, or healthy scores that do not vary).

    The scores are robust z-scores combined over a unit's workloads and recent reports. How far their
    spread shrinks below 1 depends on how independent the averaged samples are, which the cohort shows
    and no assumption does: their own spread is measured, from the healthy units only (the upper
    quantiles, as in `healthy_reference`, so a slow batch cannot absorb it), and the threshold is the
    same t_n in those units. Where a unit's samples move together (its clock), nothing is gained and
    nothing is lost; where they are independent, a loss is found at 1/sqrt(samples) of the depth.
    """
    v = np.sort(np.asarray(scores, dtype=np.float64))  # a million hosts: 8 million scores, kept compact
    if len(v) < REFERENCE_MIN_UNITS:
        return None
    healthy = v[np.searchsorted(v, _band_edge(v, 0.0), side="left") :]
    med = float(np.median(healthy))
    mad = float(np.median(np.abs(healthy - med)))
    if not mad > 0:
        return None
    return ScoreReference(len(v), med, mad, slow_threshold(z, len(v)))


def tail_budget(z: float) -> float:
    """Healthy units any cohort's threshold may flag by the normal model: REFERENCE_PEERS·Phi(-z)
    (`slow_threshold` keeps the expected number at this for every cohort size)."""
    return REFERENCE_PEERS * _NORMAL.cdf(-z)


def tail_cut(
    samples: Sequence[npt.NDArray[np.float64]], units: int, needed: int, budget: float
) -> float | None:
    """The robust z at and below which `needed` of a unit's workloads must lie for the cohort's own tails
    to put at most `budget` of its `units` healthy units there (module docstring, step 8). Where that
    depth rests on fewer than MIN_TAIL_COUNT units of some workload, the deepest point that rests on
    that many: as deep as the cohort can show its tail (a normal cohort's lies above t_n, and t_n
    stands). None when no point does.

    Args:
        samples: per workload, the robust z of the newest readings of the units whose other workloads
            all lie above CALM. A slow unit is slow on every workload, so these are healthy units: their
            spread below the median is the healthy tail, which a slow batch, however large, does not
            reach. Where a unit's workloads are slowed independently (other work, measurement noise),
            P(k workloads at or below c) <= C(W, k) · the product of the k largest tails at c.
        units: the cohort's units.  needed: workloads that must be at or below the cut.
        budget: `tail_budget`.
    """
    tails = [np.sort(np.asarray(x, dtype=np.float64)) for x in samples if len(x)]
    if len(tails) < needed or needed < 1:
        return None
    scale = units * math.comb(len(tails), needed)

    def at(c: float) -> tuple[float, int]:
        """Healthy units the cohort's tails put at c, and the samples that estimate rests on (the
        `needed`-th largest count). Both are order statistics of counts that grow with c, so both grow
        with c, as the searches below need."""
        counts = [int(np.searchsorted(t, c, side="right")) for t in tails]
        shares = sorted(k / len(t) for k, t in zip(counts, tails, strict=True))[-needed:]
        return scale * math.prod(shares), sorted(counts)[-needed]

    candidates = np.unique(np.concatenate(tails))  # both only change at a sample; both grow with c
    where = range(len(candidates))
    # the deepest point resting on enough units, and the first past the budget (bisect: both monotone)
    shown = bisect.bisect_left(where, True, key=lambda i: at(float(candidates[i]))[1] >= MIN_TAIL_COUNT)
    if shown == len(candidates):
        return None
    within = bisect.bisect_left(where, True, key=lambda i: at(float(candidates[i]))[0] > budget) - 1
    return float(candidates[max(within, shown)])


def _band_edge(v: npt.NDArray[np.float64], drop: float) -> float:
    """Where the healthy peers of sorted `v` begin: HEALTHY_BAND spreads, and at least `drop` of the
    centre, below the centre of the healthy units (module docstring, step 1).

    The first estimate reads q75 and q90 as a normal cohort's. A slow batch below leaves them healthy
    values but moves them up the healthy units' own distribution: with half the cohort slow they are its
    median and q80, so the first spread is 39% too wide and the centre 0.9 spreads too low, and a batch
    15% slow at 3.5% spread falls inside the band, where it pulls the median down and widens the MAD.
    When more than BATCH_SHARE of the units lie below the first band, the fit is redone for a share f
    below the healthy units (q75 and q90 then stand at levels (p - f) / (1 - f) of them), f taken as the
    least fixed point of f -> (share below the band that fit gives), approached from 0. Healthy tails put
    about 0.13% of a normal cohort below the band, so a cohort without a slow batch keeps the first fit.
    Where a batch's own spread reaches into the band, the share stops short of it: with half the cohort
    15% slow at 3.5% spread it stops near a quarter, and the spread is still twice the healthy one (2.9
    times before the refit), so three reports' combined score finds that batch and one report does not.
    """
    hi, lo = _quantile(v, UPPER_Q), _quantile(v, LOWER_Q)

    def edge(share: float) -> float:
        z_hi = _NORMAL.inv_cdf((UPPER_Q - share) / (1.0 - share))
        z_lo = _NORMAL.inv_cdf((LOWER_Q - share) / (1.0 - share))
        spread = (hi - lo) / (z_hi - z_lo)
        centre = hi - z_hi * spread
        return centre - max(HEALTHY_BAND * spread, drop * centre)

    def below(at: float) -> float:
        return float(np.searchsorted(v, at, side="left")) / len(v)

    share = below(edge(0.0))
    if share <= BATCH_SHARE:
        return edge(0.0)
    for _ in range(100):  # increasing map from 0: it climbs to its least fixed point
        nearer = min(below(edge(share)), MAX_SLOW_SHARE)
        if nearer - share < 1e-4:
            break
        share = nearer
    return edge(share)


def _quantile(v: npt.NDArray[np.float64], p: float) -> float:
    """The p-quantile of sorted `v`, interpolating linearly between order statistics."""
    h = (len(v) - 1) * p
    i = math.floor(h)
    if i + 1 >= len(v):
        return float(v[-1])
    return float(v[i] + (h - i) * (v[i + 1] - v[i]))


def _sorted_median(v: Sequence[float] | npt.NDArray[np.float64]) -> float:
    n = len(v)
    return float(v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2)


def unit_evidence(
    profile: str, u: Judged, refs: dict[GroupKey, Reference], combined: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The evidence of a slow unit, else None: slow on a strict majority of its judged workloads, or by
    the combined score (`fleet.slow`), whose evidence `combined` is then."""
    entries = []
    for measure, readings in sorted(u.readings.items()):
        for workload, x, value_unit in readings:
            ref = refs.get((profile, u.cohort, workload, measure))
            if ref is not None and math.isfinite(x):
                head = {"workload": workload, "measure": measure, "value": x, "value_unit": value_unit}
                entries.append({**head, **ref.evidence(x), "slow": ref.is_slow(x)})
    judged = {e["workload"] for e in entries}
    slow = {e["workload"] for e in entries if e["slow"]}
    by_workloads = len(slow) * 2 > len(judged)
    if not entries or not (by_workloads or combined):
        return None
    entries.sort(key=lambda e: (e["workload"], e["measure"]))
    # The headline: the worst slow workload, or (found by the combined score alone) the largest loss.
    worst = max(
        (e for e in entries if e["slow"] or not by_workloads),
        key=lambda e: (e["drop"], e["workload"], e["measure"]),
    )
    headline = {k: v for k, v in worst.items() if k != "slow"}
    ev: dict[str, Any] = {
        "profile_sha256": profile,
        "cohort": u.cohort,
        **headline,
        "slow_workloads": sorted(slow),
        "judged_workloads": len(judged),
        "workloads": entries,
    }
    if combined is not None:
        ev["combined"] = combined
    return ev


def _drops(ev: dict[str, Any]) -> list[float]:
    """A slow unit's losses: those of its slow workloads, or its combined loss."""
    return [e["drop"] for e in ev["workloads"] if e["slow"]] or [ev["combined"]["loss"]]


def add_host_or_units(
    r: HostReport,
    units: Sequence[Judged],
    slow: list[tuple[Judged, dict[str, Any]]],
    refs: dict[GroupKey, Reference],
    col: Collector,
) -> None:
    """One host-level finding when most of the host's judged units are slow; else one per slow unit.

    Args:
        r: the report.  units: all its units' samples.  slow: its slow units and their evidence.
    """
    judged_units = sum(1 for u in units if _is_judged(r.plan[0], u, refs))
    if len(slow) >= 2 and len(slow) * 2 > judged_units:
        drops = sorted(d for _, ev in slow for d in _drops(ev))
        drop = round(_sorted_median(drops), 4)
        ev = {
            "profile_sha256": r.plan[0],
            "cohorts": sorted({u.cohort for u, _ in slow}),
            "units_slow": len(slow),
            "units_judged": judged_units,
            "drop": drop,
            "drop_min": drops[0],
            "drop_max": drops[-1],
            "units": [{"unit": u.unit, **unit_ev} for u, unit_ev in sorted(slow, key=lambda s: s[0].unit)],
        }
        col.add(r, None, "slow", ev, tiebreak=drop)
        return
    for u, unit_ev in slow:
        col.add(r, u.unit, "slow", unit_ev, tiebreak=unit_ev["drop"])


def _is_judged(profile: str, u: Judged, refs: dict[GroupKey, Reference]) -> bool:
    """Whether any of the unit's readings could be compared with enough peers."""
    return any(
        (profile, u.cohort, workload, measure) in refs
        for measure, readings in u.readings.items()
        for workload, x, _ in readings
        if math.isfinite(x)
    )
