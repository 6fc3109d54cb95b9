"""One rank of a distributed run: screen this rank's unit with its peers, write its report, and on
rank 0 the cluster report.

A rank is an ordinary `scan` of one unit (the GPU `cuda:LOCAL_RANK`, or a CPU core picked by
LOCAL_RANK) whose worker joins the world and runs the distributed workloads in step with its peers
(`sdcscan.collectives.lockstep`). Its report is an ordinary report, so `compare` reads it. Reports
travel to rank 0 through the launcher's store (the c10d rendezvous store every rank already
reaches): no shared file system is needed, and a rank that never reports cannot hang rank 0, which
waits a bounded time and names it.

The process does not exit here: `run_rank` returns the exit code, so that under sdcscan's own
launcher a failing rank is not mistaken by torch's agent for a crashed one.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from sdcscan import faults, units
from sdcscan.collectives.env import (
    BARRIER_S,
    RANK_KINDS,
    WIRE_KINDS,
    DistEnv,
    RankSetup,
    WireFault,
    from_environment,
)
from sdcscan.errors import RunError, UsageError
from sdcscan.launch.cluster_report import RankInfo, merge_rank_reports
from sdcscan.outputs import history
from sdcscan.outputs.publish import Outputs, publish
from sdcscan.report.document import Report, Run
from sdcscan.run.watchdog import OVERRUN_S
from sdcscan.scan import ScanOptions, scan
from sdcscan.timefmt import iso_utc

DISTRIBUTED_WORKLOADS = ["collective", "train_dp"]  # what --distributed adds to the profile's workloads
REPORT_WAIT_AFTER_S = 20.0  # rank 0 waits this long past the latest end of any rank for their reports
INTERRUPTED_WAIT_S = 5.0  # ... or only this long when it was interrupted itself (the others are too)


@dataclass(frozen=True)
class DistOptions:
    """What `--distributed` adds to a run (parsed and checked before any work)."""

    timeout_s: float = 10.0
    join_timeout_s: float = 120.0
    injections: tuple[tuple[int, str, float], ...] = ()  # (rank, kind, rate)


def run_rank(opts: ScanOptions, dist_opts: DistOptions, env: DistEnv | None = None) -> int:
    """Run this process's rank; return its exit code (rank 0: the cluster's).

    Raises:
        UsageError: The environment is not a torchrun world, an injection names a rank outside it,
            or this node has no unit for LOCAL_RANK (before any work).
    """
    env = env or from_environment()
    # gloo logs a lost peer at error level from C++, once per rank; the reports say it in words. Set
    # before the workers start: torch reads it when it loads.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    # NCCL picks its algorithm per call; the ring is the one whose hops the attribution reasons about.
    # The collective workload records the setting in each case (NCCL reads it when a communicator starts).
    os.environ.setdefault("NCCL_ALGO", "Ring")
    for rank, _, _ in dist_opts.injections:
        if rank >= env.world_size:
            raise UsageError(f"--inject names rank {rank}; the world has ranks 0 to {env.world_size - 1}")
    unit = unit_of_rank(env.local_rank, env.local_world_size)
    hostname = opts.hostname or units.host_inventory()["hostname"]
    report = scan(_rank_options(opts, dist_opts, env, unit, hostname))
    # Only now: the store is torch's, and importing torch here would delay this rank's start-up.
    store = _Store(env, dist_opts.join_timeout_s)
    info = RankInfo(env.rank, hostname, env.local_rank, unit.id, unit.pci, str(rank_report_path(opts, env)))
    store.put(f"info/{env.rank}", info.__dict__)
    store.put(f"report/{env.rank}", report)
    if env.rank != 0:
        return int(report["exit_code"])
    return _write_cluster_report(opts, env, store, report, dist_opts)


def unit_of_rank(local_rank: int, local_world: int) -> units.Unit:
    """This rank's unit: GPU `cuda:LOCAL_RANK` when the node has GPUs, else a CPU core (ranks share
    cores round-robin when there are more ranks than cores).

    Raises:
        UsageError: A GPU node with fewer GPUs than ranks.
    """
    gpus = units.gpu_units()
    if gpus:
        if local_rank >= len(gpus):
            raise UsageError(
                f"LOCAL_RANK {local_rank} but this node has {len(gpus)} GPU(s): use --nproc-per-node {len(gpus)}"
            )
        return gpus[local_rank]
    cores = units.cpu_units()
    return cores[local_rank % len(cores)]


def cluster_report_path(opts: ScanOptions, run_id: str) -> Path:
    """The cluster report: --out, else `distributed/RUN_ID/cluster.json` in the state directory."""
    if opts.outputs.report is not None:
        return opts.outputs.report
    return history.default_state_dir() / "distributed" / run_id / "cluster.json"


def rank_report_path(opts: ScanOptions, env: DistEnv) -> Path:
    """Rank R's report, beside the cluster report: cluster.json -> cluster.rankR.json."""
    return report_path_of_rank(opts, env.run_id, env.rank)


def report_path_of_rank(opts: ScanOptions, run_id: str, rank: int) -> Path:
    """`rank_report_path` of rank `rank` in the world `run_id` (the launcher reads them)."""
    out = cluster_report_path(opts, run_id)
    return out.with_name(f"{out.stem}.rank{rank}{out.suffix or '.json'}")


def _rank_options(
    opts: ScanOptions, dist_opts: DistOptions, env: DistEnv, unit: units.Unit, hostname: str
) -> ScanOptions:
    wire = tuple(
        WireFault(kind, rank, rate) for rank, kind, rate in dist_opts.injections if kind in WIRE_KINDS
    )
    own = [
        faults.Injection(unit.id, kind, rate)
        for rank, kind, rate in dist_opts.injections
        if kind in RANK_KINDS and rank == env.rank
    ]
    path = rank_report_path(opts, env)
    path.parent.mkdir(parents=True, exist_ok=True)
    return replace(
        opts,
        units=unit.id,
        injections=own,
        hostname=hostname,
        outputs=Outputs(report=path, record_history=False, lock=False),
        rank=RankSetup(
            env=env,
            hostname=hostname,
            faults=wire,
            timeout_s=dist_opts.timeout_s,
            join_timeout_s=dist_opts.join_timeout_s,
        ),
    )


def _write_cluster_report(
    opts: ScanOptions, env: DistEnv, store: _Store, own: Report, dist_opts: DistOptions
) -> int:
    """Rank 0: gather every rank's report (bounded wait), judge the cluster, write it at --out."""
    budget = opts.budget
    if own["run"].get("interrupted_by"):
        wait_until = time.time() + INTERRUPTED_WAIT_S
    else:
        latest_end = opts.started + budget + OVERRUN_S + dist_opts.timeout_s + BARRIER_S
        wait_until = max(latest_end, time.time()) + REPORT_WAIT_AFTER_S
    reports: dict[int, dict[str, Any]] = {  # as they came: merge_rank_reports validates each
        0: cast(dict[str, Any], own),
        **store.gather("report", range(1, env.world_size), until=wait_until),
    }
    infos = store.gather("info", range(env.world_size), until=time.time())
    missing = {
        r: f"rank {r} sent no report within {REPORT_WAIT_AFTER_S:.0f} s of the run's end: it died or stopped answering"
        for r in range(env.world_size)
        if r not in reports
    }
    hosts = list(own["run"].get("distributed", {}).get("hosts", []))
    ranks = [_rank_info(r, infos.get(r), hosts, env.local_world_size) for r in range(env.world_size)]
    cluster = merge_rank_reports(reports, ranks, missing=missing, run=_cluster_run(own, env))
    bandwidth, lockstep = _world_figures(reports)
    cluster["run"]["distributed"].update({"bandwidth": bandwidth, "lockstep": lockstep})
    path = cluster_report_path(opts, env.run_id)
    publish(cluster, replace(opts.outputs, report=path, record_history=False, lock=False))
    return int(cluster["exit_code"])


def _world_figures(
    reports: dict[int, dict[str, Any]],
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The cluster report's measurements: rank 0's bandwidth table (a collective's time is the world's),
    and every rank's time in the agreements and the digest exchange."""
    seen = {r: rep["run"].get("distributed", {}) for r, rep in sorted(reports.items())}
    keys = ("agreements", "agree_s", "exchanges", "exchange_s", "cases_compared", "cases_disagreeing")
    bandwidth = seen.get(0, {}).get("bandwidth", [])
    lockstep = [
        {"rank": r, "duration_s": reports[r]["run"].get("duration_s"), **{k: d.get(k) for k in keys}}
        for r, d in seen.items()
    ]
    return bandwidth, lockstep


def _rank_info(rank: int, info: dict[str, Any] | None, hosts: list[str], local_world: int) -> RankInfo:
    """What rank 0 knows of a rank: all it sent; for one that never reported, its host (from the
    world's join, when rank 0's worker got that far) and the unit it would have had, were its node
    like rank 0's."""
    if info is not None:
        return RankInfo(**info)
    host = hosts[rank] if rank < len(hosts) else "unknown"
    local = rank % local_world  # torchrun numbers ranks node by node
    return RankInfo(rank, host, local, unit_of_rank(local, local_world).id, None, None)


def _cluster_run(own: Report, env: DistEnv) -> Run:
    """The cluster report's `run`: rank 0's, with the world's id and the time the gathering ended."""
    run: Run = {**own["run"], "id": f"{env.run_id}-{own['run']['id']}", "ended_at": iso_utc(time.time())}
    run.pop("distributed", None)
    run.pop("journal", None)
    return run


class _Store:
    """The launcher's key-value store (torch's TCPStore, as the agent hosts it), under this run's prefix."""

    def __init__(self, env: DistEnv, timeout_s: float) -> None:
        import torch.distributed as dist

        try:
            base = dist.TCPStore(
                env.master_addr, env.master_port, is_master=False, timeout=timedelta(seconds=timeout_s)
            )
        except Exception as err:  # DistNetworkError, RuntimeError, TimeoutError
            raise RunError(
                f"cannot reach the launcher's store at {env.master_addr}:{env.master_port}: {err}"
            ) from None
        self.store = dist.PrefixStore(f"sdcscan/{env.run_id}/{env.restart}/", base)

    def put(self, key: str, doc: object) -> None:
        self.store.set(key, json.dumps(doc, separators=(",", ":")))

    def gather(self, kind: str, ranks: range, *, until: float) -> dict[int, dict[str, Any]]:
        """The `kind/R` documents of `ranks` that arrive before `until` (polled: no wait can hang)."""
        found: dict[int, dict[str, Any]] = {}
        while True:
            for r in ranks:
                if r not in found and self.store.check([f"{kind}/{r}"]):
                    found[r] = json.loads(self.store.get(f"{kind}/{r}"))
            if len(found) == len(ranks) or time.time() >= until:
                return found
            time.sleep(0.2)
