"""What `compare` returns: its options, the summary, and the records its JSON holds.

`FleetSummary` is what every engine's rows become (`fleet.decide`): the same reports give the same
summary, whatever the input form, order or engine, so `compare --json` is byte-identical run to run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from typing_extensions import TypedDict

from sdcscan.fleet.consensus import MIN_HOSTS, MIN_LEAD, SUPERMAJORITY_DEN, SUPERMAJORITY_NUM
from sdcscan.fleet.defaults import DEFAULT_SLOW_DROP, DEFAULT_SLOW_Z, DEFAULT_STALE_S
from sdcscan.fleet.findings import FleetFinding
from sdcscan.fleet.model import Skipped

if TYPE_CHECKING:
    from sdcscan.fleet.checked_ops import CheckedCohort
    from sdcscan.fleet.golden import GoldenIndex
    from sdcscan.fleet.overview import FleetOverview

COMPARE_VERSION = 2  # 2: one vote per host, `undecided` per host, `superseded`, `collision`, basis
FAILING_KINDS = frozenset({"divergent", "invariant", "slow"})  # these make `compare` exit 1
UNDECIDED_EXIT = 3  # with fail_on_undecided: a judgement could not be made (never 1: nobody miscomputed)
OWN_RUN_CONSENSUS = frozenset(
    {"divergent", "not_reproducible"}
)  # own-run blame `compare` reports as divergent


class Where(TypedDict):
    """The comparison group (plan and cohort) a divergent unit or a partition group belongs to."""

    profile_sha256: str
    seed: int
    cohort: str


class PartitionMember(TypedDict):
    host: str
    unit: str
    run: str


class PartitionGroup(Where):
    """Units (two or more) wrong in the same way: they share a wrong digest of a case."""

    id: str
    units: int
    hosts: int
    shared_cases: int
    first_shared_case: int | None
    members: list[PartitionMember]


class ReplacingReport(TypedDict):
    """The newer report that replaces a superseded one."""

    path: str
    run: str
    ended_at: str
    verdict: str


class SupersededReport(TypedDict):
    """An older report of a host and plan: it neither votes nor adds a finding."""

    host: str
    path: str
    run: str
    ended_at: str
    verdict: str
    profile_sha256: str
    seed: int
    superseded_by: ReplacingReport


@dataclass(frozen=True)
class Options:
    """What `summarize` needs besides the reports.

    Attributes:
        slow_z: robust z-score (against the healthy peers' median and MAD) a unit must be below to be
            slow, for cohorts of up to 40 units; larger cohorts raise it (Bonferroni, `fleet.perf`).
        slow_drop: fraction below the healthy peers' median a unit must also be (both must hold).
        slow_min_units: fewest samples of a (profile, cohort, workload) needed to judge speed.
        hosts: the hosts that should have reported (enables `missing` and `stale`), or None.
        stale_s: a host whose newest report is older than this is `stale`.
        now: POSIX seconds to measure staleness against; required with `hosts`.
        golden: an index of a golden file (`golden.index_golden`) to judge units against, or None.
        fail_on_undecided: exit UNDECIDED_EXIT (3) when a host is undecided and nothing fails
            (`compare --fail-on undecided`).
        overview: also compute `FleetSummary.overview`, what `compare --html` draws (not in the JSON).
    """

    slow_z: float = DEFAULT_SLOW_Z
    slow_drop: float = DEFAULT_SLOW_DROP
    slow_min_units: int = 5
    hosts: tuple[str, ...] | None = None
    stale_s: float = DEFAULT_STALE_S
    now: float | None = None
    golden: GoldenIndex | None = field(default=None, repr=False)
    fail_on_undecided: bool = False
    overview: bool = False


@dataclass(frozen=True)
class FleetSummary:
    """The result of comparing a fleet's reports."""

    findings: tuple[FleetFinding, ...]
    groups: tuple[PartitionGroup, ...]  # units (>= 2) that are wrong in the same way
    skipped: tuple[Skipped, ...]
    counts: dict[str, int]
    options: dict[str, object]  # echoed in the JSON only
    superseded: tuple[SupersededReport, ...] = ()  # older reports of a host and plan: no vote, no finding
    fail_on_undecided: bool = False
    # Bounded pictures of the fleet for `compare --html` (`fleet.overview`), when Options.overview asked
    # for them; never in the JSON document, which stays the contract.
    overview: FleetOverview | None = field(default=None, compare=False, repr=False)
    # What passing units' checks covered per (profile, cohort, workload), and the rate bound that proves.
    checked: tuple[CheckedCohort, ...] = ()

    @property
    def exit_code(self) -> int:
        """`exit_code_with(self.fail_on_undecided)`."""
        return self.exit_code_with(self.fail_on_undecided)

    def exit_code_with(self, fail_on_undecided: bool) -> int:
        """The exit code of `compare`.

        1 when any unit is divergent, invariant or slow (judged to miscompute or to be slow); else, with
        `fail_on_undecided` (`--fail-on undecided`), 3 when any host is `undecided`: the fleet could not
        judge a case it ran, which is "could not judge", never "miscomputes"; else 0.
        """
        kinds = {f.kind for f in self.findings}
        if kinds & FAILING_KINDS:
            return 1
        if fail_on_undecided and "undecided" in kinds:
            return UNDECIDED_EXIT
        return 0

    def to_dict(self) -> dict[str, object]:
        """The `compare --json` document."""
        return {
            "compare_version": COMPARE_VERSION,
            "exit_code": self.exit_code,
            "counts": self.counts,
            "options": self.options,
            "findings": [f.to_dict() for f in self.findings],
            "groups": list(self.groups),
            "superseded": list(self.superseded),
            "checked": list(self.checked),
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
        }


def options_record(opts: Options) -> dict[str, object]:
    """The options that shaped the result, echoed in the JSON (never the clock: output stays stable)."""
    return {
        "slow_z": opts.slow_z,
        "slow_drop": opts.slow_drop,
        "slow_min_units": opts.slow_min_units,
        "hosts_listed": None if opts.hosts is None else len(set(opts.hosts)),
        "stale_days": round(opts.stale_s / 86400, 3),
        "golden": opts.golden is not None,
        "fail_on_undecided": opts.fail_on_undecided,
        "consensus": {
            "min_hosts": MIN_HOSTS,
            "winner_more_than": f"{SUPERMAJORITY_NUM}/{SUPERMAJORITY_DEN}",
            "min_lead_hosts": MIN_LEAD,
        },
    }
