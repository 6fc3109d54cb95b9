"""Outcomes -> unit and run verdicts. Pure: no I/O, no clock, no torch.

Evidence (DESIGN.md): an invariant firing on a unit fails it. Digests of the same case are compared
inside a cohort: with a strict majority the minority is divergent; without one (two units, or a
tie) nobody is accused on consensus alone — the disputed case is re-run on every unit involved and a
unit whose result does not reproduce is blamed; if every result reproduces and they still disagree,
the dispute is undecided and all the units involved are suspects.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

PASS, FAIL, INVALID, INTERRUPTED = "pass", "fail", "invalid", "interrupted"
_SEVERITY = {PASS: 0, FAIL: 1, INVALID: 2, INTERRUPTED: 3}
EXIT_CODES = {PASS: 0, FAIL: 1, INVALID: 3, INTERRUPTED: 130}


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One case as the parent recorded it."""

    unit: str
    index: int
    workload: str
    status: str  # ok | mismatch | error
    digest: str | None
    seconds: float = 0.0


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
    kind: str  # invariant | divergent | not_reproducible | undecided | invalid | note
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


def judge(
    cohorts: Mapping[str, str],
    results: list[CaseResult],
    *,
    retests: Mapping[tuple[str, int], list[str | None]] | None = None,
    problems: Mapping[str, str] | None = None,
    interrupted: bool = False,
    replay: str = "",
) -> Judgement:
    """Decide every unit's verdict and the run's.

    Args:
        cohorts: unit id -> cohort key, for every unit of the run.
        results: main-pass case results of all units.
        retests: (unit, case index) -> digests of re-runs of a disputed case on that unit.
        problems: unit id -> why it could not be judged (crashed, hung, raised).
        interrupted: the run was stopped by a signal before its budget ended.
        replay: command-line fragment that replays this run (`--seed N --profile P`), for findings.
    """
    retests, problems = retests or {}, problems or {}
    blame: dict[str, list[str]] = defaultdict(list)
    findings: list[Finding] = []
    _invariants(results, blame, findings, replay)
    disputes = find_disputes(cohorts, results)
    for d in disputes:
        _settle(d, retests, blame, findings, replay)
    verdicts, reasons = {}, {}
    counts = Counter(r.unit for r in results)
    for unit in sorted(cohorts, key=_unit_order):
        problem = problems.get(unit) or (None if counts[unit] else "ran no case")
        if blame[unit]:
            verdicts[unit], reasons[unit] = FAIL, blame[unit][0]
        elif problem:
            verdicts[unit], reasons[unit] = INVALID, problem
            findings.append(Finding("invalid", unit, f"{unit} could not be judged: {problem}.", _next_invalid(unit)))
        else:
            verdicts[unit], reasons[unit] = (INTERRUPTED if interrupted else PASS), None
    overall = INTERRUPTED if interrupted else max(verdicts.values(), key=_SEVERITY.__getitem__, default=INVALID)
    if not verdicts:
        findings.append(Finding("invalid", None, "No unit was selected, so nothing was judged."))
    return Judgement(verdicts, reasons, overall, disputes, findings)


def _invariants(results: list[CaseResult], blame: dict[str, list[str]], findings: list[Finding], replay: str) -> None:
    first: dict[str, CaseResult] = {}
    count: Counter[str] = Counter()
    for r in results:
        if r.status == "mismatch":
            count[r.unit] += 1
            first.setdefault(r.unit, r)
    for unit, r in sorted(first.items(), key=lambda kv: _unit_order(kv[0])):
        blame[unit].append(f"invariant failed in {count[unit]} case(s), first case {r.index} ({r.workload})")
        findings.append(
            Finding(
                "invariant",
                unit,
                f"{unit} computed wrong results: {r.workload} check failed in {count[unit]} case(s), "
                f"first at case {r.index}.",
                _next_fail(unit, replay),
            )
        )


def _settle(
    d: Dispute,
    retests: Mapping[tuple[str, int], list[str | None]],
    blame: dict[str, list[str]],
    findings: list[Finding],
    replay: str,
) -> None:
    """Blame the minority, or use re-runs where there is no majority."""
    if not d.needs_retest:
        for unit in d.minority:
            blame[unit].append(f"digest disagreed with the cohort majority at case {d.index} ({d.workload})")
            findings.append(
                Finding(
                    "divergent",
                    unit,
                    f"{unit} disagreed with the other {len(d.digests) - 1} units of its cohort "
                    f"at case {d.index} ({d.workload}).",
                    _next_fail(unit, replay),
                )
            )
        return
    units = sorted(d.digests, key=_unit_order)
    reproduced = {u: bool(retests.get((u, d.index))) and all(x == d.digests[u] for x in retests[(u, d.index)]) for u in units}
    flaky = [u for u in units if retests.get((u, d.index)) and not reproduced[u]]
    for unit in flaky:
        blame[unit].append(f"result of disputed case {d.index} ({d.workload}) did not reproduce on re-run")
        findings.append(
            Finding(
                "not_reproducible",
                unit,
                f"{unit} and its peers disagreed at case {d.index} ({d.workload}); on re-run {unit} "
                "gave a different result while its peers repeated theirs.",
                _next_fail(unit, replay),
            )
        )
    steady = [u for u in units if reproduced[u]]
    untested = [u for u in units if not retests.get((u, d.index))]
    if len({d.digests[u] for u in steady}) > 1 or (untested and not flaky):
        suspects = [u for u in units if u not in flaky]
        for unit in suspects:
            blame[unit].append(f"undecided dispute at case {d.index} ({d.workload}) with {', '.join(suspects)}")
        findings.append(
            Finding(
                "undecided",
                None,
                f"Units {', '.join(suspects)} disagreed at case {d.index} ({d.workload}) and re-runs did not "
                "settle it; all of them are suspects.",
                f"sdcscan run {replay} --units {suspects[0]} --budget 10m, then the same for each suspect".strip(),
            )
        )


def _unit_order(unit: str) -> tuple[str, int]:
    kind, _, index = unit.partition(":")
    return (kind, int(index) if index.isdigit() else 0)


def _next_fail(unit: str, replay: str) -> str:
    return f"sdcscan run {replay} --units {unit} --budget 15m  (reproduce; then take {unit} out of service)".replace(
        "  ", " ", 1
    ).replace("run  ", "run ")


def _next_invalid(unit: str) -> str:
    return f"check the journal and system log for {unit}; re-run with --units {unit}"
