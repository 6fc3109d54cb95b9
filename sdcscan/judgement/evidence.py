"""The evidence the judge records, as data: what made a unit fail, why it could not be judged, what
re-runs showed and how it compares with a golden. `sdcscan.judgement.verdict` writes these records and
`sdcscan.judgement.wording` turns them into sentences. Pure, torch-free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sdcscan.judgement.retest import Retest
from sdcscan.outcomes import CaseResult, Verdict

# What made a unit fail (Blame.kind).
BLAME_INVARIANT = "invariant"  # its own checks fired
BLAME_DIVERGENT = "divergent"  # its digest was the minority of its cohort
BLAME_NOT_REPRODUCIBLE = "not_reproducible"  # in a tie, it did not repeat its own result on re-run
BLAME_UNDECIDED = "undecided"  # one of the suspects of a dispute that re-runs did not settle
BLAME_ATTRIBUTED = "attributed"  # an unsettled dispute, put on the one suspect other evidence shows bad
BLAME_GOLDEN = "golden"  # its digests differ from the recorded golden


@dataclass(frozen=True, slots=True)
class Blame:
    """One piece of evidence against a unit. A failing unit's reason is its first."""

    unit: str
    kind: str  # one of BLAME_*
    index: int  # the (first) case
    workload: str
    cases: int = 1  # invariant, golden: how many cases
    out_of: int = 0  # divergent: units that voted; golden: cases judged
    suspects: tuple[str, ...] = ()  # undecided: every unit of the dispute under suspicion


# Evidence code of a Problem whose unit the host's own work kept from running (background mode): nothing
# points at the unit, so what to do next differs. Words change; readers branch on the code.
PROBLEM_NOT_SCREENED = "not_screened"
# The runner stopped the unit while the host kept it off its CPU (its reason carries `starvation_note`).
PROBLEM_STARVED = "starved"
# A workload's invariant fails on every unit of the cohort and no re-run tied a failure to one unit: the
# check or its configuration is wrong (a calibration file too tight), not the hardware.
PROBLEM_FAILS_ON_EVERY_PEER = "fails_on_every_peer"


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a unit could not be judged: the runner's reason, a case that raised, or a case that fails everywhere."""

    unit: str
    reason: str | None = None  # the runner's words (crashed, hung, late) or the exception summary
    raised: CaseResult | None = None  # the first case that raised
    case_fault: Retest | None = None  # a failing case that failed on a peer too
    code: str | None = (
        None  # PROBLEM_NOT_SCREENED, PROBLEM_FAILS_ON_EVERY_PEER, or None: the reason says it all
    )
    workload: str | None = None  # the workload a PROBLEM_FAILS_ON_EVERY_PEER is about
    peers: int = 0  # ... and how many units of the cohort it failed on


@dataclass(frozen=True, slots=True)
class Undecided:
    """A dispute that re-runs did not settle: all of `suspects` are suspected."""

    index: int
    workload: str
    suspects: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RetestSummary:
    """How a unit's failing cases behaved on re-run (persistent, transient or untested)."""

    unit: str
    summary: str
    records: tuple[Retest, ...]


@dataclass(frozen=True, slots=True)
class Disagreement:
    """One case where a unit's digest is not the golden one."""

    index: int
    workload: str
    expected: str
    actual: str


@dataclass(frozen=True, slots=True)
class GoldenCheck:
    """How one unit compares with the golden of its plan and cohort (`sdcscan.fleet.golden`)."""

    unit: str
    cohort: str
    judged: bool  # False: the golden has no entry for this plan and cohort
    cases_judged: int
    disagreements: tuple[Disagreement, ...]

    @property
    def verdict(self) -> str:
        """`pass`, `fail`, or `unjudged` when the golden cannot say."""
        if not self.judged or self.cases_judged == 0:
            return "unjudged"
        return Verdict.FAIL if self.disagreements else Verdict.PASS


GoldenEntry = Mapping[
    int, tuple[str, str]
]  # case index -> (golden digest, workload), for one plan and cohort


def check_golden(
    unit: str, cohort: str, entry: GoldenEntry | None, cases: Iterable[tuple[int, str | None, str]]
) -> GoldenCheck:
    """Compare a unit's (index, digest, workload) cases with the golden entry of its plan and cohort.

    A case without a digest (it did not end `ok`) or without a golden digest is not judged.
    """
    if entry is None:
        return GoldenCheck(unit, cohort, False, 0, ())
    judged, bad = 0, []
    for index, digest, workload in cases:
        golden = entry.get(index) if digest is not None else None
        if golden is None or digest is None:
            continue
        judged += 1
        if golden[0] != digest:
            bad.append(Disagreement(index, workload, golden[0], digest))
    return GoldenCheck(unit, cohort, True, judged, tuple(bad))


@dataclass(frozen=True, slots=True)
class GoldenGap:
    """Units the golden cannot judge: it holds no case they ran for their plan and cohort."""

    cohort: str
    units: tuple[str, ...]


# Everything a finding is made of, in the order the judge found it.
Notice = Blame | Problem | Undecided | Retest | RetestSummary | GoldenGap | None
