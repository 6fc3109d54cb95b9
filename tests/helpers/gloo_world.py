"""Spawn a gloo world of CPU processes, run one scenario on every rank, bring back what each returned.

Starting a process that imports torch costs seconds, so a test module spawns one world (a module
fixture), lets a scenario run everything it needs on every rank and reads the results afterwards.
A rank that raises sends back its traceback instead; one that dies or is late fails the fixture
with its rank named. The parent always stops its children, even when a rank fails.
"""

from __future__ import annotations

import queue
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# (rank, world size, control group) -> the rank's results; a module-level function, so that the
# spawned children can import it by name. The control group is a second gloo group over every rank,
# as a distributed run gives its `World`; scenarios that do not need one ignore it.
Scenario = Callable[[int, int, Any], dict[str, Any]]

GROUP_TIMEOUT_S = 30  # bounds every collective, so a stuck rank fails inside `startup_s`
STOP_GRACE_S = 20  # for ranks that sent their results to leave the group and exit by themselves


def spawn_world(
    size: int, scenario: Scenario, tmp_dir: Path, *, startup_s: float = 90
) -> dict[int, dict[str, Any]]:
    """Rank → what `scenario` returned there, from `size` spawned ranks that rendezvous in `tmp_dir`.

    `startup_s` bounds the whole world, spawn to results: torch's import and the rendezvous, then
    the scenario (each of its collectives is bounded by GROUP_TIMEOUT_S). Raises AssertionError
    naming the rank that failed (with its traceback), died without a result or is still running
    `startup_s` after the spawn, or that did not exit cleanly afterwards.
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    init_file = str(tmp_dir / "rendezvous")
    procs = [
        ctx.Process(target=_rank_main, args=(rank, size, init_file, scenario, results), daemon=True)
        for rank in range(size)
    ]
    finished = False
    try:
        for p in procs:
            p.start()
        collected = _collect(procs, results, startup_s)
        finished = True
    finally:
        _stop(procs, grace_s=STOP_GRACE_S if finished else 0)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return collected


def _rank_main(rank: int, size: int, init_file: str, scenario: Scenario, results: Any) -> None:
    """One rank: join the gloo world, run the scenario, send back its results or the traceback."""
    torch.set_num_threads(1)  # the ranks share a few cores; more threads each only fight over them
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{init_file}",
            rank=rank,
            world_size=size,
            timeout=timedelta(seconds=GROUP_TIMEOUT_S),
        )
        try:
            control = dist.new_group(backend="gloo")
            results.put((rank, scenario(rank, size, control), None))
        finally:
            dist.destroy_process_group()
    except BaseException:
        results.put((rank, None, traceback.format_exc()))


def _collect(procs: list[Any], results: Any, startup_s: float) -> dict[int, dict[str, Any]]:
    """Every rank's results, or an AssertionError naming the rank that failed, died or is late."""
    collected: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + startup_s
    while len(collected) < len(procs):
        try:
            rank, out, error = results.get(timeout=1)
        except queue.Empty:
            dead = [r for r, p in enumerate(procs) if r not in collected and p.exitcode not in (None, 0)]
            assert not dead, (
                f"ranks {dead} died without a result (exit codes {[procs[r].exitcode for r in dead]})"
            )
            assert time.monotonic() < deadline, (
                f"ranks {sorted(set(range(len(procs))) - set(collected))} are late"
            )
            continue
        assert error is None, f"rank {rank} failed:\n{error}"
        collected[rank] = out
    return collected


def _stop(procs: list[Any], grace_s: float) -> None:
    """Join the children for up to `grace_s` in all, then kill whichever is still alive."""
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
