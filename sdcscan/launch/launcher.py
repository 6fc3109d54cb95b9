"""`sdcscan run --distributed`: start this node's ranks with torch's elastic launcher and map what
they return to sdcscan's exit codes.

torch.distributed.elastic does the rendezvous (c10d), starts one process per rank, and watches
them. Why not plain torchrun: it exits 1 whenever any rank exits non-zero, which turns "could not
judge" (3) into "SDC suspected" (1). Here each rank *returns* its exit code (`rank.run_rank`), so a
rank that judged its unit bad does not look crashed, and only a rank that died (a signal, an exit of
its own) counts as a failure of the worker group, which makes this node's code 3.

Signals: sdcscan's handlers (`sdcscan.interrupts`) stay in place for the whole launch; torch's agent
is told to install none of its own. A SIGINT or SIGTERM raises `Interrupted` wherever the launcher is
(loading, the rendezvous, starting ranks, waiting on them); the agent then sends SIGTERM to every
rank it started and waits up to SHUTDOWN_S for their reports, and later signals are only recorded.
Each rank dies with the launcher's process (PR_SET_PDEATHSIG), so a SIGKILL of the launcher leaves
no rank behind, nor, with the rank gone, its fork server and resource tracker.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdcscan import interrupts
from sdcscan.errors import (
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_PASS,
    EXIT_TERMINATED,
    EXIT_USAGE,
    SdcscanError,
    UsageError,
)
from sdcscan.fleet.tables import require_fleet_extra
from sdcscan.launch.rank import DistOptions, cluster_report_path, run_rank
from sdcscan.scan import ScanOptions

SHUTDOWN_S = 15  # after a rank died, the others get this long to write their reports before SIGKILL
# Which code wins when this node's ranks differ: the order of `Verdict.severity` (a stop by signal,
# then a judged miscompute, which "could not judge" elsewhere must not hide, then that, then pass), as
# for the units of one host; a configuration error found by a rank comes first of all but a signal:
# nothing of its rank ran.
_PRECEDENCE = (EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE, EXIT_FAIL, EXIT_INVALID, EXIT_PASS)


@dataclass(frozen=True)
class LaunchOptions:
    """Where this node's ranks meet the others (checked by the CLI before anything starts)."""

    nproc_per_node: int
    standalone: bool = False
    nnodes: int = 1
    rdzv_endpoint: str | None = None  # HOST:PORT of the c10d rendezvous (the first node)
    rdzv_id: str | None = None  # the same on every node of one run, e.g. the Slurm job id

    def check(self) -> None:
        """Raises UsageError: a standalone run with rendezvous options, or a multi-node one without."""
        if self.nproc_per_node < 1 or self.nnodes < 1:
            raise UsageError("--nnodes and --nproc-per-node must be at least 1")
        if self.standalone:
            if self.nnodes != 1 or self.rdzv_endpoint or self.rdzv_id:
                raise UsageError(
                    "--standalone runs on this machine alone: leave out --nnodes, --rdzv-endpoint and --rdzv-id"
                )
            return
        if not self.rdzv_endpoint or not self.rdzv_id:
            raise UsageError(
                "--distributed needs --standalone (one machine) or --rdzv-endpoint HOST:PORT and --rdzv-id ID"
            )
        host, _, port = self.rdzv_endpoint.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"--rdzv-endpoint {self.rdzv_endpoint!r} is not HOST:PORT")

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node


@dataclass(frozen=True)
class LaunchResult:
    exit_code: int
    cluster_report: str | None  # written on this node (the node of rank 0), else None
    lines: tuple[str, ...]  # one per rank that died or failed to start, for the operator


def launch_run_id(rdzv_id: str | None) -> str:
    """The world's id: --rdzv-id, else a fresh one for a standalone run."""
    return rdzv_id or f"standalone-{uuid.uuid4().hex[:12]}"


def launch(opts: ScanOptions, dist_opts: DistOptions, where: LaunchOptions, run_id: str) -> LaunchResult:
    """Start this node's ranks, wait for them (every rank ends within its budget plus bounded grace),
    and combine their codes.

    Raises:
        RendezvousFailed: the nodes did not all join within --join-timeout (exit 3).
        UsageError: pyarrow or duckdb, which judge the cluster report, is missing (exit 2, before any rank).
        interrupts.Interrupted: SIGINT or SIGTERM; the ranks started were sent SIGTERM and waited
            for (up to SHUTDOWN_S) before it reaches the caller, which writes what they left.
    """
    require_fleet_extra()  # the cluster report is judged by compare's engine: know now, not after the run
    # torch's elastic modules read LOGLEVEL when each one is first imported, some of them during the run.
    os.environ.setdefault("LOGLEVEL", "CRITICAL")
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    _quiet_torch_logs()
    config = LaunchConfig(
        min_nodes=where.nnodes,
        max_nodes=where.nnodes,
        nproc_per_node=where.nproc_per_node,
        run_id=run_id,
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0" if where.standalone else str(where.rdzv_endpoint),
        rdzv_configs={"join_timeout": int(dist_opts.join_timeout_s)},
        max_restarts=0,  # a rank that died is a finding about this run, not a reason to start over
        monitor_interval=0.1,
        start_method="spawn",
        shutdown_timeout=SHUTDOWN_S,
        # The agent would put its own handlers for SIGINT, SIGTERM, SIGHUP and SIGQUIT in place of
        # sdcscan's and never give them back: a signal during the rendezvous or after the launch would
        # be torch's exception, not a stop. No name here is a signal: it installs none (and its warning
        # about that is silenced with its other logs).
        signals_to_handle="",
    )
    path = cluster_report_path(opts, run_id)
    try:
        codes: Mapping[int, Any] = elastic_launch(config, _rank_entry)(opts, dist_opts, os.getpid())
    except ChildFailedError as err:
        lines = tuple(_death_line(rank, failure) for rank, failure in sorted(err.failures.items()))
        lines += ("the launcher then stopped the other ranks: their units say interrupted",)
        return LaunchResult(EXIT_INVALID, _ours(path, run_id), lines)
    except Exception as err:  # the rendezvous: timeout, connection refused, closed
        raise RendezvousFailed(_rendezvous_problem(err, config.rdzv_endpoint, where, dist_opts)) from None
    return LaunchResult(combine(codes.values()), _ours(path, run_id), ())


class RendezvousFailed(SdcscanError):
    """This node could not join the others within --join-timeout: nothing was judged (exit 3)."""


def combine(codes: Any) -> int:
    """This node's exit code from its ranks' (rank 0's is the cluster's): see _PRECEDENCE."""
    got = {int(c) if isinstance(c, int) else EXIT_INVALID for c in codes}
    return next((c for c in _PRECEDENCE if c in got), EXIT_INVALID)


def _rank_entry(opts: ScanOptions, dist_opts: DistOptions, launcher_pid: int) -> int:
    """A rank process started by the elastic agent: run the rank, return its code, never raise (a raise
    would read as a crashed rank)."""
    _die_with_launcher(launcher_pid)
    _quiet_torch_logs()
    interrupts.take_over()  # the agent sends SIGTERM when the launch stops: the rank stops and writes its report
    try:
        code = run_rank(opts, dist_opts)
    except interrupts.Interrupted as stop:
        code = stop.exit_code
    except SdcscanError as err:
        print(f"Error: {err}", file=sys.stderr)
        return err.exit_code
    except Exception as err:  # a bug or a library failure: this rank could not be judged
        print(f"Error: rank failed: {_one_line(err)}", file=sys.stderr)
        return EXIT_INVALID
    if interrupts.received() is not None:
        # The agent is stopping every rank (a peer died, or the operator's signal): it will not read a
        # returned code, and torch's wrapper would wait for it to be read until the agent kills us.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _die_with_launcher(launcher_pid: int) -> None:
    """SIGKILL this rank when the launcher's process ends, whatever ends it (a SIGKILL included).

    PR_SET_PDEATHSIG fires when the thread that started this process ends, not its process. torch
    starts the ranks (spawn, one after another) from the thread that called `elastic_launch`, which
    waits in that call until every rank has ended: its end is the launcher's. A launcher gone before
    the setting took effect leaves this rank another parent: then it ends at once. Once a rank is
    gone, its fork server sees its pipe close and exits, its workers follow their parent-death
    signal, and the resource tracker exits when the last of them has.
    """
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return  # not Linux: the launcher's own shutdown is all there is
    if os.getppid() != launcher_pid:
        os.kill(os.getpid(), signal.SIGKILL)


_PR_SET_PDEATHSIG = 1


def _rendezvous_problem(
    err: BaseException, endpoint: str, where: LaunchOptions, dist_opts: DistOptions
) -> str:
    if type(err).__name__ == "RendezvousTimeoutError":
        return (
            f"rendezvous at {endpoint}: the {where.nnodes} node(s) did not all join within --join-timeout "
            f"({dist_opts.join_timeout_s:.0f} s); nothing was screened"
        )
    return f"rendezvous at {endpoint} failed: {_one_line(err)}; nothing was screened"


def _death_line(rank: int, failure: Any) -> str:
    code = getattr(failure, "exitcode", None)
    how = f"signal {-code}" if isinstance(code, int) and code < 0 else f"exit code {code}"
    return f"rank {rank} died ({how}); its unit is invalid"


def _ours(path: Path, run_id: str) -> str | None:
    """The cluster report's path when rank 0 of this launch wrote it (not a report an earlier run left)."""
    from sdcscan.launch.stopped import written_by_launch

    return str(path) if written_by_launch(path, run_id) else None


def _one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]


def _quiet_torch_logs() -> None:
    """torch's agent logs every worker failure with a traceback; sdcscan says it in one line instead."""
    for name in (
        "torch.distributed.elastic",
        "torch.distributed.launcher",
        "torch.distributed",
        "torch.multiprocessing",
    ):
        logging.getLogger(name).setLevel(logging.CRITICAL)
