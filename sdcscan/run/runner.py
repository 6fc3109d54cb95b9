"""The parent of a run: starts one worker per unit, handles their messages, writes the journal.

Workers stream outcomes; the parent appends each to the journal as it arrives, so a crash or a
signal loses nothing that finished. A worker that dies or stops answering makes its unit invalid;
the other units go on. Each worker talks to the parent over its own pipe: nothing is shared between
workers, so killing one (it hung, or its set-up failed) can never block or corrupt another's
messages, as a kill in the middle of a write to one shared queue could. When a worker counts as
stuck is `watchdog.Watchdog`'s decision, and which re-run goes where and when is
`rerun_schedule.RerunSchedule`'s; this module applies both.
"""

from __future__ import annotations

import contextlib
import errno
import io
import multiprocessing as mp
import os
import pickle
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import NoReturn, cast

from sdcscan import interrupts
from sdcscan.background import host_pacing, priority
from sdcscan.errors import InputRefused
from sdcscan.events import (
    CaseFinished,
    CaseStarted,
    EventSink,
    PhaseChanged,
    UnitPreparing,
    UnitProblem,
    UnitReady,
)
from sdcscan.journal import Journal
from sdcscan.judgement.verdict import retest_plan
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, CaseOutcome, CaseResult, OutcomeRecord
from sdcscan.report.document import UnitPacing
from sdcscan.run.rerun_schedule import MAX_RETEST_CASES, RerunSchedule, retest_window
from sdcscan.run.watchdog import OVERRUN_S, CaseInFlight, Watchdog
from sdcscan.run.worker import Command, WorkerConfig, WorkerMessage, worker_main
from sdcscan.units import Unit, cohort_key
from sdcscan.workloads import SPECS

# Shutdown bound: budget + watchdog.OVERRUN_S (a unit still busy or not started then is stopped as
# hung) + the re-run window (rerun_schedule.retest_window) + STOP_S. The CLI's --help states it;
# keep the two in step.
STOP_S = 3.0
POLL_S = 0.1
SETTLE_S = 0.5  # how long the watchdog waits for a last message from a worker it is about to call hung


def end_bound_s(budget_s: float) -> float:
    """Seconds after its start by which a run of `budget_s` has ended: the shutdown bound above."""
    return budget_s + OVERRUN_S + retest_window(budget_s) + STOP_S


def worker_context() -> ForkServerContext | SpawnContext:
    """Forkserver with torch preloaded: one torch import for all workers instead of one each
    (seconds of CPU per unit on a 128-core host). Plain fork is unsafe once torch has started
    threads or CUDA; the fork server has done neither. Spawn where forkserver does not exist."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "sdcscan.run.worker"])
    return ctx


def warm_up_workers() -> None:
    """Start the fork server now, so its torch import overlaps the parent's own start-up work.

    It starts with SIGINT and SIGTERM blocked, and so do the workers it forks: a Ctrl-C or a stop sent
    to the whole process group reaches only the parent, which stops the workers itself. Idempotent.
    """
    if "forkserver" in mp.get_all_start_methods():
        from multiprocessing import forkserver, resource_tracker

        worker_context()
        # The fork server starts the resource tracker first, which unblocks both signals after
        # spawning it: start the tracker outside the block, so the server itself starts blocked.
        resource_tracker.ensure_running()
        with interrupts.blocked_in_children():
            forkserver.ensure_running()


def cannot_start(err: BaseException) -> str:
    """A unit's reason when its worker process could not be started, naming the limit to raise."""
    limits = {
        errno.EAGAIN: "the host's or its cgroup's process limit is reached (raise ulimit -u or pids.max)",
        errno.EMFILE: "this process has too many open files (raise ulimit -n)",
        errno.ENFILE: "the host has too many open files (raise fs.file-max)",
        errno.ENOMEM: "the host is out of memory",
    }
    why = limits.get(err.errno) if isinstance(err, OSError) and err.errno is not None else None
    if why is None and isinstance(err, EOFError | ConnectionError):
        why = "the fork server that starts workers died (its output above says why)"
    return f"could not start its worker: {why or f'{type(err).__name__}: {err}'}"


@dataclass
class UnitState:
    unit: Unit
    cohort: str = ""
    cohort_fields: dict[str, object] = field(default_factory=dict)
    proc: BaseProcess | None = None
    conn: Connection[Command, WorkerMessage] | None = None  # the parent's end of this worker's pipe
    ready: bool = False
    busy: bool = False
    notes: list[str] = field(default_factory=list)
    peaks: dict[str, object] = field(default_factory=dict)  # workload -> its plain-op peak (sdcscan.peaks)
    current: CaseInFlight | None = None
    problem: str | None = None
    late: str | None = None  # why a unit that started after the deadline ran no case
    step: tuple[str, int, int] | None = None  # the start-up step its worker began last: what, number, of
    results: list[CaseResult] = field(default_factory=list)
    pacing: UnitPacing = field(default_factory=UnitPacing)  # background mode: priority granted, time waited
    # The worker's run delay (and the time) when its start-up, its current case or its wait between
    # cases began: what it has waited for a CPU since is starvation, not a hang (any mode: a loaded
    # host starves a foreground worker too).
    delay_mark: float | None = None
    marked_at: float = 0.0
    retired: bool = False  # background: stopped at the budget's end while the host kept it from running
    starved: bool = False  # stopped by the watchdog while the host kept it off its CPU (`starvation_note`)
    not_screened: bool = False  # background: `late` says the host's own work kept it from running
    # A distributed run: what this rank saw of the world (Lockstep.summary).
    world: dict[str, object] = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        return self.problem is None and not self.retired


@dataclass
class RunResult:
    states: dict[str, UnitState]
    retests: dict[tuple[str, int], list[str | None]]
    outcomes: list[CaseOutcome]  # every outcome message, main pass and re-runs, in arrival order
    started: float
    ended: float
    interrupted: str | None = None  # "SIGINT" | "SIGTERM" | None: a signal stopped the run
    software: dict[str, object] = field(default_factory=dict)
    refused: str | None = None  # a unit proved an input of the user's unusable: the run is void (exit 2)


class _PlainData(pickle.Unpickler):
    """Unpickles builtins only. A worker's messages are tuples of str, int, float, list, dict and None;
    anything else (a torch type slipped into a dict) would import its module in this process - torch
    takes seconds and hundreds of MB, and a signal during that import leaves it half-imported."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise pickle.UnpicklingError(f"a worker message holds {module}.{name}, not plain data")


def _loads_plain(data: bytes) -> WorkerMessage:
    # Builtins only (_PlainData refuses anything else), sent by worker.py, whose sends mypy checks
    # against WorkerMessage: what arrives is one of those tuples.
    return cast(WorkerMessage, _PlainData(io.BytesIO(data)).load())


class Runner:
    """Run `configs` (one per unit) until `deadline`, then settle disputes with re-runs."""

    def __init__(
        self,
        configs: list[WorkerConfig],
        journal: Journal,
        on_event: EventSink,
        *,
        retest: int = 3,
        background: bool = False,
        grace_s: float = 0.0,
    ) -> None:
        self.ctx = worker_context()
        self.configs = {c.unit.id: c for c in configs}
        self.states = {c.unit.id: UnitState(c.unit) for c in configs}
        self.software: dict[str, object] = {}
        self.journal, self.emit = journal, on_event
        self.outcomes: list[CaseOutcome] = []
        self.retests: dict[tuple[str, int], list[str | None]] = {}
        self.watchdog = Watchdog()
        self.retest_count = retest
        self.background = background  # starved at the budget's end, a worker is then retired without blame
        # A distributed run: a worker may wait this long past the budget in a collective whose peer
        # stopped answering (the collective timeout, then the barrier that names the peer).
        self.grace_s = grace_s

    def run(self, deadline: float, command_started: float | None = None) -> RunResult:
        """Run the main pass and the re-runs, then stop the workers.

        The first SIGINT or SIGTERM (see `sdcscan.interrupts`) ends the run early; from the moment the
        workers are being stopped, further signals are only recorded, so stopping, judging and writing
        the report always finish.
        """
        started = time.time()
        self.command_started = command_started or started
        self.deadline = deadline
        interrupted = refused = None
        try:
            self._start_workers(deadline)
            self.watchdog.main_pass_started(spawned_at=self.spawned_at, deadline=deadline)
            self._pump(
                until=lambda: not any(s.busy or (s.alive and not s.ready) for s in self.states.values())
            )
            self.watchdog.main_pass_ended()
            self._retest(time.time() + retest_window(deadline - started))
        except interrupts.Interrupted as err:
            interrupted = err.name
        except InputRefused as err:  # no unit is judged with an input one of them has refused
            refused = str(err)
        except KeyboardInterrupt:  # a library caller that did not install sdcscan's handlers
            interrupted = "SIGINT"
        finally:
            signum = interrupts.hold()
            self._stop_workers()
        if interrupted is None and signum is not None:  # arrived while a message was being recorded
            interrupted = interrupts.signal_name(signum)
        return RunResult(
            self.states,
            self.retests,
            self.outcomes,
            started,
            time.time(),
            interrupted,
            self.software,
            refused,
        )

    def _start_workers(self, deadline: float) -> None:
        """Start one worker per unit and send each the plan.

        Signals stay live here: the first `Process.start` waits for the fork server's torch import
        (seconds), and a Ctrl-C then must stop the run, not be ignored. The workers have SIGINT and
        SIGTERM blocked (see `warm_up_workers`), so only this process reacts.
        """
        try:
            warm_up_workers()
        except (OSError, EOFError) as err:  # the fork server could not be started: no worker can be
            for state in self.states.values():
                self._fail(state, cannot_start(err))
            return
        for uid, state in self.states.items():
            try:
                self._start_worker(uid, state)
            except (OSError, EOFError) as err:  # a limit of this host, or the fork server died: not SDC
                state.proc = None
                self._fail(state, cannot_start(err))
                continue
            state.busy = True
            self._mark(state)
            self._send(state, ("plan", deadline))
        self.spawned_at = time.time()

    def _start_worker(self, uid: str, state: UnitState) -> None:
        parent_end, child_end = self.ctx.Pipe(duplex=True)
        state.conn = parent_end
        state.proc = self.ctx.Process(
            target=worker_main, args=(self.configs[uid], child_end), name=f"sdcscan-{uid}", daemon=True
        )
        try:
            state.proc.start()
        finally:
            child_end.close()  # the worker holds its own copy; ours would hide its exit (no EOF)

    def _retest(self, until: float) -> None:
        """Re-run failing cases on their units and on peers (see verdict.retest_plan), all units at once."""
        # A distributed case cannot run on one unit alone: its peers would never join the collective.
        results = [r for st in self.states.values() for r in st.results if not SPECS[r.workload].distributed]
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
                state.busy = True
                self._send(state, ("case", job.index, job.attempt))
            alive = {uid for uid, st in self.states.items() if st.alive}
            pending = schedule.waiting_on(alive, busy={uid for uid, st in self.states.items() if st.busy})
            if not pending:
                return
            self._pump(until=self._any_freed(pending), hard_stop=schedule.until)

    def _any_freed(self, units: list[str]) -> Callable[[], bool]:
        """A condition that holds once one of `units` is no longer busy (it finished its job, or died)."""
        return lambda: any(not self.states[u].busy for u in units)

    def _send(self, state: UnitState, msg: Command) -> None:
        """Send a command to a worker; one that is gone is the watchdog's to report (its process died)."""
        if state.conn is not None:
            with contextlib.suppress(OSError, ValueError):
                state.conn.send(msg)

    def _pump(self, until: Callable[[], bool], hard_stop: float | None = None) -> None:
        """Handle worker messages and the watchdog until `until()` holds.

        Every message already sent is handled before the watchdog looks: after this process was
        stalled (SIGSTOP, a loaded host), the workers' progress is read first, so their cases are
        not mistaken for hung ones.
        """
        while not until():
            if hard_stop is not None and time.time() > hard_stop:
                return
            live = [s for s in self.states.values() if s.alive and s.conn is not None]
            if live:
                # Ready units are handled in unit order, the order `wait` lists them in.
                ready = set(wait([s.conn for s in live if s.conn is not None], timeout=POLL_S))
                for state in live:
                    if state.conn in ready:
                        self._receive(state)
            else:  # every worker's pipe is closed: only the watchdog has something left to say
                time.sleep(POLL_S)
            self._watchdog()

    def _receive(self, state: UnitState, only: str | None = None) -> None:
        """Handle every message `state`'s worker has sent so far (of kind `only`, when given).

        Each message is recorded whole: a signal arriving meanwhile takes effect after it.
        """
        conn = state.conn
        if conn is None:
            return
        try:
            while conn.poll():
                msg = _loads_plain(conn.recv_bytes())
                if only is None or msg[0] == only:
                    with interrupts.deferred():
                        self._handle(msg)
        except (EOFError, OSError):
            # The worker exited or was killed; the watchdog reports a death it did not announce.
            conn.close()
            state.conn = None
        except pickle.UnpicklingError as err:  # a bug in sdcscan, not in the unit: say so, stop it
            conn.close()
            state.conn = None
            self._fail(state, f"internal error: {err}")

    def _handle(self, msg: WorkerMessage) -> None:
        uid = msg[1]
        state = self.states[uid]
        if not state.alive:
            return
        if msg[0] == "preparing":
            _, _, step, number, steps = msg
            state.step = (step, number, steps)
            self.emit(UnitPreparing(uid, step, number, steps))
        elif msg[0] == "ready":
            self._on_ready(state, *msg[2:])
        elif msg[0] == "start":
            # `since` is the worker's own clock: a parent that was stalled still measures the case
            # from when it really started.
            _, _, index, workload, _attempt, since = msg
            state.current = CaseInFlight(index, workload, since, state.unit.kind)
            self._mark(state)
            self.emit(CaseStarted(uid, index, workload))
        elif msg[0] == "outcome":
            self._record(state, *msg[2:])
        elif msg[0] == "idle":
            state.busy, state.current = False, None
        elif msg[0] == "pacing":
            state.pacing = msg[2].copy()
        elif msg[0] == "world":
            state.world = dict(msg[2])
        elif msg[0] == "withdrawn":  # a distributed case a lost peer cut short: no outcome, no blame
            state.current = None
            self._mark(state)
        elif msg[0] == "fatal":
            self._fail(state, msg[2], detail=msg[3])
        elif msg[0] == "refused":
            if any(o["status"] == STATUS_MISMATCH for o in self.outcomes):
                # A unit already miscomputed: voiding the run (exit 2) would hide it. This unit could
                # not run with the input it was given, and is judged as not having run (invalid).
                self._fail(state, f"setup refused: {msg[2]}")
            else:  # before any finding: the run is void, a usage error (exit 2)
                raise InputRefused(f"{uid}: {msg[2]}")

    def _on_ready(
        self,
        state: UnitState,
        notes: list[str],
        cohort_fields: dict[str, object],
        software: dict[str, object],
        peaks: Mapping[str, object] | None = None,
    ) -> None:
        state.ready, state.notes, state.peaks = True, list(notes), dict(peaks or {})
        state.cohort_fields, state.cohort = cohort_fields, cohort_key(cohort_fields)
        if time.time() >= self.deadline:
            state.late = (
                f"the budget ended before this unit was ready ({time.time() - self.command_started:.1f} s to start "
                "torch and prepare workloads on this host); use a longer --budget"
            )
        self.software = self.software or software
        # Cohort, notes and software go to the journal too: `report --from-journal` needs them.
        record = {
            "type": "unit",
            "unit": state.unit.id,
            "cohort": state.cohort,
            "notes": state.notes,
            "peaks": state.peaks,
        }
        self.journal.write({**record, "cohort_fields": cohort_fields, "software": software})
        self.emit(UnitReady(state.unit.id))

    def _record(self, state: UnitState, index: int, attempt: int, workload: str, out: OutcomeRecord) -> None:
        uid = state.unit.id
        state.current = None
        self._mark(state)
        record: CaseOutcome = {
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
            result = CaseResult.of(record)
            state.results.append(result)
            self.watchdog.case_finished(workload, result.seconds, state.unit.kind)
        else:
            self.retests.setdefault((uid, index), []).append(
                out["digest"] if out["status"] == STATUS_OK else None
            )
        self.emit(CaseFinished(uid, index, workload, attempt, out))

    def _watchdog(self) -> None:
        """Stop every live worker whose process died or that the watchdog policy says is stuck."""
        now = time.time()
        suspects = []
        for state in self.states.values():
            if not state.alive:
                continue
            if state.proc is not None and not state.proc.is_alive():
                self._receive(state)  # its last messages (the case it started) may still be unread
                if not state.alive:  # it said why before it exited (a failed set-up)
                    continue
                code = state.proc.exitcode
                self._fail(
                    state, f"worker process died (exit code {code}) during case {self._case_of(state)}"
                )
                continue
            reason = self.watchdog.check(
                now, ready=state.ready, busy=state.busy, current=state.current, grace_s=self._grace(state)
            )
            if reason is not None:
                suspects.append(state)
        if not suspects:
            return
        # A worker that blocked on a full pipe while this process was stalled sends what it finished only
        # once the pipe drains: one short wait for all the suspects together (bounded whatever their
        # number), and whoever speaks is judged again on the next pass.
        conns = [s.conn for s in suspects if s.conn is not None]
        spoke = set(wait(conns, timeout=SETTLE_S)) if conns else set()
        for state in suspects:
            if state.conn is not None and state.conn in spoke:
                self._receive(state)
            else:
                self._stop_if_stuck(state, time.time())

    def _stop_if_stuck(self, state: UnitState, now: float) -> None:
        """Judge a suspect with the time it waited for a CPU taken off (only now: this reads /proc), then
        retire it (background mode, starved at the budget's end) or stop it, saying when the host was
        busy."""
        starved = self._starved(state)
        if self.background and self._retire_if_starved(state, now, starved):
            return
        reason = self.watchdog.check(
            now,
            ready=state.ready,
            busy=state.busy,
            current=state.current,
            starved_s=starved,
            grace_s=self._grace(state),
        )
        if reason is not None:
            note = starvation_note(starved, now - state.marked_at)
            state.starved = bool(note)
            self._fail(state, reason + _step_note(state) + note)

    def _grace(self, state: UnitState) -> float:
        """A distributed run: past the budget, a worker in a distributed case or between cases (at the
        agreement) may be waiting on a peer that stopped answering, for at most the collective
        timeout and the barrier that names the peer; a per-unit case gets no such grace."""
        if not self.grace_s or (state.current is not None and not SPECS[state.current.workload].distributed):
            return 0.0
        return self.grace_s

    def _run_delay(self, state: UnitState) -> float | None:
        if state.proc is None or state.proc.pid is None:
            return None
        return priority.run_delay_s(state.proc.pid)

    def _mark(self, state: UnitState) -> None:
        """Start counting the worker's starvation afresh (start-up, case, or between)."""
        state.delay_mark, state.marked_at = self._run_delay(state), time.time()

    def _starved(self, state: UnitState) -> float:
        """Seconds the worker has waited for a CPU since its last mark: other work held its core (in
        background mode, SCHED_IDLE gives a busy core to anyone else first). Not a hang."""
        if state.delay_mark is None:
            return 0.0
        now = self._run_delay(state)
        return max(0.0, now - state.delay_mark) if now is not None else 0.0

    def _retire_if_starved(self, state: UnitState, now: float, starved: float) -> bool:
        """At the budget's end, stop without blame a worker that the host's own work kept off its CPU
        for most of its start-up or current case; its finished cases still count."""
        if not (state.busy and self.watchdog.overrun(now)):
            return False
        if starved < 0.5 * max(now - state.marked_at, 1e-9):
            return False
        doing = (
            f"case {state.current.index} ({state.current.workload})"
            if state.current
            else ("wait for an idle core" if state.ready else "start-up")
        )
        state.retired, state.busy, state.current, state.not_screened = True, False, None, True
        state.late = (
            f"{host_pacing.NOT_SCREENED}: other work on this host kept its {doing} waiting for the CPU "
            f"for {starved:.0f} s when the budget ended (background mode yields to everything else)"
        )
        if state.proc is not None and state.proc.is_alive():
            state.proc.kill()
        state.notes.append(state.late)  # its finished cases stand; the report says why it stopped
        self.journal.write({"type": "note", "unit": state.unit.id, "note": state.late})
        return True

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
        # Killing is safe at any moment: the worker shares no pipe or lock with any other.
        if state.proc is not None and state.proc.pid is not None and state.proc.is_alive():
            state.proc.kill()
        self.journal.write({"type": "problem", "unit": state.unit.id, "reason": reason, "detail": detail})
        self.emit(UnitProblem(state.unit.id, reason))

    def _stop_workers(self) -> None:
        """Tell every worker to stop, kill those that do not within STOP_S, and keep what they sent.

        Runs after a signal too, at any point of start-up: a worker whose process never started
        (the signal came while it was being spawned) has nothing to stop.
        """
        started = [(s, s.proc) for s in self.states.values() if s.proc is not None and s.proc.pid is not None]
        for state, _ in started:
            self._send(state, ("stop",))
        end = time.time() + STOP_S - 1.0
        for state, proc in started:
            # Read while waiting: a worker blocked on a full pipe could not otherwise finish.
            while proc.is_alive() and time.time() < end:
                self._receive(state, only="outcome")
                proc.join(timeout=POLL_S)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=1.0)
        for state in self.states.values():
            self._receive(state, only="outcome")  # nothing finished is lost
            if state.conn is not None:
                state.conn.close()
                state.conn = None


def starvation_note(starved_s: float, span_s: float) -> str:
    """What a stopped worker's reason adds when the host kept it off its CPU for a quarter of the time
    the watchdog judged, or more: the measured cause, and what to do."""
    if span_s <= 0 or starved_s < 0.25 * span_s:
        return ""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cpus = os.cpu_count() or 1
    share = max(0.0, 1.0 - starved_s / span_s)
    return (
        f" (host busy: load {load:.1f} on {cpus} CPUs; this worker waited {starved_s:.0f} s of {span_s:.0f} s "
        f"for a CPU and got at most {share:.0%} of one; run when the host is quieter or on fewer units)"
    )


def _step_note(state: UnitState) -> str:
    """Where a worker that never became ready was in its start-up: the step it began last, or ''."""
    if state.ready or state.step is None:
        return ""
    step, number, steps = state.step
    return f" (it was {step}, step {number} of {steps})"
