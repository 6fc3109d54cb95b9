"""The fleet overview: a small, bounded digest of a comparison for pictures (`compare --html`).

The `compare` JSON document lists findings; a page that shows a cohort's throughput distribution, the
age of each host's newest screening or where failing units cluster needs numbers the findings do not
carry (every healthy unit's rate, every host's age). Handing those over per host would grow with the
fleet, so they arrive here already reduced: histograms with a fixed number of bins, bar lists capped
at a fixed length. A 10,000-host and a 1,000,000-host fleet give overviews of about the same size.

It is not part of the JSON contract (`FleetSummary.to_dict` never holds it): it is computed only when a
page is asked for (`Options.overview`), from the same engine rows and with the same rules
(`fleet.overview_rows`). Pure data: no I/O, no engine, no rules of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_DISTRIBUTIONS = 24  # (profile, cohort, workload) histograms drawn; the rest are counted
HISTOGRAM_BINS = 80
MAX_MARKS = 200  # slow units marked on one histogram; the rest are counted
MAX_AGE_BINS = 90
MAX_BARS = 24  # bars of one cluster chart (models, hostname prefixes); the rest are summed as "other"
MAX_DAYS = 60  # days of the day chart, the newest
MAX_MODEL_CHARS = 80  # a model name as shown (it comes from a report file)


@dataclass(frozen=True, slots=True)
class SlowMark:
    """One slow unit on a throughput histogram: where it stands."""

    host: str
    unit: str
    value: float


@dataclass(frozen=True, slots=True)
class Distribution:
    """The newest throughput of every unit of one (profile, cohort, workload), binned.

    `counts[i]` units lie in [lo + i * width, lo + (i + 1) * width); values beyond the range are counted
    in the first or last bin and in `clipped`. `median` and `slow_below` are the healthy reference of
    `fleet.perf` (None when the group is too small to be judged): a unit is slow below `slow_below`.
    """

    profile: str  # the profile's name (its sha256 when no report names it)
    profile_sha256: str
    cohort: str
    workload: str
    value_unit: str
    units: int
    lo: float
    width: float
    counts: tuple[int, ...]
    clipped: int
    median: float | None
    slow_below: float | None
    slow: tuple[SlowMark, ...]
    slow_not_marked: int


@dataclass(frozen=True, slots=True)
class AgeHistogram:
    """Hosts by the age (days before `now`) of their newest report that tested something.

    `counts[i]` hosts lie in [i * width_days, (i + 1) * width_days); older ones are `older`. Hosts
    whose reports tested nothing are `untested`; those whose newest report ends in the future (a clock
    ahead) are `ahead`. `stale_days` is compare's --stale.
    """

    width_days: float
    counts: tuple[int, ...]
    older: int
    untested: int
    ahead: int
    hosts: int
    stale_days: float


@dataclass(frozen=True, slots=True)
class ClusterBar:
    """Failing units (by finding kind) of one group of hosts, and how many the group would hold if they
    were spread evenly over the fleet (by its share of `basis`: units or hosts)."""

    label: str
    units_by_kind: tuple[tuple[str, int], ...]  # (kind, units), kinds of FAILING_KINDS with units
    basis: int  # units (model) or hosts (prefix, day) of the group in the fleet
    expected: float

    @property
    def units(self) -> int:
        return sum(n for _, n in self.units_by_kind)


@dataclass(frozen=True, slots=True)
class Clusters:
    """Failing units grouped one way (model, hostname prefix or day), the largest groups first (days:
    in order); `other` sums the groups left out."""

    by: str
    basis: str  # "units" or "hosts": what `ClusterBar.basis` counts
    bars: tuple[ClusterBar, ...]
    other: int


@dataclass(frozen=True, slots=True)
class FleetOverview:
    """What the fleet page draws beside the findings; bounded whatever the fleet's size."""

    distributions: tuple[Distribution, ...]
    distributions_left_out: int
    ages: AgeHistogram | None  # None without a reference time (compare always has one)
    clusters: tuple[Clusters, ...]
    failing_units: int


def hostname_prefix(hostname: str) -> str:
    """A host's name without its domain and its trailing number: the rack, row or pool it belongs to.

    `rack12-node034.dc1.example.com` -> `rack12-node`, `gpu-b07` -> `gpu-b`, `host00021` -> `host`; a
    name that is all digits keeps them (`1234`), and an IP address stays whole.
    """
    if _is_address(hostname):  # an IP address names one host, not a pool
        return hostname
    label = hostname.split(".", 1)[0]
    return label.rstrip("0123456789") or label


def _is_address(name: str) -> bool:
    return name.replace(".", "").isdigit() or ":" in name
