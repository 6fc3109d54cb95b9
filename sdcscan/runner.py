"""The parent of a run: starts one worker per unit, owns the deadline, watchdog, journal and re-runs.

Workers stream outcomes; the parent appends each to the journal as it arrives, so a crash or a
signal loses nothing that finished. A worker that dies or stops answering makes its unit invalid;
the other units go on.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import signal
import statistics
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sdcscan.journal import Journal
from sdcscan.units import Unit, cohort_key
from sdcscan.verdict import CaseResult, retest_plan
from sdcscan.worker import WorkerConfig, worker_main

CASE_TIME_WINDOW = 512  # case times per workload the watchdog's median looks at
READY_TIMEOUT_S = 180.0  # importing torch and preparing workloads on a loaded host
WATCHDOG_FLOOR_S = 5.0  # never call a case hung sooner than this
WATCHDOG_FACTOR = 10.0  # ... or sooner than this many times the workload's median case time
WATCHDOG_FIRST_S = 60.0  # before any case of a workload has finished anywhere
# Shutdown bound: budget + OVERRUN_S (a unit still busy or not started then is stopped as hung) +
# the re-run window + STOP_S. The CLI's --help states it; keep the two in step.
OVERRUN_S = 10.0
RETEST_MIN_S, RETEST_MAX_S, RETEST_SHARE = 5.0, 30.0, 0.05  # re-run window: 5% of the budget, 5..30 s
MAX_RETEST_CASES = 3  # failing cases re-run per unit: enough to classify, bounded in time
STOP_S = 3.0
POLL_S = 0.1


def worker_context() -> Any:
    """Forkserver with torch preloaded: one torch import for all workers instead of one each
    (seconds of CPU per unit on a 128-core host). Plain fork is unsafe once torch has started
    threads or CUDA; the fork server has done neither. Spawn where forkserver does not exist."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "sdcscan.worker"])
    return ctx


def warm_up_workers() -> None:
    """Start the fork server now, so its torch import overlaps the parent's own start-up work."""
    if "forkserver" in mp.get_all_start_methods():
        from multiprocessing import forkserver

        worker_context()
        forkserver.ensure_running()


class Terminated(BaseException):
    """Raised in the parent by the SIGTERM handler, like KeyboardInterrupt is for SIGINT."""


Event = Callable[..., None]


@dataclass
class UnitState:
    unit: Unit
    cohort: str = ""
    cohort_fields: dict[str, Any] = field(default_factory=dict)
    proc: Any = None
    inbox: Any = None
    ready: bool = False
    busy: bool = False
    notes: list[str] = field(default_factory=list)
    current: tuple[int, str, float] | None = None  # (case index, workload, started at)
    problem: str | None = None
    late: str | None = None  # why a unit that started after the deadline ran no case
    results: list[CaseResult] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.problem is None


@dataclass
class RunResult:
    states: dict[str, UnitState]
    retests: dict[tuple[str, int], list[str | None]]
    outcomes: list[dict[str, Any]]  # every outcome message, main pass and re-runs, in arrival order
    started: float
    ended: float
    interrupted: str | None = None  # "SIGINT" | "SIGTERM" | None
    software: dict[str, Any] = field(default_factory=dict)


class Runner:
    """Run `configs` (one per unit) until `deadline`, then settle disputes with re-runs."""

    def __init__(self, configs: list[WorkerConfig], journal: Journal, on_event: Event, *, retest: int = 3):
        self.ctx = worker_context()
        self.outbox = self.ctx.Queue()
        self.configs = {c.unit.id: c for c in configs}
        self.states = {c.unit.id: UnitState(c.unit) for c in configs}
        self.software: dict[str, Any] = {}
        self.journal, self.emit = journal, on_event
        self.outcomes: list[dict[str, Any]] = []
        self.retests: dict[tuple[str, int], list[str | None]] = {}
        # Recent case times per workload, for the watchdog: a bounded window, because the watchdog runs
        # on every message and a 10,000 s burn-in on 128 units records over a million cases.
        self.case_times: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=CASE_TIME_WINDOW))
        self.retest_count = retest
        self.overrun_at: float | None = (
            None  # main pass only: a unit still busy after this is stopped as hung
        )

    def run(self, deadline: float, command_started: float | None = None) -> RunResult:
        started = time.time()
        self.command_started = command_started or started
        self.deadline = deadline
        interrupted = None
        try:
            self.overrun_at = deadline + OVERRUN_S
            self._start_workers(deadline)
            self._pump(
                until=lambda: not any(s.busy or (s.alive and not s.ready) for s in self.states.values())
            )
            self.overrun_at = None
            self._retest(time.time() + retest_window(deadline - started))
        except KeyboardInterrupt:
            interrupted = "SIGINT"
        except Terminated:
            interrupted = "SIGTERM"
        finally:
            self._stop_workers()
        return RunResult(
            self.states, self.retests, self.outcomes, started, time.time(), interrupted, self.software
        )

    def _start_workers(self, deadline: float) -> None:
        # Children inherit an ignored SIGINT across exec, so Ctrl-C reaches only the parent, which
        # coordinates the shutdown (and no half-started child prints a traceback).
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self._spawn_all(deadline)
        finally:
            signal.signal(signal.SIGINT, previous)

    def _spawn_all(self, deadline: float) -> None:
        for uid, state in self.states.items():
            state.inbox = self.ctx.Queue()
            state.proc = self.ctx.Process(
                target=worker_main,
                args=(self.configs[uid], state.inbox, self.outbox),
                name=f"sdcscan-{uid}",
                daemon=True,
            )
            state.proc.start()
            state.inbox.put(("plan", deadline))
            state.busy = True
        self.spawned_at = time.time()

    def _retest(self, until: float) -> None:
        """Re-run failing cases on their units and on peers (see verdict.retest_plan), all units at once."""
        results = [r for st in self.states.values() for r in st.results]
        cohorts = {uid: st.cohort for uid, st in self.states.items() if st.alive}
        todo: dict[str, deque[int]] = defaultdict(deque)
        for uid, index in retest_plan(cohorts, results, reruns=self.retest_count, max_cases=MAX_RETEST_CASES):
            todo[uid].append(index)
        if not todo:
            return
        self.emit("phase", name="retest", cases=sorted({i for q in todo.values() for i in q}))
        attempts: dict[tuple[str, int], int] = defaultdict(int)
        while time.time() < until:
            for uid, jobs in todo.items():
                state = self.states[uid]
                if state.alive and not state.busy and jobs:
                    index = jobs.popleft()
                    attempts[(uid, index)] += 1  # a new attempt number: injections are drawn afresh
                    state.inbox.put(("case", index, attempts[(uid, index)]))
                    state.busy = True
            pending = [u for u, q in todo.items() if self.states[u].alive and (q or self.states[u].busy)]
            if not pending:
                return
            self._pump(
                until=lambda p=pending: any(not self.states[u].busy for u in p),  # a unit freed (or died)
                hard_stop=until,
            )

    def _pump(self, until: Callable[[], bool], hard_stop: float | None = None) -> None:
        """Handle worker messages and the watchdog until `until()` holds."""
        while not until():
            if hard_stop is not None and time.time() > hard_stop:
                return
            try:
                msg = self.outbox.get(timeout=POLL_S)
            except queue.Empty:
                msg = None
            if msg is not None:
                self._handle(msg)
            self._watchdog()

    def _handle(self, msg: tuple[Any, ...]) -> None:
        kind, uid = msg[0], msg[1]
        state = self.states[uid]
        if not state.alive:
            return
        if kind == "ready":
            self._on_ready(state, *msg[2:])
        elif kind == "start":
            _, _, index, workload, _attempt = msg
            state.current = (index, workload, time.time())
            self.emit("case_start", unit=uid, index=index, workload=workload)
        elif kind == "outcome":
            self._record(state, *msg[2:])
        elif kind == "idle":
            state.busy, state.current = False, None
        elif kind == "fatal":
            self._fail(state, msg[2], detail=msg[3])

    def _on_ready(
        self, state: UnitState, notes: list[str], cohort_fields: dict[str, Any], software: dict[str, Any]
    ) -> None:
        state.ready, state.notes = True, list(notes)
        state.cohort_fields, state.cohort = cohort_fields, cohort_key(cohort_fields)
        if time.time() >= self.deadline:
            state.late = (
                f"the budget ended before this unit was ready ({time.time() - self.command_started:.1f} s to start "
                "torch and prepare workloads on this host); use a longer --budget"
            )
        self.software = self.software or software
        # Cohort, notes and software go to the journal too: `report --from-journal` needs them.
        record = {"type": "unit", "unit": state.unit.id, "cohort": state.cohort, "notes": state.notes}
        self.journal.write({**record, "cohort_fields": cohort_fields, "software": software})
        self.emit("ready", unit=state.unit.id)

    def _record(self, state: UnitState, index: int, attempt: int, workload: str, out: dict[str, Any]) -> None:
        uid = state.unit.id
        state.current = None
        record = {
            "type": "case",
            "unit": uid,
            "index": index,
            "attempt": attempt,
            "workload": workload,
            **out,
        }
        self.journal.write(record)
        self.outcomes.append(record)
        if attempt == 0:
            result = CaseResult(
                uid, index, workload, out["status"], out["digest"], out["seconds"], out.get("error")
            )
            state.results.append(result)
            self.case_times[workload].append(result.seconds)
        else:
            self.retests.setdefault((uid, index), []).append(out["digest"] if out["status"] == "ok" else None)
        self.emit("case", unit=uid, index=index, workload=workload, attempt=attempt, outcome=out)

    def _watchdog(self) -> None:
        now = time.time()
        for state in self.states.values():
            if not state.alive:
                continue
            if state.proc is not None and not state.proc.is_alive():
                self._drain()  # its last messages (the case it started) may still be queued
                code = state.proc.exitcode
                self._fail(
                    state, f"worker process died (exit code {code}) during case {self._case_of(state)}"
                )
            elif not state.ready and (now - self.spawned_at > READY_TIMEOUT_S or self._overrun(now)):
                why = " and the budget ended" if self._overrun(now) else ""
                self._fail(state, f"worker did not start within {now - self.spawned_at:.0f} s{why}")
            elif state.current is not None:
                index, workload, since = state.current
                limit = self._case_limit(workload)
                if now - since > limit or self._overrun(now):
                    self._fail(
                        state,
                        f"case {index} ({workload}) hung: no result after {now - since:.0f} s; worker killed",
                    )
            elif state.busy and self._overrun(now):  # stuck outside any case, e.g. sending its results
                self._fail(
                    state, f"worker did not finish its plan {OVERRUN_S:.0f} s after the budget ended; killed"
                )

    def _overrun(self, now: float) -> bool:
        """The main pass runs past the budget by more than OVERRUN_S: whoever is still busy is stuck."""
        return self.overrun_at is not None and now > self.overrun_at

    def _case_limit(self, workload: str) -> float:
        times = self.case_times.get(workload)
        if not times:
            return WATCHDOG_FIRST_S
        return max(WATCHDOG_FLOOR_S, WATCHDOG_FACTOR * statistics.median(times))

    def _case_of(self, state: UnitState) -> str:
        if state.current:
            return f"{state.current[0]} ({state.current[1]})"
        return (
            "none (between cases)"
            if state.ready
            else "none (while starting up; its last messages may be lost)"
        )

    def _fail(self, state: UnitState, reason: str, detail: str | None = None) -> None:
        state.problem, state.busy = reason, False
        if state.proc is not None and state.proc.is_alive():
            state.proc.kill()
        self.journal.write({"type": "problem", "unit": state.unit.id, "reason": reason, "detail": detail})
        self.emit("problem", unit=state.unit.id, reason=reason)

    def _stop_workers(self) -> None:
        for state in self.states.values():
            if state.proc is not None and state.proc.is_alive():
                with contextlib.suppress(OSError, ValueError):
                    state.inbox.put(("stop",))
        end = time.time() + STOP_S - 1.0
        for state in self.states.values():
            if state.proc is not None:
                state.proc.join(timeout=max(0.0, end - time.time()))
                if state.proc.is_alive():
                    state.proc.kill()
                    state.proc.join(timeout=1.0)
        self._drain(only="outcome")  # outcomes that arrived while stopping: nothing finished is lost

    def _drain(self, only: str | None = None) -> None:
        """Handle every message already queued (of kind `only`, when given) without waiting."""
        while True:
            try:
                msg = self.outbox.get_nowait()
            except (queue.Empty, OSError, ValueError):
                break
            if only is None or msg[0] == only:
                self._handle(msg)


def retest_window(budget_s: float) -> float:
    """Seconds allowed for re-runs after the main pass: a share of the budget, within bounds."""
    return min(RETEST_MAX_S, max(RETEST_MIN_S, RETEST_SHARE * budget_s))
