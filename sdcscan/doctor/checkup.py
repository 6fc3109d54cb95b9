"""The doctor's steps in order, inside its budget: `checkup(opts, setup, say)` -> the summary.

Each step runs real sdcscan commands as children (`children.run_child`), judges what they left
(`judge`), and gets its floor and a share of the time actually left (`schedule.Allotter`). A step
that cannot get the time it needs says what it skipped. A SIGINT or SIGTERM stops the step that is running (its
child writes what it has), and the summary of what ran is still written.
"""

from __future__ import annotations

import json
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sdcscan import __version__, interrupts
from sdcscan.doctor import environment, judge, schedule
from sdcscan.doctor.bundle import write_bundle
from sdcscan.doctor.children import ChildResult, run_child
from sdcscan.doctor.steps import STEP_NAMES, VERDICT_WORDS, Step, exit_code
from sdcscan.errors import EXIT_INVALID, EXIT_PASS, ReportError, SdcscanError
from sdcscan.profile import load_profile
from sdcscan.report import load_report
from sdcscan.report.document import Report
from sdcscan.run.runner import end_bound_s
from sdcscan.timefmt import iso_utc
from sdcscan.units import Unit, discover_units

SELFTEST_SLACK_S = 30.0  # past its share, a self-test still preparing is stopped
RUN_SLACK_S = 3.0  # the interpreter's start before a run's budget clock, and its exit after it

Say = Callable[[str], None]


@dataclass(frozen=True)
class Setup:
    """What was resolved before any work: the budget, the units, where the bundles go."""

    budget_s: float
    units: list[Unit]
    found: list[Unit]
    out: Path | None
    argv: list[str] = field(default_factory=list)


def prepare(budget_s: float | None, units_spec: str | None, out: Path | None, argv: list[str]) -> Setup:
    """Check everything the doctor was asked before any work; `budget_s` None: the default for the units.

    Raises:
        UsageError: a budget too short, a unit this host lacks, an --out that cannot be a directory.
    """
    from sdcscan.doctor.bundle import check_out_dir

    if budget_s is not None:
        schedule.check_budget(budget_s)
    found = discover_units()
    chosen = schedule.doctor_units(found, units_spec)
    budget_s = schedule.default_budget(chosen) if budget_s is None else budget_s
    if out is not None:
        check_out_dir(out)
    return Setup(budget_s, chosen, found, out, argv)


class _Doctor:
    """The state of one checkup: its clock, its work directory, the steps done so far."""

    def __init__(self, setup: Setup, work: Path, say: Say) -> None:
        self.setup, self.work, self.say = setup, work, say
        self.started = time.time()
        self.ends_at = time.monotonic() + setup.budget_s
        kinds = sorted({u.kind for u in setup.units})
        self.allot = schedule.Allotter.for_kinds(kinds, self.ends_at)
        self.steps: list[Step] = []
        self.det_reports: list[Report] = []

    def step(self, name: str) -> Step:
        step = Step(name)
        self.steps.append(step)
        return step

    def child(self, label: str, argv: list[str], timeout_s: float) -> ChildResult:
        self.say(f"{label}: sdcscan {' '.join(argv)}")
        slug = _slug(label)
        result = run_child(
            argv, stdout=self.work / f"{slug}.out", stderr=self.work / f"{slug}.log", timeout_s=timeout_s
        )
        ended = "killed at its time limit" if result.timed_out else f"exit {result.exit_code}"
        self.say(f"{label}: {ended} after {result.seconds:.1f} s")
        return result

    def environment(self) -> None:
        step = self.step("environment")
        t0 = time.monotonic()
        step.details = environment.describe(self.setup.found, self.setup.units)
        step.seconds = time.monotonic() - t0

    def detectors(self) -> None:
        step = self.step("detectors")
        t0 = time.monotonic()
        for unit in schedule.first_of_each_kind(self.setup.units):
            item = f"selftest {unit.kind}"
            floor = self.allot.floor_of(item)
            seconds = self.allot.take(item, time.monotonic())
            if seconds < floor:
                step.skipped.append(f"self-test on {unit.id}: {seconds:.0f} s left, it needs {floor:.0f}")
                continue
            label = f"selftest {unit.id}"
            result = self.child(label, schedule.selftest_argv(unit.id, seconds), seconds + SELFTEST_SLACK_S)
            self.allot.took("selftest", seconds, result.seconds)
            outcome = self._selftest_result(label, result)
            if isinstance(outcome, str):
                step.reasons.append(f"{unit.id}: {outcome}")
                continue
            step.reasons += judge.selftest_reasons(unit.id, outcome)
            step.details[unit.id] = _selftest_details(outcome)
        step.seconds = time.monotonic() - t0

    def _selftest_result(self, label: str, result: ChildResult) -> dict[str, Any] | str:
        """The self-test's JSON result, or why there is none."""
        if result.timed_out:
            return "the self-test did not finish in time"
        slug = _slug(label)
        try:
            data = json.loads((self.work / f"{slug}.out").read_text() or "null")
        except (OSError, ValueError):
            data = None
        if not isinstance(data, dict) or "rows" not in data:
            return f"the self-test exited {result.exit_code} without a result: {_last_line(self.work / f'{slug}.log')}"
        return data

    def determinism(self) -> None:
        step = self.step("determinism")
        t0 = time.monotonic()
        profile = load_profile(schedule.PROFILE)
        cases = schedule.determinism_cases(profile, self.setup.units)  # both runs: the same cases
        for n in (1, 2):
            report = self._clean_run(step, f"determinism {n}", cases)
            if report is not None:
                self.det_reports.append(report)
        if len(self.det_reports) == 2:
            workloads = [w.name for w in profile.workloads]
            verdict = judge.determinism(self.det_reports, workloads)
            step.findings += verdict.findings
            step.reasons += verdict.reasons
            step.details.update(verdict.details)
        step.seconds = time.monotonic() - t0

    def injection(self) -> None:
        step = self.step("injection")
        t0 = time.monotonic()
        struck = schedule.first_of_each_kind(self.setup.units)
        for kind in schedule.INJECTIONS:
            launched = self._launch(
                step, f"drill {kind}", schedule.DRILL_PROFILE, schedule.injection_specs(kind, struck)
            )
            if launched is None:
                continue
            report, result, bound = launched
            drill = judge.DrillRun(
                kind, tuple(u.id for u in struck), report, result.exit_code, result.seconds, bound,
                tuple(result.left_behind),
            )  # fmt: skip
            step.reasons += judge.drill_reasons(drill)
            step.details[kind] = {
                "struck": list(drill.struck),
                "exit_code": result.exit_code,
                "seconds": round(result.seconds, 1),
                "bound_s": round(bound, 1),
                "verdicts": {u["id"]: u["verdict"] for u in (report["units"] if report else [])},
            }
        step.seconds = time.monotonic() - t0

    def _launch(
        self, step: Step, label: str, profile: str, inject: list[str], cases: int | None = None
    ) -> tuple[Report | None, ChildResult, float] | None:
        """One `sdcscan run` on the doctor's units: (its report or None, how it ended, its bound), or
        None when too little time is left for it (said on the step)."""
        floor = self.allot.floor_of(label)
        seconds = self.allot.take(label, time.monotonic())
        if seconds < floor:
            step.skipped.append(f"{label}: {seconds:.0f} s left, this run needs {floor:.0f}")
            return None
        out = self.work / f"{_slug(label)}.json"
        plan = schedule.run_plan(
            self.setup.units, seconds, str(out), profile=profile, inject=inject, cases=cases
        )
        bound = end_bound_s(plan.budget_s) + RUN_SLACK_S
        result = self.child(label, plan.argv(), bound + RUN_SLACK_S)
        self.allot.took("run", seconds, result.seconds)
        return _read_report(out), result, bound

    def _clean_run(self, step: Step, label: str, cases: int) -> Report | None:
        """A run of `cases` cases a unit of the doctor's plan without injections; its report, or None with
        the reason on the step."""
        launched = self._launch(step, label, schedule.PROFILE, [], cases)
        if launched is None:
            return None
        report, result, bound = launched
        step.reasons += judge.run_reasons(label, result.seconds, bound, result.left_behind)
        if report is None:
            log = _last_line(self.work / f"{_slug(label)}.log")
            step.reasons.append(f"{label}: the run wrote no report (exit {result.exit_code}): {log}")
        return report

    def speed(self) -> None:
        step = self.step("speed")
        if not self.det_reports:
            step.skipped.append("no determinism run finished: nothing was measured")
            return
        step.details = {"profile": schedule.PROFILE, **judge.speed(self.det_reports[-1])}

    def summary(self, signum: int | None) -> dict[str, Any]:
        code = interrupts.exit_code(signum) if signum is not None else exit_code(self.steps)
        done = {s.name for s in self.steps}
        return {
            "tool": {"name": "sdcscan", "version": __version__},
            "command": "doctor",
            "argv": self.setup.argv,
            "host": socket.gethostname(),
            "budget_s": self.setup.budget_s,
            "started_at": iso_utc(self.started),
            "ended_at": iso_utc(time.time()),
            "duration_s": round(time.time() - self.started, 1),
            "units": [u.id for u in self.setup.units],
            "verdict": "interrupted" if signum is not None else VERDICT_WORDS[code],
            "exit_code": code,
            "interrupted_by": interrupts.signal_name(signum) if signum is not None else None,
            "findings": [f"{s.name}: {f}" for s in self.steps for f in s.findings],
            "reasons": [f"{s.name}: {r}" for s in self.steps for r in (*s.reasons, *s.skipped)],
            "steps": [s.to_dict() for s in self.steps],
            "not_run": [n for n in STEP_NAMES if n not in done],
        }


def checkup(setup: Setup, say: Say) -> dict[str, Any]:
    """Run every step inside the budget and return the summary (written to `setup.out` too, if set).

    An interrupt stops the step that is running; the summary says so and what was not run, and its
    `exit_code` is 130 or 143.
    """
    with tempfile.TemporaryDirectory(prefix="sdcscan-doctor-") as tmp:
        doctor = _Doctor(setup, Path(tmp), say)
        signum: int | None = None
        try:
            for run_step in (
                doctor.environment,
                doctor.detectors,
                doctor.determinism,
                doctor.injection,
                doctor.speed,
            ):
                run_step()
        except interrupts.Interrupted as stop:
            signum = stop.signum
            if doctor.steps:
                doctor.steps[-1].interrupted = True
        interrupts.hold()  # the summary and the bundles must be written whatever comes now
        summary = doctor.summary(signum)
        if setup.out is not None:
            _write_out(setup.out, summary, Path(tmp))
        return summary


def _write_out(out: Path, summary: dict[str, Any], work: Path) -> None:
    """The --out files; one that cannot be written is said in the summary, and a verdict that had
    nothing to report becomes 3 (a real finding keeps its 1: a full disk must not hide it)."""
    try:
        write_bundle(out, summary, work)
    except ReportError as err:
        summary["output_error"] = str(err)
        if summary["exit_code"] == EXIT_PASS:
            summary["exit_code"], summary["verdict"] = EXIT_INVALID, VERDICT_WORDS[EXIT_INVALID]


def _selftest_details(result: dict[str, Any]) -> dict[str, Any]:
    rows = result["rows"]
    clean = [r for r in rows if r["site"] == "clean"]
    return {
        "trials": result["trials"],
        "variants": len(clean),
        "clean_trials": sum(r["trials"] for r in clean),
        "false_positives": sum(r["false_positives"] for r in clean),
        "fault_rows": len(rows) - len(clean),
        "passed": result["passed"],
    }


def _read_report(path: Path) -> Report | None:
    if not path.exists():
        return None
    try:
        return load_report(path)
    except SdcscanError:
        return None


def _slug(label: str) -> str:
    """A child's label as a file name: "selftest cuda:0" -> "selftest-cuda0"."""
    return label.replace(" ", "-").replace(":", "")


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return lines[-1].strip()[:300] if lines else "nothing on stderr"
