"""The judge's evidence in sentences: each unit's reason and the report's findings, with what to do next.

`sdcscan.judgement.verdict` weighs evidence and records it as data (`Blame`, `Problem`, `Undecided`, ...); this
module is the one place that turns those records into English. Pure and torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sdcscan.judgement.evidence import (
    BLAME_ATTRIBUTED,
    BLAME_DIVERGENT,
    BLAME_GOLDEN,
    BLAME_INVARIANT,
    BLAME_NOT_REPRODUCIBLE,
    BLAME_UNDECIDED,
    PROBLEM_FAILS_ON_EVERY_PEER,
    PROBLEM_NOT_SCREENED,
    PROBLEM_STARVED,
    Blame,
    GoldenGap,
    Notice,
    Problem,
    RetestSummary,
    Undecided,
)
from sdcscan.judgement.retest import PERSISTENT, TRANSIENT, UNTESTED, Retest
from sdcscan.judgement.verdict import Judgement
from sdcscan.report.document import Finding, Run


def finding(kind: str, unit: str | None, message: str, next_step: str | None = None) -> Finding:
    return {"kind": kind, "unit": unit, "message": message, "next": next_step}


def reason(record: Blame | Problem | None) -> str | None:
    """A unit's reason in the report: why it failed (its first blame) or why it could not be judged."""
    if record is None:
        return None
    if isinstance(record, Problem):
        return _problem(record)
    where = f"case {record.index} ({record.workload})"
    return {
        BLAME_INVARIANT: f"invariant failed in {record.cases} case(s), first {where}",
        BLAME_DIVERGENT: f"digest disagreed with the cohort majority at {where}",
        BLAME_NOT_REPRODUCIBLE: f"result of disputed {where} did not reproduce on re-run",
        BLAME_ATTRIBUTED: f"disputed {where}, attributed to it by other evidence",
        BLAME_UNDECIDED: f"undecided dispute at {where} with {', '.join(record.suspects)}",
        BLAME_GOLDEN: f"digest of {where} differs from the golden",
    }[record.kind]


def findings(judgement: Judgement, run: Run, parts: Mapping[str, str] | None = None) -> list[Finding]:
    """The judgement's findings, in the order the evidence was found.

    Args:
        run: the report's `run` object; its profile and seed make the replay commands.
        parts: unit -> its physical part in words (`sdcscan.parts.describe`): what a failing unit's
            finding says to replace.
    """
    return [_finding(n, run, parts or {}) for n in judgement.notices]


def replay_args(run: Run) -> str:
    """The command-line fragment that replays a run's plan: `--profile NAME --seed N`."""
    return f"--profile {run.get('profile', {}).get('name', 'PROFILE')} --seed {run.get('seed')}"


def _finding(notice: Notice, run: Run, parts: Mapping[str, str]) -> Finding:
    replay = replay_args(run)
    if notice is None:
        return finding("invalid", None, "No unit was selected, so nothing was judged.")
    if isinstance(notice, Blame):
        return _blame_finding(notice, run, parts.get(notice.unit) or "")
    if isinstance(notice, Problem):
        unit = notice.unit
        next_step = f"check the journal and system log for {unit}; re-run with --units {unit}"
        if notice.code == PROBLEM_NOT_SCREENED:  # busy with other work: nothing points at the unit
            next_step = (
                f"nothing points at {unit}: other work kept it busy; give the background run a longer "
                "--budget, or screen it at a quiet time (sdcscan run --foreground)"
            )
        elif notice.code == PROBLEM_STARVED:  # the host kept it off its CPU: not the unit's fault
            next_step = (
                f"nothing points at {unit}: the host kept it off its CPU; screen it when the host is quieter "
                f"(sdcscan run --units {unit}), with a longer --budget, or beside the other work with "
                "--background, which waits for idle time instead of competing for it"
            )
        return finding("invalid", unit, f"{unit} could not be judged: {_problem(notice)}.", next_step)
    if isinstance(notice, Undecided):
        units = ", ".join(notice.suspects)
        return finding(
            "undecided",
            None,
            f"Units {units} disagreed at case {notice.index} ({notice.workload}) and re-runs did not "
            "settle it; all of them are suspects.",
            f"sdcscan run {replay} --units {notice.suspects[0]} --budget 10m, then the same for each suspect",
        )
    if isinstance(notice, Retest):
        next_step = (
            f"report it with the journal; replay: sdcscan run {replay} --units {notice.unit} --budget 1m"
        )
        return finding("case", notice.unit, case_message(notice), next_step)
    if isinstance(notice, RetestSummary):
        return finding("retest", notice.unit, retest_message(notice.unit, notice.summary, notice.records))
    return _golden_gap(notice, run)


def _blame_finding(b: Blame, run: Run, part: str) -> Finding:
    unit, where = b.unit, f"case {b.index} ({b.workload})"
    replace = f"; the part to replace: {part}" if part else ""
    next_fail = (
        f"sdcscan run {replay_args(run)} --units {unit} --budget 15m "
        f"(reproduce; then take {unit} out of service{replace})"
    )
    if b.kind == BLAME_INVARIANT:
        message = f"{unit} computed wrong results: {b.workload} check failed in {b.cases} case(s), first at case {b.index}."
        return finding("invariant", unit, message, next_fail)
    if b.kind == BLAME_DIVERGENT:
        message = f"{unit} disagreed with the other {b.out_of - 1} units of its cohort at {where}."
        return finding("divergent", unit, message, next_fail)
    if b.kind == BLAME_NOT_REPRODUCIBLE:
        message = (
            f"{unit} and its peers disagreed at {where}; on re-run {unit} gave a different result while its "
            "peers repeated theirs."
        )
        return finding("not_reproducible", unit, message, next_fail)
    if b.kind == BLAME_GOLDEN:
        profile = run.get("profile", {}).get("name", "PROFILE")
        return finding(
            "golden",
            unit,
            f"{unit} disagrees with the golden on {b.cases} of {b.out_of} case(s), first {where}: "
            "silent data corruption suspected",
            f"retest it: sdcscan run --profile {profile} --seed {run.get('seed')} --units {unit} "
            f"--workloads {b.workload} --golden GOLDEN; if it fails again, take {unit} out of service{replace}",
        )
    raise ValueError(f"blame of kind {b.kind!r} makes no finding of its own")


def _golden_gap(gap: GoldenGap, run: Run) -> Finding:
    """The golden cannot judge these units: no failure, but absence of evidence is said out loud."""
    sha = str(run.get("profile", {}).get("sha256", ""))[:12]
    ids = sorted(gap.units)
    names = ", ".join(ids[:4]) + (", …" if len(ids) > 4 else "")
    return finding(
        "golden",
        ids[0] if len(ids) == 1 else None,
        f"the golden cannot judge {len(ids)} unit(s) ({names}): it holds no case they ran for "
        f"this plan (profile {sha}…, seed {run.get('seed')}) and cohort {gap.cohort}",
        "record a golden from reports of the same profile, seed and hardware: "
        "sdcscan golden record REPORT… -o golden.json",
    )


def _problem(p: Problem) -> str:
    if p.raised is not None:
        r = p.raised
        return f"workload raised in case {r.index} ({r.workload}): {r.error or 'unknown error'}"
    if p.case_fault is not None:
        c = p.case_fault
        return f"case {c.index} ({c.workload}) failed on peer {', '.join(c.peers)} too: a software or determinism problem"
    if p.code == PROBLEM_FAILS_ON_EVERY_PEER:
        return (
            f"{p.workload}'s check failed on all {p.peers} units of this cohort and no re-run tied a failure "
            f"to one unit: the check or its configuration (a --calibration file too tight?) is wrong, not this unit"
        )
    return p.reason or "unknown problem"


_MEANING = {
    PERSISTENT: "the error follows this unit: take it out of service",
    TRANSIENT: "the error did not repeat: a one-off corruption, still a hardware event; watch this unit",
    UNTESTED: "no re-run could be done (retest off, time up or the unit stopped)",
}


def retest_message(unit: str, summary: str, recs: Sequence[Retest]) -> str:
    """One sentence on how a unit's failing cases behaved on re-run (the first three in detail)."""
    parts, tested = [], [r for r in recs if r.classification != UNTESTED]
    for r in tested[:3]:
        peer = f", {r.peer_failures} times on peer {', '.join(r.peers)}" if r.peers else ", no peer re-run"
        parts.append(
            f"case {r.index} ({r.workload}) {r.classification}: failed again {r.reproduced} of {r.reruns} times{peer}"
        )
    untested = len(recs) - len(tested)
    more = f"; {len(tested) - 3} more re-run case(s)" if len(tested) > 3 else ""
    more += f"; {untested} more failing case(s) not re-run" if untested else ""
    return (
        f"{unit} re-runs of failing cases: {summary} — {_MEANING[summary]}. " + "; ".join(parts) + more + "."
    )


def case_message(rec: Retest) -> str:
    """A case that fails on every unit that runs it: the test's problem, not the hardware's."""
    return (
        f"Case {rec.index} ({rec.workload}) failed on {rec.unit} and again on {', '.join(rec.peers)}: it fails "
        "wherever it runs, so this is a software or determinism problem in the test, not a hardware fault of these units."
    )
