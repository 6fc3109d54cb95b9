"""Benchmark: per workload, the share of case time spent computing vs checking and bookkeeping, and cases/s.

Runs each workload's cases in this process on one pinned thread, exactly as a worker does, and prints
JSON. `peak` is the rate of the plain op(s) the workload runs at its own shapes (sdcscan.peaks,
measured fresh here, never from the cache), `efficiency` the achieved rate over it.
Usage: python scripts/bench_workloads.py [--profile quick] [--cases 20] [--cpu 0] [--workloads gemm_fp,train]
Run it on an otherwise idle machine: two benchmarks at once on two cores measure each other.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--cases", type=int, default=20, help="cases per workload")
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--workloads", help="comma-separated names (default: every workload of the profile)")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    import torch

    torch.set_num_threads(1)
    from sdcscan.peaks.plain_ops import case_peak
    from sdcscan.peaks.rates import PeakSource, workload_peak
    from sdcscan.profile import load_profile
    from sdcscan.run.plan import Plan
    from sdcscan.units import cpu_units, unit_class
    from sdcscan.workloads import load
    from sdcscan.workloads.base import Context

    profile = load_profile(args.profile)
    cls = unit_class(cpu_units()[0])  # the class this CPU's units are sized for (profile class_params)
    plan = Plan(profile, seed=1234, unit_class=cls)
    records = []
    # A benchmark measures afresh: a cached peak from another load on this machine would skew the ratio.
    scratch = Path(tempfile.mkdtemp(prefix="sdcscan-bench-peaks-"))
    peaks = PeakSource(torch.device("cpu"), directory=scratch)
    chosen = args.workloads.split(",") if args.workloads else [spec.name for spec in profile.workloads]
    for spec in profile.workloads:
        if spec.name not in chosen:
            continue
        params = spec.params_for("cpu", cls)
        ctx = Context(unit=f"cpu:{args.cpu}", device=torch.device("cpu"), run_seed=1234, params=params)
        workload = load(spec.name)(params)
        workload.prepare(ctx)
        indices = [i for i in range(10 * args.cases) if plan.workload_of(i) == spec.name][: args.cases + 1]
        ctx.begin_case(None)
        workload.run(ctx, plan.case(indices.pop()))  # warm-up: first calls allocate and pick kernels
        found = workload_peak(peaks, spec.name, params)
        phases: dict[str, float] = {}
        slowest: dict[int, float] = {}  # per case kind (its occurrence modulo the kinds): the longest case
        total = ops = 0.0
        plain_s: float | None = 0.0  # None once a case's plain rate is unknown
        for index in indices:
            ctx.begin_case(None)
            start = time.perf_counter()
            case = plan.case(index)
            out = workload.run(ctx, case)
            took = time.perf_counter() - start
            total += took
            kind = case.occurrence % _kinds(spec.name, params)
            slowest[kind] = max(slowest.get(kind, 0.0), took)
            ops += out.ops
            # What the plain op would take for this very case: few cases need not cover every slot evenly.
            rate = case_peak(spec.name, found, case.occurrence)
            plain_s = plain_s + out.ops / rate if rate and plain_s is not None else None
            for k, v in ctx.phases.items():
                phases[k] = phases.get(k, 0.0) + v
        records.append(
            {
                "workload": spec.name,
                "cases": len(indices),
                "unit_class": cls,
                "case_s_mean": round(total / len(indices), 4),
                "case_s_max_by_kind": {k: round(v, 4) for k, v in sorted(slowest.items())},
                "cases_per_s_per_unit": round(len(indices) / total, 2),
                "compute_share": round(phases.get("compute", 0.0) / total, 4),
                "check_share": round(phases.get("check", 0.0) / total, 4),
                "setup_share": round(phases.get("setup", 0.0) / total, 4),
                "other_share": round(1 - sum(phases.values()) / total, 4),
                "ops_per_s": round(ops / total, 1),
                "ops_unit": out.ops_unit,
                "peak": round(ops / plain_s, 1) if plain_s else None,
                "efficiency": round(plain_s / total, 4) if plain_s else None,
            }
        )
    shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(records, indent=2))


def _kinds(name: str, params: dict[str, object]) -> int:
    """How many kinds of case a workload cycles through (gemm_fp's dtypes, embbag's bit widths)."""
    from sdcscan.costmodel.cases import SHAPES
    from sdcscan.workloads import SPECS

    return SHAPES[name].kinds({**SPECS[name].defaults, **params}) if name in SHAPES else 1


if __name__ == "__main__":
    main()
