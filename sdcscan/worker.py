"""The worker process of one unit: pin, configure torch for determinism, prepare workloads, run cases.

Workers compute, time their own cases and stream every outcome to the parent, which writes the
journal and runs the watchdog. The parent sets the deadline and sends it with the plan; the worker
compares its own clock with it before each case and starts no case it expects to end after it (from
a running average of that workload's case times). A worker still busy well after the deadline is
stopped by the parent's watchdog (`watchdog.OVERRUN_S`). Messages are plain tuples of builtins so
they pickle cheaply.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from sdcscan import faults
from sdcscan.profile import Profile
from sdcscan.units import Unit

HANG_SLEEP_S = 3600.0


@dataclass(frozen=True)
class WorkerConfig:
    unit: Unit
    profile: Profile
    seed: int
    threads: int
    injections: tuple[faults.Injection, ...] = ()
    param_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    run_pid: int = field(default_factory=os.getpid)  # the sdcscan parent: built there, so its pid


def worker_main(cfg: WorkerConfig, inbox: Any, outbox: Any) -> None:
    """Entry point of the spawned process. Never raises: problems become messages."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent coordinates shutdown on Ctrl-C
    _die_with_parent(cfg.run_pid)
    uid = cfg.unit.id
    try:
        engine = _Engine(cfg, outbox)
    except Exception as err:
        outbox.put(
            ("fatal", uid, f"setup failed: {type(err).__name__}: {err}", traceback.format_exc(limit=4))
        )
        return
    outbox.put(("ready", uid, engine.notes, engine.cohort_fields, engine.software))
    while True:
        msg = inbox.get()
        if msg[0] == "plan":
            engine.run_plan(deadline=msg[1])
            outbox.put(("idle", uid))
        elif msg[0] == "case":
            engine.run_case(msg[1], attempt=msg[2])
            outbox.put(("idle", uid))
        else:
            return


class _Engine:
    def __init__(self, cfg: WorkerConfig, outbox: Any) -> None:
        self.cfg, self.outbox = cfg, outbox
        torch = _configure_torch(cfg.unit, cfg.threads)
        from sdcscan.plan import Plan
        from sdcscan.workloads import load
        from sdcscan.workloads.base import Context

        device = torch.device(cfg.unit.id if cfg.unit.kind == "cuda" else "cpu")
        self.plan = Plan(cfg.profile, cfg.seed, cfg.unit.kind)
        self.workloads, self.contexts, self.notes = {}, {}, []
        for spec in cfg.profile.workloads:
            params = {**spec.params_for(cfg.unit.kind), **cfg.param_overrides.get(spec.name, {})}
            ctx = Context(unit=cfg.unit.id, device=device, run_seed=cfg.seed, params=params)
            workload = load(spec.name)(params)
            workload.prepare(ctx)
            self.workloads[spec.name], self.contexts[spec.name] = workload, ctx
            self.notes.extend(ctx.notes)
        self.mean_s: dict[str, float] = {}
        # The worker states its own cohort: it is the process whose threads, pins and kernels count.
        from sdcscan.units import cohort_fields, software_versions

        self.cohort_fields = cohort_fields(cfg.unit, cfg.threads)
        self.software = software_versions()

    def run_plan(self, deadline: float) -> None:
        """Cases 0, 1, 2, … until the next one would likely end after `deadline` (by this process's clock)."""
        index = 0
        while True:
            workload = self.plan.workload_of(index)
            expected = self.mean_s.get(workload, 0.0)
            if time.time() + expected > deadline:
                return
            seconds = self.run_case(index, attempt=0)
            n = index // max(1, len(self.workloads)) + 1
            self.mean_s[workload] = expected + (seconds - expected) / min(n, 10)
            index += 1

    def run_case(self, index: int, attempt: int) -> float:
        from sdcscan.outcomes import STATUS_ERROR, Outcome

        case = self.plan.case(index)
        workload, ctx = self.workloads[case.workload], self.contexts[case.workload]
        uid = self.cfg.unit.id
        self.outbox.put(("start", uid, index, case.workload, attempt))
        ctx.begin_case(self._armed(case, workload, attempt))
        start = time.perf_counter()
        try:
            outcome = workload.run(ctx, case)
        except Exception as err:
            outcome = Outcome(status=STATUS_ERROR, digest=None, error=f"{type(err).__name__}: {err}")
        outcome.seconds = time.perf_counter() - start
        outcome.phases, outcome.injected = dict(ctx.phases), ctx.injected
        self.outbox.put(("outcome", uid, index, attempt, case.workload, _outcome_dict(outcome)))
        return outcome.seconds

    def _armed(self, case: Any, workload: Any, attempt: int) -> faults.FaultSpec | None:
        """Apply process faults now; return the data fault to arm for this case, if any strikes."""
        armed = None
        for inj in self.cfg.injections:
            if not faults.draws(inj, case.seed, attempt):
                continue
            if inj.kind == "hang":
                while True:  # a wedged unit: never returns; the parent's watchdog must catch it
                    time.sleep(HANG_SLEEP_S)
            if inj.kind == "crash":
                # Flush what was sent (ready, this case's start) so the parent can say which case it died in.
                self.outbox.close()
                self.outbox.join_thread()
                os.kill(os.getpid(), signal.SIGKILL)
            armed = faults.FaultSpec(inj.kind, workload.spec.fault_sites[0], seed=case.seed ^ (attempt + 1))
        return armed


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


def _configure_torch(unit: Unit, threads: int) -> Any:
    """Pin to the unit's CPU and make torch deterministic before any computation."""
    if unit.kind == "cpu" and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {unit.index})
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ.setdefault("MKL_DYNAMIC", "FALSE")
    os.environ.setdefault("OMP_DYNAMIC", "FALSE")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    if unit.kind == "cuda":
        torch.cuda.set_device(unit.index)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    return torch


def _outcome_dict(o: Any) -> dict[str, Any]:
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
