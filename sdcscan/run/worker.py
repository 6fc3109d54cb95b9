"""The worker process of one unit: pin, configure torch for determinism, prepare workloads, run cases.

Workers compute, time their own cases and stream every outcome to the parent, which writes the
journal and runs the watchdog. The parent sets the deadline and sends it with the plan; the worker
compares its own clock with it before each case and starts no case it expects to end after it (from
a running average of that workload's case times). A worker still busy well after the deadline is
stopped by the parent's watchdog (`watchdog.OVERRUN_S`). Messages are plain tuples of builtins so
they pickle cheaply; they travel over this worker's own pipe to the parent (commands come back on it),
and a case's start carries the worker's clock so a stalled parent still times the case correctly.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Literal, TypeAlias

from sdcscan import faults
from sdcscan.background import idle_gates, priority
from sdcscan.collectives.env import RankSetup
from sdcscan.errors import InputRefused
from sdcscan.outcomes import CONSENSUS, Case, Outcome, OutcomeRecord
from sdcscan.profile import Profile
from sdcscan.report.document import UnitPacing
from sdcscan.torch_setup import configure_torch
from sdcscan.units import Unit, unit_class
from sdcscan.workloads import SPECS

if TYPE_CHECKING:  # the parent imports this module, and must not import torch
    import torch

    from sdcscan.collectives.lockstep import Lockstep
    from sdcscan.peaks.plain_ops import WorkloadPeak
    from sdcscan.workloads.base import Context, Workload

HANG_SLEEP_S = 3600.0

# The parent's commands to a worker (sdcscan.run.runner), over the worker's pipe.
Command: TypeAlias = (
    tuple[Literal["plan"], float]  # run cases until this deadline (epoch seconds)
    | tuple[Literal["case"], int, int]  # run case `index` as `attempt` (a re-run)
    | tuple[Literal["stop"]]
)
# A worker's messages to the parent; the second field is always the unit's id. Builtins only: the
# parent unpickles nothing else (runner._PlainData).
WorkerMessage: TypeAlias = (
    # notes, cohort fields, software versions, workload -> its plain-op peak (peaks.rates.workload_peak)
    tuple[Literal["ready"], str, list[str], dict[str, object], dict[str, object], Mapping[str, object]]
    | tuple[Literal["fatal"], str, str, str]  # why set-up failed, and its traceback
    | tuple[Literal["refused"], str, str]  # an input of the user's this unit proved unusable (exit 2)
    | tuple[Literal["preparing"], str, str, int, int]  # the start-up step begun, its number, how many
    | tuple[Literal["start"], str, int, str, int, float]  # index, workload, attempt, the worker's clock
    | tuple[Literal["outcome"], str, int, int, str, OutcomeRecord]  # index, attempt, workload, outcome
    | tuple[Literal["idle"], str]
    | tuple[Literal["withdrawn"], str, int]  # index: a distributed case a lost peer cut short
    | tuple[Literal["pacing"], str, UnitPacing]
    | tuple[Literal["world"], str, dict[str, object]]  # Lockstep.summary(): what this rank saw of the world
)


@dataclass(frozen=True)
class WorkerConfig:
    unit: Unit
    profile: Profile
    seed: int
    threads: int
    injections: tuple[faults.Injection, ...] = ()
    param_overrides: dict[str, dict[str, object]] = field(default_factory=dict)
    run_pid: int = field(default_factory=os.getpid)  # the sdcscan parent: built there, so its pid
    background: bool = False  # Ripple mode: lowest priority, cases only in the unit's idle gaps
    rank: RankSetup | None = None  # a distributed run: this worker is one rank of the world
    cases: int | None = None  # `--cases`: stop after cases 0..cases-1 (None: run until the deadline)


def worker_main(cfg: WorkerConfig, conn: Connection[WorkerMessage, Command]) -> None:
    """Entry point of the spawned process. Never raises: problems become messages.

    Args:
        cfg: what to run.
        conn: this worker's end of its pipe to the parent: commands in, messages out.
    """
    # The parent coordinates shutdown on Ctrl-C and SIGTERM (a process-group kill from systemd
    # reaches every worker too); it stops or kills the workers itself.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    _die_with_parent(cfg.run_pid)
    # Before torch starts a thread: Linux keeps the scheduling policy per thread, and new ones inherit it.
    granted = priority.lower_priority(idle_scheduler=True) if cfg.background else None
    uid = cfg.unit.id
    try:
        try:
            engine = _Engine(cfg, conn)
        except InputRefused as err:
            conn.send(("refused", uid, str(err)))
            return
        except Exception as err:
            conn.send(
                ("fatal", uid, f"setup failed: {type(err).__name__}: {err}", traceback.format_exc(limit=4))
            )
            return
        conn.send(("ready", uid, engine.notes, engine.cohort_fields, engine.software, engine.peaks))
        if granted is not None:
            engine.pacing["priority"] = granted
            engine.send_pacing()
        while True:
            msg = conn.recv()
            if msg[0] == "plan":
                if engine.run_plan(deadline=msg[1]) == "stopped":
                    return
                conn.send(("idle", uid))
            elif msg[0] == "case":
                engine.run_case(msg[1], attempt=msg[2])
                conn.send(("idle", uid))
            else:
                return
    except (EOFError, OSError):
        return  # the parent is gone or closed the pipe: nobody is left to report to


class _Engine:
    def __init__(self, cfg: WorkerConfig, conn: Connection[WorkerMessage, Command]) -> None:
        self.cfg, self.conn = cfg, conn
        # Start-up steps: torch, each workload's prepare, the plain-op peaks. The parent shows the step
        # begun and names it if the start-up runs out of time (issue 45).
        steps = len(cfg.profile.workloads) + 2
        conn.send(("preparing", cfg.unit.id, "starting torch", 1, steps))
        torch = configure_torch(cfg.unit, cfg.threads)
        from sdcscan.run.plan import Plan
        from sdcscan.workloads import load
        from sdcscan.workloads.base import Context

        device = torch.device(cfg.unit.id if cfg.unit.kind == "cuda" else "cpu")
        self.plan = Plan(cfg.profile, cfg.seed, cfg.unit.kind, unit_class(cfg.unit))
        self.workloads: dict[str, Workload] = {}
        self.contexts: dict[str, Context] = {}
        self.notes: list[str] = []
        from sdcscan.checks import keyed_sums

        why = keyed_sums.choose(device)  # before any case: its start-up trial waits for the device
        if why:
            self.notes.append(why)
        for number, spec in enumerate(cfg.profile.workloads, start=2):
            conn.send(("preparing", cfg.unit.id, f"preparing {spec.name}", number, steps))
            params = {
                **spec.params_for(cfg.unit.kind, self.plan.unit_class),
                **cfg.param_overrides.get(spec.name, {}),
            }
            ctx = Context(unit=cfg.unit.id, device=device, run_seed=cfg.seed, params=params)
            workload = load(spec.name)(params)
            workload.prepare(ctx)
            self.workloads[spec.name], self.contexts[spec.name] = workload, ctx
            self.notes.extend(ctx.notes)
        # A distributed workload's rate is its bus bandwidth (in its case details), not a plain op's.
        local = {name: ctx.params for name, ctx in self.contexts.items() if not SPECS[name].distributed}
        conn.send(("preparing", cfg.unit.id, "measuring plain-op peaks", steps, steps))
        self.peaks = _measure_peaks(device, local, self.notes)
        self.mean_s: dict[str, float] = {}
        # The worker states its own cohort: it is the process whose threads, pins and kernels count.
        from sdcscan.units import cohort_fields, software_versions

        self.cohort_fields = cohort_fields(cfg.unit, cfg.threads)
        self.software = software_versions()
        self.gate = _idle_gate(cfg.unit) if cfg.background else None
        self.lockstep = (
            _join_world(cfg.rank, device, self.contexts, self.cohort_fields, self.plan.key)
            if cfg.rank
            else None
        )
        if self.lockstep is not None:
            self.notes.extend(self.lockstep.notes)
        self.pacing: UnitPacing = {"gate": self.gate is not None, "waited_s": 0.0, "waits": 0}
        self.stopped = False

    def run_plan(self, deadline: float) -> str:
        """Cases 0, 1, 2, … until the next one would likely end after `deadline` (by this process's clock),
        or `cfg.cases` of them ran, or the parent says stop (it was interrupted): then within one case,
        not at the deadline.

        Returns:
            "done" at the deadline or the case count, "stopped" when told to stop.
        """
        index = 0
        while not self.stop_requested():
            if self.cfg.cases is not None and index >= self.cfg.cases:
                return "done"  # never distributed (refused by `sdcscan run`): no peer waits on this rank
            workload = self.plan.workload_of(index)
            expected = self.mean_s.get(workload, 0.0)
            lockstep_case = self.lockstep is not None and workload in self.lockstep.distributed
            if self.lockstep is not None and not self.lockstep.may_run(workload, deadline - expected):
                if self.lockstep.distributed >= set(self.workloads):  # nothing of its own left to run
                    self._leave_world(tell_peers=False)
                    return "done"
                index += 1  # distributed cases have stopped (agreed, or the world broke): skip theirs
                continue
            # Once every rank agreed to run a distributed case, it runs here too, even if waiting for
            # the agreement took this rank past its latest start: the peers are already in its
            # collectives, and a rank that left now would meet them with another collective.
            if not lockstep_case and self.gate is not None and not self._wait_for_idle(deadline - expected):
                return "stopped" if self.stopped else "done"
            if not lockstep_case and time.time() + expected > deadline:
                self._leave_world(tell_peers=True)
                return "done"
            seconds = self.run_case(index, attempt=0)
            n = index // max(1, len(self.workloads)) + 1
            self.mean_s[workload] = expected + (seconds - expected) / min(n, 10)
            index += 1
        self._leave_world(tell_peers=False)  # interrupted: the peers are stopping too
        return "stopped"

    def _leave_world(self, *, tell_peers: bool) -> None:
        """A distributed run's plan ends: at the budget's end, tell the peers (at their next
        distributed case) that this rank stops; either way, report what this rank saw of the world."""
        if self.lockstep is None:
            return
        if tell_peers:
            self.lockstep.leave()
        self.conn.send(("world", self.cfg.unit.id, self.lockstep.summary()))

    def stop_requested(self) -> bool:
        """The parent sent "stop" (the only command it sends while a plan runs). Sticky once seen."""
        if not self.stopped and self.conn.poll():
            self.conn.recv()
            self.stopped = True
        return self.stopped

    def _wait_for_idle(self, deadline: float) -> bool:
        """Background mode: hold the next case while other work uses this unit; say how long it waited."""
        assert self.gate is not None
        waits = self.gate.waits
        idle = self.gate.wait_until_idle(deadline, self.stop_requested)
        if self.gate.waits != waits:
            self.pacing["waited_s"], self.pacing["waits"] = round(self.gate.waited_s, 3), self.gate.waits
            self.send_pacing()
        return idle

    def send_pacing(self) -> None:
        self.conn.send(("pacing", self.cfg.unit.id, self.pacing.copy()))

    def run_case(self, index: int, attempt: int) -> float:
        from sdcscan.outcomes import STATUS_ERROR, Outcome

        case = self.plan.case(index)
        workload, ctx = self.workloads[case.workload], self.contexts[case.workload]
        uid = self.cfg.unit.id
        self.conn.send(("start", uid, index, case.workload, attempt, time.time()))
        ctx.begin_case(self._armed(case, workload, attempt))
        start = time.perf_counter()
        try:
            outcome = workload.run(ctx, case)
        except Exception as err:
            if self.lockstep is not None and self.lockstep.lost_peer(case.workload, err):
                # A peer died or stopped answering: not this unit's fault, and nothing to judge.
                self.conn.send(("world", uid, self.lockstep.summary()))
                self.conn.send(("withdrawn", uid, index))
                return time.perf_counter() - start
            outcome = Outcome(status=STATUS_ERROR, digest=None, error=f"{type(err).__name__}: {err}")
        outcome.seconds = time.perf_counter() - start
        outcome.phases, outcome.injected = dict(ctx.phases), ctx.injected
        plain = self._plain_rate(case)
        if plain is not None:  # the plain op of this case's own dtype and shape: its efficiency's measure
            outcome.detail = {**outcome.detail, "plain_ops_per_s": plain}
        if self.lockstep is not None:
            self.lockstep.record(index, case.workload, outcome)
        self.conn.send(("outcome", uid, index, attempt, case.workload, _outcome_dict(outcome)))
        return outcome.seconds

    def _plain_rate(self, case: Case) -> float | None:
        """The unit's rate for the plain op behind this case (its slot's dtype, shape or bit width), or
        None where the workload's peak was not measured."""
        peak = self.peaks.get(case.workload)
        if not peak:
            return None
        from sdcscan.peaks.plain_ops import case_peak

        return case_peak(case.workload, peak, case.occurrence)

    def _armed(self, case: Case, workload: Workload, attempt: int) -> faults.FaultSpec | None:
        """Apply process faults now; return the data fault to arm for this case, if any strikes."""
        armed = None
        for inj in self.cfg.injections:
            if not faults.draws(inj, case.seed, attempt):
                continue
            if inj.kind == "hang":
                while True:  # a wedged unit: never returns; the parent's watchdog must catch it
                    time.sleep(HANG_SLEEP_S)
            if inj.kind == "crash":
                # Sends are synchronous: this case's start is already in the pipe, so the parent can
                # say which case the worker died in.
                os.kill(os.getpid(), signal.SIGKILL)
            site = faults.site_for(inj.kind, workload.spec.fault_sites)
            armed = faults.FaultSpec(inj.kind, site, seed=case.seed ^ (attempt + 1))
        return armed


def _join_world(
    setup: RankSetup,
    device: torch.device,
    contexts: dict[str, Context],
    cohort_fields: dict[str, object],
    plan: str,
) -> Lockstep:
    """A distributed run: join the world (after prepare, so the join absorbs the ranks' start-up skew)."""
    from sdcscan.collectives.lockstep import Lockstep

    distributed = {name for name in contexts if SPECS[name].distributed}
    comparing = {name for name in distributed if CONSENSUS in SPECS[name].evidence}
    return Lockstep.join(setup, device, contexts, distributed, cohort_fields, plan, comparing)


def _idle_gate(unit: Unit) -> idle_gates.CoreIdleGate | idle_gates.GpuIdleGate | None:
    """The unit's pacing gate in background mode: its core's idle share, or its GPU's other processes."""
    if unit.kind == "cpu":
        return idle_gates.CoreIdleGate(unit.index)
    return idle_gates.gpu_gate(unit.pci) if unit.pci else None


def _measure_peaks(
    device: torch.device, workloads: Mapping[str, Mapping[str, object]], notes: list[str]
) -> dict[str, WorkloadPeak]:
    """Each workload's plain-op peak, once per unit after prepare (the report's efficiency).

    Never raises: a peak that cannot be measured costs the efficiency figure and adds a note; the
    unit's cases run regardless.
    """
    try:
        from sdcscan.peaks.rates import unit_peaks

        peaks, found = unit_peaks(device, workloads)
    except Exception as err:
        peaks, found = {}, [f"peaks: not measured ({type(err).__name__}: {err}); efficiency is not reported"]
    notes.extend(n for n in found if n not in notes)
    return peaks


def _die_with_parent(run_pid: int) -> None:
    """SIGKILL this worker when the run's parent dies, so a killed run leaves no orphans.

    PR_SET_PDEATHSIG covers a worker whose parent is the run (spawn). Under a fork server the parent
    is the server, which waits for its children and so outlives a killed run: a thread then waits on
    a pidfd of the run's process and kills this worker when it exits.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: daemonic workers still end with a normally exiting parent
    if run_pid == os.getppid() or not hasattr(os, "pidfd_open"):
        return
    try:
        fd = os.pidfd_open(run_pid)
    except OSError:  # already gone
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(
        target=_kill_self_when_readable, args=(fd,), name="sdcscan-parent-watch", daemon=True
    ).start()


def _kill_self_when_readable(fd: int) -> None:
    select.select([fd], [], [])  # a pidfd becomes readable when its process exits
    os.kill(os.getpid(), signal.SIGKILL)


def _outcome_dict(o: Outcome) -> OutcomeRecord:
    return {
        "status": o.status,
        "digest": o.digest,
        "mismatches": [m.to_dict() for m in o.mismatches],
        "ops": o.ops,
        "ops_unit": o.ops_unit,
        "phases": o.phases,
        "seconds": o.seconds,
        "error": o.error,
        "injected": o.injected,
        "detail": o.detail,
    }
