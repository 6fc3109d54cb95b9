"""The parent of a run: starts one worker per unit, handles their messages, writes the journal.

Workers stream outcomes; the parent appends each to the journal as it arrives, so a crash or a
signal loses nothing that finished. A worker that dies or stops answering makes its unit invalid;
the other units go on. When a worker counts as stuck is `watchdog.Watchdog`'s decision, and which
re-run goes where and when is `rerun_schedule.RerunSchedule`'s; this module applies both.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sdcscan.events import CaseFinished, CaseStarted, EventSink, PhaseChanged, UnitProblem, UnitReady
from sdcscan.evidence import CaseResult
from sdcscan.journal import Journal
from sdcscan.outcomes import STATUS_OK
from sdcscan.rerun_schedule import MAX_RETEST_CASES, RerunSchedule, retest_window
from sdcscan.units import Unit, cohort_key
from sdcscan.verdict import retest_plan
from sdcscan.watchdog import CaseInFlight, Watchdog
from sdcscan.worker import WorkerConfig, worker_main

# Shutdown bound: budget + watchdog.OVERRUN_S (a unit still busy or not started then is stopped as
# hung) + the re-run window (rerun_schedule.retest_window) + STOP_S. The CLI's --help states it;
# keep the two in step.
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
    current: CaseInFlight | None = None
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

    def __init__(
        self, configs: list[WorkerConfig], journal: Journal, on_event: EventSink, *, retest: int = 3
    ) -> None:
        self.ctx = worker_context()
        self.outbox = self.ctx.Queue()
        self.configs = {c.unit.id: c for c in configs}
        self.states = {c.unit.id: UnitState(c.unit) for c in configs}
        self.software: dict[str, Any] = {}
        self.journal, self.emit = journal, on_event
        self.outcomes: list[dict[str, Any]] = []
        self.retests: dict[tuple[str, int], list[str | None]] = {}
        self.watchdog = Watchdog()
        self.retest_count = retest

    def run(self, deadline: float, command_started: float | None = None) -> RunResult:
        started = time.time()
        self.command_started = command_started or started
        self.deadline = deadline
        interrupted = None
        try:
            self._start_workers(deadline)
            self.watchdog.main_pass_started(spawned_at=self.spawned_at, deadline=deadline)
            self._pump(
                until=lambda: not any(s.busy or (s.alive and not s.ready) for s in self.states.values())
            )
            self.watchdog.main_pass_ended()
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
        jobs = retest_plan(cohorts, results, reruns=self.retest_count, max_cases=MAX_RETEST_CASES)
        schedule = RerunSchedule(jobs, until=until)
        if not schedule.cases:
            return
        self.emit(PhaseChanged("retest", schedule.cases))
        while schedule.is_open(time.time()):
            free = {uid for uid, st in self.states.items() if st.alive and not st.busy}
            for job in schedule.assign(free):
                state = self.states[job.unit]
                state.inbox.put(("case", job.index, job.attempt))
                state.busy = True
            alive = {uid for uid, st in self.states.items() if st.alive}
            pending = schedule.waiting_on(alive, busy={uid for uid, st in self.states.items() if st.busy})
            if not pending:
                return
            self._pump(until=self._any_freed(pending), hard_stop=schedule.until)

    def _any_freed(self, units: list[str]) -> Callable[[], bool]:
        """A condition that holds once one of `units` is no longer busy (it finished its job, or died)."""
        return lambda: any(not self.states[u].busy for u in units)

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
            state.current = CaseInFlight(index, workload, time.time())
            self.emit(CaseStarted(uid, index, workload))
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
        self.emit(UnitReady(state.unit.id))

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
            self.watchdog.case_finished(workload, result.seconds)
        else:
            self.retests.setdefault((uid, index), []).append(
                out["digest"] if out["status"] == STATUS_OK else None
            )
        self.emit(CaseFinished(uid, index, workload, attempt, out))

    def _watchdog(self) -> None:
        """Stop every live worker whose process died or that the watchdog policy says is stuck."""
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
                continue
            reason = self.watchdog.check(now, ready=state.ready, busy=state.busy, current=state.current)
            if reason is not None:
                self._fail(state, reason)

    def _case_of(self, state: UnitState) -> str:
        if state.current:
            return f"{state.current.index} ({state.current.workload})"
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
        self.emit(UnitProblem(state.unit.id, reason))

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
