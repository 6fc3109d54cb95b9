"""Everything people see on stderr: live progress, the final table, findings. The only module that imports rich."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sdcscan import proof
from sdcscan.events import (
    CaseFinished,
    CaseStarted,
    Event,
    PhaseChanged,
    RunNote,
    RunStarted,
    UnitPreparing,
    UnitProblem,
    UnitReady,
)
from sdcscan.parts import describe
from sdcscan.render.console import cell
from sdcscan.report.document import Checked, Report

PLAIN_PROGRESS_EVERY_S = 15.0
MAX_PROOF_UNITS = 16  # units whose proof lines are each shown; beyond, the weakest per workload
_STYLE = {"pass": "green", "fail": "bold red", "invalid": "yellow", "interrupted": "magenta"}


class Progress:
    """The run's event sink (`events.EventSink`): a live table on a terminal, a few plain lines otherwise."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live: Live | None = None
        self.start = time.time()
        self.deadline = self.start
        self.cases: dict[str, int] = defaultdict(int)
        self.bad: dict[str, int] = defaultdict(int)
        self.ops: dict[str, float] = defaultdict(float)
        self.busy_s: dict[str, float] = defaultdict(float)
        self.current: dict[str, str] = {}
        self.state: dict[str, str] = {}
        self.steps: dict[str, str] = {}  # a starting unit's start-up step, "preparing gemm_int8 3/7"
        self.units: list[str] = []
        self._last_plain = time.time()

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            # Live redraws by calling _table on its own thread, events or not: the clock and each
            # starting unit's wait advance while workers prepare their pools (issue 45: a busy host's
            # display sat at `0/120 s` for minutes).
            self.live = Live(
                console=self.console, get_renderable=self._table, refresh_per_second=2, transient=True
            )
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None

    def __call__(self, event: Event) -> None:
        self._apply(event)
        if self.live is None and time.time() - self._last_plain > PLAIN_PROGRESS_EVERY_S:
            self._last_plain = time.time()
            done = sum(self.cases.values())
            self.console.print(cell(f"[{self._elapsed()}] {done} cases done on {len(self.units)} units"))

    def _apply(self, event: Event) -> None:
        """Update the counters (and print what plain output shows) for one event."""
        if isinstance(event, RunNote):
            self.console.print(cell(event.text))  # before the run: shown above a live table too
        elif isinstance(event, RunStarted):
            self._on_run_started(event)
        elif isinstance(event, UnitPreparing):
            self.steps[event.unit] = f"{event.step} {event.number}/{event.steps}"
        elif isinstance(event, UnitReady):
            self.state[event.unit] = "running"
        elif isinstance(event, CaseStarted):
            self.current[event.unit] = event.workload
        elif isinstance(event, CaseFinished):
            self._on_case_finished(event)
        elif isinstance(event, UnitProblem):
            self.state[event.unit] = "invalid"
            if self.live is None:
                self.console.print(cell(f"{event.unit}: {event.reason}"))
        elif isinstance(event, PhaseChanged) and self.live is None:
            self.console.print(
                f"re-running disputed cases {', '.join(map(str, event.cases))} on the units involved"
            )

    def _on_run_started(self, event: RunStarted) -> None:
        self.units, self.deadline = list(event.units), event.deadline
        self.state = {u: "starting" for u in event.units}
        # The profile's name and the journal's path (beside --out) are typed by people: shown literally.
        self.console.print(
            cell(
                f"sdcscan run: profile {event.profile}, seed {event.seed} ({event.seed_source}), "
                f"budget {event.budget_s:g} s, {len(event.units)} units"
            )
        )
        self.console.print(cell(f"journal: {event.journal}"))

    def _on_case_finished(self, event: CaseFinished) -> None:
        if event.attempt:  # re-runs are not progress through the plan
            return
        unit, outcome = event.unit, event.outcome
        self.cases[unit] += 1
        self.ops[unit] += outcome.get("ops") or 0.0
        self.busy_s[unit] += outcome.get("seconds") or 0.0
        if outcome["status"] != "ok":
            self.bad[unit] += 1

    def _elapsed(self) -> str:
        return f"{time.time() - self.start:.0f}/{self.deadline - self.start:.0f} s"

    def _table(self) -> Table:
        table = Table(title=cell(f"sdcscan  {self._elapsed()}"), title_justify="left", box=None)
        for col in ("unit", "state", "cases", "bad", "workload", "GFLOP/s"):
            table.add_column(col, justify="right" if col in ("cases", "bad", "GFLOP/s") else "left")
        waited = f"{time.time() - self.start:.0f} s"
        for u in list(self.units):  # a copy: the events' thread may replace it meanwhile
            busy = self.busy_s.get(u, 0.0)
            rate = self.ops.get(u, 0.0) / busy / 1e9 if busy else 0.0
            bad = str(self.bad.get(u, 0) or "")
            state = self.state.get(u, "")
            table.add_row(
                cell(u),
                f"{self.steps.get(u, 'starting')}, {waited}" if state == "starting" else state,
                str(self.cases.get(u, 0)),
                bad,
                cell(self.current.get(u, "")),
                f"{rate:.1f}",
            )
        return table


def _fields(value: object) -> dict[str, Any]:
    """A report section as a mapping, or empty: the header reads fields validation leaves untyped
    (`host`, `software`), so a spoiled one shows as `None`, never a traceback."""
    return value if isinstance(value, dict) else {}


def render_header(report: Report, console: Console) -> None:
    """Which run a report is of, above its summary when it is read back (`sdcscan report`): host, profile,
    seed, when and how long, and the software. Shown literally (`cell`), one unwrapped line each: the
    report may come from anywhere, and logs grep these lines."""
    run, host, software = _fields(report["run"]), _fields(report.get("host")), _fields(report.get("software"))
    profile = _fields(run.get("profile"))
    duration = run.get("duration_s")
    took = f"{duration:.0f} s of " if isinstance(duration, (int, float)) else ""
    cases = f", at most {run['cases_per_unit']} cases a unit" if "cases_per_unit" in run else ""
    lines = (
        f"sdcscan report: host {host.get('hostname')}, profile {profile.get('name')}, seed {run.get('seed')} "
        f"({run.get('seed_source')}), started {run.get('started_at')}, {took}a {run.get('budget_s')} s budget"
        f"{cases}",
        f"software: sdcscan {_fields(report['tool']).get('version')}, torch {software.get('torch')}, CUDA "
        f"{software.get('cuda') or 'none'}, CPU ISA {software.get('cpu_capability')}; CPU {host.get('cpu_model')}",
    )
    for line in lines:
        console.print(cell(line), soft_wrap=True)


def render_summary(report: Report, console: Console, *, exit_line: bool = True) -> None:
    """The final table, the findings as sentences, and the last line `exit: <verdict>` (left to the
    caller with `exit_line=False`, when the exit depends on more than the verdict: an output failed).

    `report` is one `sdcscan.report.validate_report` accepted: every field read here has its type.
    Everything from the report is shown literally (`cell`, `literal`): it may come from another host.
    """
    table = Table(box=None)
    for col in ("unit", "verdict", "cases", "workloads", "mismatches", "reason"):
        table.add_column(col, justify="right" if col in ("cases", "mismatches") else "left")
    for u in report["units"]:
        table.add_row(
            cell(u["id"]),
            cell(u["verdict"], _STYLE.get(u["verdict"], "")),
            str(u["cases_run"]),
            cell(", ".join(u["workloads"])),
            str(u["mismatches"]),
            cell(u["reason"] or ""),
        )
    console.print(table)
    for line in proof_lines(report):
        console.print(cell(line))
    first_bits = _flipped_bits(report)
    for f in report["findings"]:
        unit = f"{f['unit']}: " if f["unit"] and not f["message"].startswith(f["unit"]) else ""
        console.print(cell(f"- {unit}{f['message']}"))
        if f["kind"] == "invariant" and f["unit"] in first_bits:
            console.print(cell(f"  first mismatches: {first_bits[f['unit']]}"))
        if f.get("next"):
            console.print(cell(f"  next: {f['next']}"))
    if exit_line:
        verdict = report["verdict"]
        console.print(Text("exit: ").append(cell(verdict, _STYLE.get(verdict, ""))))


def proof_lines(report: Report, *, max_units: int = MAX_PROOF_UNITS) -> list[str]:
    """What each unit's pass proves, per workload (`sdcscan.proof`); beyond `max_units` units, per workload
    the weakest passing unit's line (the largest bound) and how many units passed."""
    units = [u for u in report["units"] if u.get("checked")]
    if len(units) <= max_units:
        return [
            f"{u['id']} {w}: {_proof_sentence(c, u['verdict'])}"
            for u in units
            for w, c in sorted((u.get("checked") or {}).items())
        ]
    lines = []
    for w in sorted({w for u in units for w in u.get("checked") or {}}):
        held = [(u, (u.get("checked") or {})[w]) for u in units if w in (u.get("checked") or {})]
        passed = [(u, c) for u, c in held if u["verdict"] == "pass"]
        if passed:
            u, c = max(passed, key=lambda uc: (uc[1]["sdc_rate_bound"] or 0.0, -uc[1]["checked_ops"]))
            lines.append(
                f"{w}, weakest of {len(passed)} passing units ({u['id']}): {_proof_sentence(c, 'pass')}"
            )
    return lines


def _proof_sentence(c: Checked, verdict: str) -> str:
    """A bound counts only on a passing unit (a cluster report may fail a unit its rank's report passed)."""
    bound = c["sdc_rate_bound"] if verdict == "pass" else None
    return proof.sentence(c["checked_ops"], c["op"], c["evidence"], bound, verdict, detection=c["detection"])


def _flipped_bits(report: Report) -> dict[str, str]:
    """Per unit, the first few mismatch records in words: where, expected, actual, XOR mask."""
    out: dict[str, list[str]] = defaultdict(list)
    for m in report.get("mismatches", []):
        if len(out[m["unit"]]) < 3:
            mask = f", xor {m['mask']}" if m.get("mask") else ""
            out[m["unit"]].append(
                f"case {m['index']} {m['where']}: expected {m['expected']}, got {m['actual']}{mask}"
            )
    return {u: "; ".join(v) for u, v in out.items()}


def print_profiles(rows: list[dict[str, Any]], console: Console) -> None:
    table = Table(box=None)
    for col in ("profile", "budget", "seed", "workloads", "description"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            cell(r["name"]),
            f"{r['budget_s']:g} s",
            cell(r["seed"] or "week"),
            cell(", ".join(r["workloads"])),
            cell(r["description"]),
        )
    console.print(table)


def print_workloads(rows: list[dict[str, Any]], console: Console) -> None:
    table = Table(box=None)
    for col in ("workload", "quality", "evidence", "description"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            cell(r["name"]), cell(r["quality"]), cell(", ".join(r["evidence"])), cell(r["description"])
        )
    console.print(table)


def print_info(info: dict[str, Any], console: Console) -> None:
    host = info["host"]
    console.print(cell(f"host {host['hostname']}: {host['cpu_model']}, {host['logical_cpus']} logical CPUs"))
    console.print(
        cell(f"software: {', '.join(f'{k} {v}' for k, v in info['software'].items() if v and k != 'pins')}")
    )
    table = Table(box=None)
    for col in ("unit", "kind", "model", "part", "cohort"):
        table.add_column(col)
    for u in info["units"]:
        part = describe(u["kind"], u.get("part", {})) or "-"
        table.add_row(cell(u["id"]), cell(u["kind"]), cell(u["model"]), cell(part), cell(u["cohort"]))
    console.print(table)
