"""Evidence -> unit and run verdicts. Pure: no I/O, no clock, no torch, and no English: the judge
records structured evidence (`sdcscan.judgement.evidence`), and `sdcscan.judgement.wording` turns them into sentences.

Evidence (DESIGN.md): an invariant firing on a unit fails it. Digests of the same case are compared
inside a cohort: with a strict majority the minority is divergent; without one (two units, or a
tie) nobody is accused on consensus alone — the disputed case is re-run on every unit involved and a
unit whose result does not reproduce is blamed; if every result reproduces and they still disagree,
the dispute is undecided and all the units involved are suspects.

Repeat evidence: every failing (unit, case) is re-run on the unit and once on a peer of its cohort,
and classified `transient` (does not fail again on the unit), `persistent` (fails again on the unit,
not on the peer) or `case` (fails on the peer too: a software or determinism problem, so the unit is
not blamed for it). The classification table is `sdcscan.judgement.retest.classify`; `retest_plan` says what to re-run.

Golden evidence (`sdcscan run --golden`): a unit whose digest differs from the recorded golden of its
plan and cohort fails; it never hides a worse verdict (a unit that could not be judged stays invalid).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from sdcscan.judgement.evidence import (
    BLAME_ATTRIBUTED,
    BLAME_DIVERGENT,
    BLAME_GOLDEN,
    BLAME_INVARIANT,
    BLAME_NOT_REPRODUCIBLE,
    BLAME_UNDECIDED,
    PROBLEM_FAILS_ON_EVERY_PEER,
    Blame,
    GoldenCheck,
    GoldenGap,
    Notice,
    Problem,
    RetestSummary,
    Undecided,
)
from sdcscan.judgement.retest import (
    CASE,
    PERSISTENT,
    TRANSIENT,
    UNTESTED,
    Retest,
    classify,
    unit_classification,
)
from sdcscan.outcomes import (
    CONSENSUS,
    INVARIANT,
    STATUS_ERROR,
    STATUS_MISMATCH,
    STATUS_OK,
    CaseResult,
    Verdict,
    unit_order,
)
from sdcscan.report.document import RetestEvidence
from sdcscan.workloads import SPECS

T = TypeVar("T")

# (unit, case index) -> the digest of each re-run on that unit, None where the re-run did not end `ok`.
Reruns = Mapping[tuple[str, int], Sequence[str | None]]


@dataclass(frozen=True)
class Dispute:
    """A case whose digests disagree inside a cohort."""

    index: int
    workload: str
    cohort: str
    digests: Mapping[str, str]  # unit -> digest
    majority: str | None  # the strict-majority digest, or None when there is none

    @property
    def minority(self) -> list[str]:
        return sorted(u for u, d in self.digests.items() if self.majority is not None and d != self.majority)

    @property
    def needs_retest(self) -> bool:
        return self.majority is None


@dataclass
class Judgement:
    unit_verdicts: dict[str, Verdict]
    verdict: Verdict
    blame: dict[str, list[Blame]] = field(default_factory=dict)  # unit -> evidence against it
    problems: dict[str, Problem] = field(default_factory=dict)  # unit -> why it could not be judged
    disputes: list[Dispute] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)  # None: no unit was selected
    retests: dict[str, list[Retest]] = field(default_factory=dict)  # unit -> its classified failing cases
    golden: dict[str, GoldenCheck] = field(default_factory=dict)  # unit -> its golden comparison

    def reason(self, unit: str) -> Blame | Problem | None:
        """What the unit's verdict rests on: its first blame when it failed, its problem when invalid."""
        verdict = self.unit_verdicts.get(unit)
        if verdict == Verdict.FAIL:
            return self.blame[unit][0]
        if verdict == Verdict.INVALID:
            return self.problems.get(unit)
        return None


def strict_majority(counts: Mapping[T, int]) -> T | None:
    """The value holding more than half of all votes, or None. The one majority rule of sdcscan."""
    if not counts:
        return None
    top, count = max(counts.items(), key=lambda kv: kv[1])
    return top if count * 2 > sum(counts.values()) else None


def find_disputes(cohorts: Mapping[str, str], results: Iterable[CaseResult]) -> list[Dispute]:
    """Cases whose ok-status digests disagree among units of one cohort, ordered by case index.

    Cases that fired an invariant are left out: that unit is already accused, and its digest says nothing new.
    """
    by_case: dict[tuple[str, int], dict[str, CaseResult]] = defaultdict(dict)
    for r in results:
        if r.status == STATUS_OK and r.digest is not None and r.unit in cohorts:
            by_case[(cohorts[r.unit], r.index)][r.unit] = r
    disputes = []
    for (cohort, index), runs in by_case.items():
        digests = {u: r.digest for u, r in runs.items() if r.digest is not None}
        if len(set(digests.values())) < 2:
            continue
        majority = strict_majority(Counter(digests.values()))
        workload = next(iter(runs.values())).workload
        disputes.append(Dispute(index, workload, cohort, digests, majority))
    return sorted(disputes, key=lambda d: (d.index, d.cohort))


def failing_cases(cohorts: Mapping[str, str], results: Iterable[CaseResult]) -> dict[str, list[int]]:
    """unit -> indices of its failing cases, in order: invariant failures, minority digests, either side of a tie."""
    results = list(results)
    failing: dict[str, set[int]] = defaultdict(set)
    for r in results:
        if r.status == STATUS_MISMATCH and r.unit in cohorts:
            failing[r.unit].add(r.index)
    for d in find_disputes(cohorts, results):
        for unit in d.minority if not d.needs_retest else d.digests:
            failing[unit].add(d.index)
    return {u: sorted(failing[u]) for u in sorted(failing, key=unit_order)}


def retest_plan(
    cohorts: Mapping[str, str], results: Iterable[CaseResult], *, reruns: int, max_cases: int
) -> list[tuple[str, int]]:
    """The re-runs to do after the main pass, as (unit, case index) jobs, in order.

    Each failing case of a unit (at most `max_cases` per unit, earliest first) is re-run `reruns`
    times on the unit and once on a peer of its cohort that does not already re-run that case.
    `reruns` 0 turns re-runs off.
    """
    if reruns <= 0:
        return []
    chosen = {u: idx[:max_cases] for u, idx in failing_cases(cohorts, results).items()}
    rerunning = {(u, i) for u, idx in chosen.items() for i in idx}
    jobs: list[tuple[str, int]] = []
    for unit, indices in chosen.items():
        members = sorted((u for u, c in cohorts.items() if c == cohorts[unit]), key=unit_order)
        after = members[members.index(unit) + 1 :] + members[: members.index(unit)]  # spread peer work around
        for index in indices:
            jobs += [(unit, index)] * reruns
            peer = next((p for p in after if (p, index) not in rerunning), None)
            if peer is not None:
                jobs.append((peer, index))
                rerunning.add((peer, index))
    return jobs


def judge(
    cohorts: Mapping[str, str],
    results: list[CaseResult],
    *,
    retests: Reruns | None = None,
    problems: Mapping[str, str | Problem] | None = None,
    interrupted: bool = False,
    golden: Mapping[str, GoldenCheck] | None = None,
) -> Judgement:
    """Decide every unit's verdict and the run's.

    Args:
        cohorts: unit id -> cohort key, for every unit of the run.
        results: main-pass case results of all units.
        retests: (unit, case index) -> digests of re-runs of that case on that unit (None: not ok).
        problems: unit id -> why it could not be judged (crashed, hung), as the runner's words or as a
            Problem that carries an evidence code too. A case that raised is one too.
        interrupted: the run was stopped by a signal before its budget ended.
        golden: unit id -> its comparison with a recorded golden (`sdcscan run --golden`).
    """
    j = _Judge(cohorts, retests or {})
    j.invariants(results)
    disputes = find_disputes(cohorts, results)
    for d in disputes:
        j.settle(d)
    j.attribute_unsettled()
    unjudged = {**_raised(results), **{u: _problem(u, why) for u, why in (problems or {}).items()}}
    counts = Counter(r.unit for r in results)
    verdicts: dict[str, Verdict] = {}
    for unit in sorted(cohorts, key=unit_order):
        problem = unjudged.get(unit) or j.case_problems.get(unit)
        if problem is None and not counts[unit]:
            problem = Problem(unit, reason="ran no case")
        if j.blame[unit]:
            verdicts[unit] = Verdict.FAIL
        elif problem:
            verdicts[unit] = Verdict.INVALID
            j.problems[unit] = problem
            j.notices.append(problem)
        else:
            verdicts[unit] = Verdict.INTERRUPTED if interrupted else Verdict.PASS
    j.golden(golden or {}, verdicts)
    overall = Verdict.INTERRUPTED if interrupted else Verdict.worst(verdicts.values())
    if not verdicts:
        j.notices.append(None)
    j.retest_notices()
    return Judgement(
        verdicts,
        overall,
        dict(j.blame),
        j.problems,
        disputes,
        j.notices,
        dict(j.classified),
        dict(golden or {}),
    )


def _problem(unit: str, why: str | Problem) -> Problem:
    """The runner's reason as a Problem: its words alone, or a Problem that carries a code too."""
    return why if isinstance(why, Problem) else Problem(unit, reason=why)


def _raised(results: Iterable[CaseResult]) -> dict[str, Problem]:
    """A case that raised leaves its unit unjudgeable: the first such case per unit."""
    out: dict[str, Problem] = {}
    for r in results:
        if r.status == STATUS_ERROR and r.unit not in out:
            out[r.unit] = Problem(r.unit, raised=r)
    return out


class _Judge:
    """The evidence gathered while judging: blame per unit, notices, and the re-run classification."""

    def __init__(self, cohorts: Mapping[str, str], reruns: Reruns) -> None:
        self.cohorts, self.reruns = cohorts, reruns
        self.blame: dict[str, list[Blame]] = defaultdict(list)
        self.problems: dict[str, Problem] = {}
        self.notices: list[Notice] = []
        self.classified: dict[str, list[Retest]] = defaultdict(list)
        self.case_problems: dict[str, Problem] = {}
        self.unsettled: list[tuple[Dispute, list[str]]] = []

    def accuse(self, blame: Blame, *, notice: bool = True) -> None:
        self.blame[blame.unit].append(blame)
        if notice:
            self.notices.append(blame)

    def classify(
        self,
        unit: str,
        index: int,
        workload: str,
        evidence: RetestEvidence,
        bad: Callable[[str | None], bool],
        peers: Iterable[str],
    ) -> Retest:
        """Classify (unit, case) from the re-runs on it and on `peers`; a `case` is not the unit's fault."""
        own = self.reruns.get((unit, index), ())
        peers = tuple(p for p in sorted(peers, key=unit_order) if p != unit and self.reruns.get((p, index)))
        peer_bad = [bad(x) for p in peers for x in self.reruns[(p, index)]]
        own_bad = [bad(x) for x in own]
        rec = Retest(
            unit,
            index,
            workload,
            evidence,
            classify(own_bad, peer_bad),
            len(own),
            sum(own_bad),
            peers,
            sum(peer_bad),
        )
        self.classified[unit].append(rec)
        if rec.classification == CASE:
            self.case_problems.setdefault(unit, Problem(unit, case_fault=rec))
        return rec

    def peers_of(self, unit: str) -> list[str]:
        return [u for u, c in self.cohorts.items() if c == self.cohorts.get(unit) and u != unit]

    def invariants(self, results: list[CaseResult]) -> None:
        failed: dict[str, list[CaseResult]] = defaultdict(list)
        checked: list[tuple[CaseResult, Retest]] = []
        for r in results:
            if r.status == STATUS_MISMATCH and _runs_with_peers(r.workload):
                failed[r.unit].append(r)  # never re-run alone: its peers judged it with it, in its case
            elif r.status == STATUS_MISMATCH:
                rec = self.classify(
                    r.unit, r.index, r.workload, INVARIANT, lambda x: x is None, self.peers_of(r.unit)
                )
                checked.append((r, rec))
        not_the_unit = self._not_the_units(checked)
        for r, rec in checked:
            if rec.classification != CASE and (r.unit, r.workload) not in not_the_unit:
                failed[r.unit].append(r)
        for unit, rs in sorted(failed.items(), key=lambda kv: unit_order(kv[0])):
            self.accuse(Blame(unit, BLAME_INVARIANT, rs[0].index, rs[0].workload, cases=len(rs)))

    def _not_the_units(self, checked: list[tuple[CaseResult, Retest]]) -> set[tuple[str, str]]:
        """(unit, workload) pairs whose invariant failures are no evidence against the unit.

        - A re-run that failed on a peer too (`case`) shows the workload's check is wrong on this stack:
          the unit's failures of that workload that were not re-run are no evidence either.
        - A workload whose check failed on every unit of a cohort (two or more), with no re-run that
          tied a failure to one unit (`persistent` or `transient`), is wrong itself, e.g. a calibration
          file too tight: each of those units cannot be judged, none is blamed.
        Failures a re-run tied to the unit (`persistent`, `transient`) always stay evidence.
        """
        by_pair: dict[tuple[str, str], list[Retest]] = defaultdict(list)
        for r, rec in checked:
            by_pair[(r.unit, r.workload)].append(rec)
        tied = {
            pair
            for pair, recs in by_pair.items()
            if any(rec.classification in (PERSISTENT, TRANSIENT) for rec in recs)
        }
        shown_software = {
            pair for pair, recs in by_pair.items() if any(rec.classification == CASE for rec in recs)
        }
        out = shown_software - tied
        members: dict[str, list[str]] = defaultdict(list)
        for unit, cohort in self.cohorts.items():
            members[cohort].append(unit)
        for units in members.values():
            if len(units) < 2:
                continue
            for workload in sorted({w for (u, w) in by_pair if u in units}):
                pairs = {(u, workload) for u in units}
                if pairs <= by_pair.keys() and not pairs & tied:
                    out |= pairs
                    for unit in sorted(units, key=unit_order):
                        self.case_problems.setdefault(
                            unit,
                            Problem(
                                unit, code=PROBLEM_FAILS_ON_EVERY_PEER, workload=workload, peers=len(units)
                            ),
                        )
        return out

    def settle(self, d: Dispute) -> None:
        """Blame the minority, or use re-runs where there is no majority."""
        if d.needs_retest:
            self._settle_tie(d)
            return
        for unit in d.minority:
            rec = self.classify(
                unit, d.index, d.workload, CONSENSUS, lambda x: x != d.majority, self.peers_of(unit)
            )
            if rec.classification != CASE:
                self.accuse(Blame(unit, BLAME_DIVERGENT, d.index, d.workload, out_of=len(d.digests)))

    def _settle_tie(self, d: Dispute) -> None:
        """No majority: a unit that does not repeat its own result is blamed, judged against those that do."""
        units = sorted(d.digests, key=unit_order)
        runs = {u: self.reruns.get((u, d.index), ()) for u in units}
        steady = [u for u in units if runs[u] and all(x == d.digests[u] for x in runs[u])]
        flaky = [u for u in units if runs[u] and u not in steady]
        if flaky and not steady and len(flaky) == len(units):
            # Nobody repeats its own result: the case is not deterministic here, which no unit explains.
            for u in units:
                self.classify(u, d.index, d.workload, CONSENSUS, _differs_from(d.digests[u]), units)
            return
        reference = {d.digests[u] for u in steady}
        for unit in flaky:
            ref = next(iter(reference)) if len(reference) == 1 else None
            self.classify(unit, d.index, d.workload, CONSENSUS, _differs_from(ref), steady)
            self.accuse(Blame(unit, BLAME_NOT_REPRODUCIBLE, d.index, d.workload))
        untested = [u for u in units if not runs[u]]
        if len(reference) > 1 or (untested and not flaky):
            self.unsettled.append((d, [u for u in units if u not in flaky]))

    def attribute_unsettled(self) -> None:
        """Disputes re-runs did not settle: blame a suspect already shown bad by other evidence, else all."""
        shown_bad = {u for u, reasons in self.blame.items() if reasons}
        for d, suspects in self.unsettled:
            known = [u for u in suspects if u in shown_bad]
            if len(known) == 1:
                self.accuse(Blame(known[0], BLAME_ATTRIBUTED, d.index, d.workload), notice=False)
                continue
            for unit in suspects:
                blame = Blame(unit, BLAME_UNDECIDED, d.index, d.workload, suspects=tuple(suspects))
                self.accuse(blame, notice=False)
            self.notices.append(Undecided(d.index, d.workload, tuple(suspects)))

    def golden(self, checks: Mapping[str, GoldenCheck], verdicts: dict[str, Verdict]) -> None:
        """Golden disagreements fail a unit, never hiding a worse verdict; units it cannot judge are noticed."""
        gaps: dict[str, list[str]] = defaultdict(list)
        for unit in sorted(checks, key=unit_order):
            check = checks[unit]
            if check.verdict == "unjudged":
                gaps[check.cohort].append(unit)
            elif check.disagreements:
                first = check.disagreements[0]
                n, judged = len(check.disagreements), check.cases_judged
                blame = Blame(unit, BLAME_GOLDEN, first.index, first.workload, cases=n, out_of=judged)
                self.accuse(blame)
                verdicts[unit] = Verdict.worst([verdicts.get(unit, Verdict.PASS), Verdict.FAIL])
        for cohort, units in sorted(gaps.items()):
            self.notices.append(GoldenGap(cohort, tuple(units)))

    def retest_notices(self) -> None:
        """How each unit's failing cases behaved on re-run, and each case that fails everywhere, once."""
        reported: set[int] = set()  # a case that fails everywhere is one notice, not one per unit
        for unit in sorted(self.classified, key=unit_order):
            recs = self.classified[unit]
            for rec in recs:
                if rec.classification == CASE and rec.index not in reported:
                    reported.add(rec.index)
                    self.notices.append(rec)
            summary = unit_classification(recs)
            if summary in (PERSISTENT, TRANSIENT, UNTESTED):
                self.notices.append(RetestSummary(unit, summary, tuple(recs)))


def _differs_from(reference: str | None) -> Callable[[str | None], bool]:
    """A re-run is bad when its digest is not `reference` (None: no reference, every re-run is bad)."""
    return lambda digest: digest != reference


def _runs_with_peers(workload: str) -> bool:
    """A distributed workload's case (collectives across ranks): there is no re-run of it on one unit."""
    spec = SPECS.get(workload)
    return spec is not None and spec.distributed
