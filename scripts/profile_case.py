"""Benchmark: where one workload's cases spend their time on one unit, kernel by kernel.

The doctor's speed step gives a workload's rate, plain-op peak and compute share, but not which
operations fill the rest of a case. This runs the workload as a worker would (the profile's parameters
for the unit's kind, prepared once, cases from the profile's plan), times a warm-up case, then runs
`--cases` more under torch.profiler and prints JSON lines: each profiled case's phases, then the
operations that took the most device time (CUDA kernels on a GPU, operators on a CPU), with their call
counts, so a slow check or a copy that should not be there is named.
Usage: python scripts/profile_case.py --workload gemm_int8 [--profile doctor] [--unit cuda:0] [--cases 2] [--top 15]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", required=True)
    ap.add_argument("--profile", default="doctor")
    ap.add_argument("--unit", default="cpu:0")
    ap.add_argument("--cases", type=int, default=2, help="profiled cases, after one warm-up case")
    ap.add_argument("--top", type=int, default=15, help="how many operations to list")
    args = ap.parse_args()
    import os

    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="profile-case-"))
    from sdcscan.profile import load_profile
    from sdcscan.run.plan import Plan
    from sdcscan.torch_setup import configure_torch
    from sdcscan.units import Unit
    from sdcscan.workloads import load
    from sdcscan.workloads.base import Context

    kind, _, index = args.unit.partition(":")
    unit = Unit(id=args.unit, kind=kind, index=int(index), model="")
    torch = configure_torch(unit, threads=1)
    from torch.profiler import ProfilerActivity, profile

    device = torch.device(unit.id if kind == "cuda" else "cpu")
    prof_of = load_profile(args.profile)
    spec = next((w for w in prof_of.workloads if w.name == args.workload), None)
    if spec is None:
        sys.exit(f"profile {args.profile} has no workload {args.workload}")
    params = spec.params_for(kind)
    ctx = Context(unit=unit.id, device=device, run_seed=20261127, params=params)
    workload = load(args.workload)(params)
    started = time.perf_counter()
    workload.prepare(ctx)
    _emit({"step": "prepare", "seconds": round(_synced(torch, device) - started, 3)})
    plan = Plan(prof_of, seed=20261127, device_kind=kind)
    indices = [i for i in range(10_000) if plan.workload_of(i) == args.workload][: args.cases + 1]
    _run(torch, device, ctx, workload, plan.case(indices[0]), "warm-up")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for i in indices[1:]:
            _run(torch, device, ctx, workload, plan.case(i), "profiled")
    _emit_top(prof, device.type, args.top)


def _run(torch: Any, device: Any, ctx: Any, workload: Any, case: Any, label: str) -> None:
    ctx.begin_case(None)
    t = time.perf_counter()
    outcome = workload.run(ctx, case)
    seconds = _synced(torch, device) - t
    phases = {name: round(s, 4) for name, s in ctx.phases.items()}
    _emit(
        {"case": case.index, "label": label, "status": outcome.status, "seconds": round(seconds, 4)} | phases
    )


def _emit_top(prof: Any, device_type: str, top: int) -> None:
    """The operations with the most device time (self time on a GPU's kernels; self CPU time on a CPU)."""
    rows = []
    for e in prof.key_averages():
        us = e.self_device_time_total if device_type == "cuda" else e.self_cpu_time_total
        if us > 0:
            rows.append({"op": e.key[:120], "calls": e.count, "ms": round(us / 1000, 3)})
    total = sum(r["ms"] for r in rows) or 1.0
    for r in sorted(rows, key=lambda r: -r["ms"])[:top]:
        _emit(r | {"share": round(r["ms"] / total, 3)})


def _synced(torch: Any, device: Any) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _emit(row: dict[str, object]) -> None:
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
