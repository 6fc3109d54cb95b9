"""Outcomes -> unit and run verdicts, and the classification of re-runs. Pure: no I/O, no clock, no torch.

Evidence (DESIGN.md): an invariant firing on a unit fails it. Digests of the same case are compared
inside a cohort: with a strict majority the minority is divergent; without one (two units, or a
tie) nobody is accused on consensus alone — the disputed case is re-run on every unit involved and a
unit whose result does not reproduce is blamed; if every result reproduces and they still disagree,
the dispute is undecided and all the units involved are suspects.

Repeat evidence: every failing (unit, case) is re-run on the unit and once on a peer of its cohort,
and classified `transient` (does not fail again on the unit), `persistent` (fails again on the unit,
not on the peer) or `case` (fails on the peer too: a software or determinism problem, so the unit is
not blamed for it). The classification table is `sdcscan.retest.classify`; `retest_plan` says what to re-run.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sdcscan.retest import (
    CASE,
    PERSISTENT,
    TRANSIENT,
    UNTESTED,
    Retest,
    case_message,
    classify,
    retest_message,
    unit_classification,
)

PASS, FAIL, INVALID, INTERRUPTED = "pass", "fail", "invalid", "interrupted"
_SEVERITY = {PASS: 0, FAIL: 1, INVALID: 2, INTERRUPTED: 3}
EXIT_CODES = {PASS: 0, FAIL: 1, INVALID: 3, INTERRUPTED: 130}

# (unit, case index) -> the digest of each re-run on that unit, None where the re-run did not end `ok`.
Reruns = Mapping[tuple[str, int], Sequence[str | None]]


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One case as the parent recorded it."""

    unit: str
    index: int
    workload: str
    status: str  # ok | mismatch | error
    digest: str | None
    seconds: float = 0.0
    error: str | None = None  # the exception summary when status is error


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
class Finding:
    kind: str  # invariant | divergent | not_reproducible | undecided | retest | case | invalid | note
    unit: str | None
    message: str
    next: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {"kind": self.kind, "unit": self.unit, "message": self.message, "next": self.next}


@dataclass
class Judgement:
    unit_verdicts: dict[str, str]
    unit_reasons: dict[str, str | None]
    verdict: str
    disputes: list[Dispute] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    retests: dict[str, list[Retest]] = field(default_factory=dict)  # unit -> its classified failing cases


def find_disputes(cohorts: Mapping[str, str], results: Iterable[CaseResult]) -> list[Dispute]:
    """Cases whose ok-status digests disagree among units of one cohort, ordered by case index.

    Cases that fired an invariant are left out: that unit is already accused, and its digest says nothing new.
    """
    by_case: dict[tuple[str, int], dict[str, CaseResult]] = defaultdict(dict)
    for r in results:
        if r.status == "ok" and r.digest is not None and r.unit in cohorts:
            by_case[(cohorts[r.unit], r.index)][r.unit] = r
    disputes = []
    for (cohort, index), runs in by_case.items():
        digests = {u: r.digest for u, r in runs.items() if r.digest is not None}
        if len(set(digests.values())) < 2:
            continue
        (top, count), *_ = Counter(digests.values()).most_common(1)
        majority = top if count * 2 > len(digests) else None
        workload = next(iter(runs.values())).workload
        disputes.append(Dispute(index, workload, cohort, digests, majority))
    return sorted(disputes, key=lambda d: (d.index, d.cohort))


def failing_cases(cohorts: Mapping[str, str], results: Iterable[CaseResult]) -> dict[str, list[int]]:
    """unit -> indices of its failing cases, in order: invariant failures, minority digests, either side of a tie."""
    results = list(results)
    failing: dict[str, set[int]] = defaultdict(set)
    for r in results:
        if r.status == "mismatch" and r.unit in cohorts:
            failing[r.unit].add(r.index)
    for d in find_disputes(cohorts, results):
        for unit in d.minority if not d.needs_retest else d.digests:
            failing[unit].add(d.index)
    return {u: sorted(failing[u]) for u in sorted(failing, key=_unit_order)}


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
        members = sorted((u for u, c in cohorts.items() if c == cohorts[unit]), key=_unit_order)
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
    problems: Mapping[str, str] | None = None,
    interrupted: bool = False,
    replay: str = "",
) -> Judgement:
    """Decide every unit's verdict and the run's.

    Args:
        cohorts: unit id -> cohort key, for every unit of the run.
        results: main-pass case results of all units.
        retests: (unit, case index) -> digests of re-runs of that case on that unit (None: not ok).
        problems: unit id -> why it could not be judged (crashed, hung). A case that raised is one too.
        interrupted: the run was stopped by a signal before its budget ended.
        replay: command-line fragment that replays this run (`--seed N --profile P`), for findings.
    """
    j = _Judge(cohorts, retests or {}, replay)
    j.invariants(results)
    disputes = find_disputes(cohorts, results)
    for d in disputes:
        j.settle(d)
    j.attribute_unsettled()
    problems = {**_raised(results), **(problems or {})}
    counts = Counter(r.unit for r in results)
    verdicts, reasons = {}, {}
    for unit in sorted(cohorts, key=_unit_order):
        problem = problems.get(unit) or j.case_problems.get(unit) or (None if counts[unit] else "ran no case")
        if j.blame[unit]:
            verdicts[unit], reasons[unit] = FAIL, j.blame[unit][0]
        elif problem:
            verdicts[unit], reasons[unit] = INVALID, problem
            j.findings.append(
                Finding("invalid", unit, f"{unit} could not be judged: {problem}.", _next_invalid(unit))
            )
        else:
            verdicts[unit], reasons[unit] = (INTERRUPTED if interrupted else PASS), None
    overall = (
        INTERRUPTED if interrupted else max(verdicts.values(), key=_SEVERITY.__getitem__, default=INVALID)
    )
    if not verdicts:
        j.findings.append(Finding("invalid", None, "No unit was selected, so nothing was judged."))
    j.retest_findings()
    return Judgement(verdicts, reasons, overall, disputes, j.findings, dict(j.classified))


def _raised(results: Iterable[CaseResult]) -> dict[str, str]:
    """A case that raised leaves its unit unjudgeable: the first such case per unit, with the exception."""
    out: dict[str, str] = {}
    for r in results:
        if r.status == "error" and r.unit not in out:
            out[r.unit] = f"workload raised in case {r.index} ({r.workload}): {r.error or 'unknown error'}"
    return out


class _Judge:
    """The evidence gathered while judging: blame per unit, findings, and the re-run classification."""

    def __init__(self, cohorts: Mapping[str, str], reruns: Reruns, replay: str) -> None:
        self.cohorts, self.reruns, self.replay = cohorts, reruns, replay
        self.blame: dict[str, list[str]] = defaultdict(list)
        self.findings: list[Finding] = []
        self.classified: dict[str, list[Retest]] = defaultdict(list)
        self.case_problems: dict[str, str] = {}
        self.unsettled: list[tuple[Dispute, list[str]]] = []

    def classify(
        self,
        unit: str,
        index: int,
        workload: str,
        evidence: str,
        bad: Callable[[str | None], bool],
        peers: Iterable[str],
    ) -> Retest:
        """Classify (unit, case) from the re-runs on it and on `peers`; a `case` is not the unit's fault."""
        own = self.reruns.get((unit, index), ())
        peers = tuple(p for p in sorted(peers, key=_unit_order) if p != unit and self.reruns.get((p, index)))
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
            self.case_problems.setdefault(
                unit,
                f"case {index} ({workload}) failed on peer {', '.join(peers)} too: a software or determinism problem",
            )
        return rec

    def peers_of(self, unit: str) -> list[str]:
        return [u for u, c in self.cohorts.items() if c == self.cohorts.get(unit) and u != unit]

    def invariants(self, results: list[CaseResult]) -> None:
        failed: dict[str, list[CaseResult]] = defaultdict(list)
        for r in results:
            if r.status == "mismatch":
                rec = self.classify(
                    r.unit, r.index, r.workload, "invariant", lambda x: x is None, self.peers_of(r.unit)
                )
                if rec.classification != CASE:
                    failed[r.unit].append(r)
        for unit, rs in sorted(failed.items(), key=lambda kv: _unit_order(kv[0])):
            first, n = rs[0], len(rs)
            self.blame[unit].append(
                f"invariant failed in {n} case(s), first case {first.index} ({first.workload})"
            )
            self.findings.append(
                Finding(
                    "invariant",
                    unit,
                    f"{unit} computed wrong results: {first.workload} check failed in {n} case(s), "
                    f"first at case {first.index}.",
                    _next_fail(unit, self.replay),
                )
            )

    def settle(self, d: Dispute) -> None:
        """Blame the minority, or use re-runs where there is no majority."""
        if d.needs_retest:
            self._settle_tie(d)
            return
        for unit in d.minority:
            rec = self.classify(
                unit, d.index, d.workload, "consensus", lambda x: x != d.majority, self.peers_of(unit)
            )
            if rec.classification == CASE:
                continue
            self.blame[unit].append(
                f"digest disagreed with the cohort majority at case {d.index} ({d.workload})"
            )
            self.findings.append(
                Finding(
                    "divergent",
                    unit,
                    f"{unit} disagreed with the other {len(d.digests) - 1} units of its cohort "
                    f"at case {d.index} ({d.workload}).",
                    _next_fail(unit, self.replay),
                )
            )

    def _settle_tie(self, d: Dispute) -> None:
        """No majority: a unit that does not repeat its own result is blamed, judged against those that do."""
        units = sorted(d.digests, key=_unit_order)
        runs = {u: self.reruns.get((u, d.index), ()) for u in units}
        steady = [u for u in units if runs[u] and all(x == d.digests[u] for x in runs[u])]
        flaky = [u for u in units if runs[u] and u not in steady]
        if flaky and not steady and len(flaky) == len(units):
            # Nobody repeats its own result: the case is not deterministic here, which no unit explains.
            for u in units:
                self.classify(u, d.index, d.workload, "consensus", lambda x, u=u: x != d.digests[u], units)
            return
        reference = {d.digests[u] for u in steady}
        for unit in flaky:
            ref = next(iter(reference)) if len(reference) == 1 else None
            self.classify(unit, d.index, d.workload, "consensus", lambda x, ref=ref: x != ref, steady)
            self.blame[unit].append(
                f"result of disputed case {d.index} ({d.workload}) did not reproduce on re-run"
            )
            self.findings.append(
                Finding(
                    "not_reproducible",
                    unit,
                    f"{unit} and its peers disagreed at case {d.index} ({d.workload}); on re-run {unit} "
                    "gave a different result while its peers repeated theirs.",
                    _next_fail(unit, self.replay),
                )
            )
        untested = [u for u in units if not runs[u]]
        if len(reference) > 1 or (untested and not flaky):
            self.unsettled.append((d, [u for u in units if u not in flaky]))

    def attribute_unsettled(self) -> None:
        """Disputes re-runs did not settle: blame a suspect already shown bad by other evidence, else all."""
        shown_bad = {u for u, reasons in self.blame.items() if reasons}
        for d, suspects in self.unsettled:
            known = [u for u in suspects if u in shown_bad]
            if len(known) == 1:
                self.blame[known[0]].append(
                    f"disputed case {d.index} ({d.workload}), attributed to it by other evidence"
                )
                continue
            for unit in suspects:
                self.blame[unit].append(
                    f"undecided dispute at case {d.index} ({d.workload}) with {', '.join(suspects)}"
                )
            self.findings.append(
                Finding(
                    "undecided",
                    None,
                    f"Units {', '.join(suspects)} disagreed at case {d.index} ({d.workload}) and re-runs did not "
                    "settle it; all of them are suspects.",
                    f"sdcscan run {self.replay} --units {suspects[0]} --budget 10m, then the same for each suspect".strip(),
                )
            )

    def retest_findings(self) -> None:
        """One finding per unit saying how its failing cases behaved on re-run, and one per `case` problem."""
        reported: set[int] = set()  # a case that fails everywhere is one finding, not one per unit
        for unit in sorted(self.classified, key=_unit_order):
            recs = self.classified[unit]
            for rec in recs:
                if rec.classification == CASE and rec.index not in reported:
                    reported.add(rec.index)
                    replay = f"sdcscan run {self.replay} --units {unit} --budget 1m"
                    self.findings.append(
                        Finding(
                            "case", unit, case_message(rec), f"report it with the journal; replay: {replay}"
                        )
                    )
            summary = unit_classification(recs)
            if summary in (PERSISTENT, TRANSIENT, UNTESTED):
                self.findings.append(Finding("retest", unit, retest_message(unit, summary, recs)))


def _unit_order(unit: str) -> tuple[str, int]:
    kind, _, index = unit.partition(":")
    return (kind, int(index) if index.isdigit() else 0)


def _next_fail(unit: str, replay: str) -> str:
    return f"sdcscan run {replay} --units {unit} --budget 15m  (reproduce; then take {unit} out of service)".replace(
        "  ", " ", 1
    ).replace("run  ", "run ")


def _next_invalid(unit: str) -> str:
    return f"check the journal and system log for {unit}; re-run with --units {unit}"
