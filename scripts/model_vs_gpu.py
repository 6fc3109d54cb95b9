"""Benchmark: the cost model's predictions beside measurements of warm cases, per workload and kind of case.

For every per-unit workload of a profile: the model's predicted compute, check and case milliseconds for
the device class (sdcscan/costmodel/, the same parameters), then the workload run as a worker runs it on
`--unit`: prepared once, one warm-up case of each kind, then the next case of each kind timed (its phases
by the Context's CUDA events, the case by the host clock after a synchronize). One JSON line per
(workload, kind): predicted, measured and measured/predicted. Where they disagree, the model's rates or
its byte counts are wrong, and the line says by how much.
Usage: python scripts/model_vs_gpu.py [--profile doctor] [--unit cuda:0] [--device h200] [--workloads a,b]
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
    ap.add_argument("--profile", default="doctor")
    ap.add_argument("--unit", default="cuda:0")
    ap.add_argument("--device", help="rates of h100 or h200 (default: from the GPU's name; h200 on a CPU)")
    ap.add_argument("--workloads", help="comma-separated names (default: every per-unit workload)")
    args = ap.parse_args()
    import os

    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="model-vs-gpu-"))
    from sdcscan.costmodel import budgets
    from sdcscan.costmodel.cases import SHAPES, gpu_params, model_workload
    from sdcscan.costmodel.device_rates import DEVICES
    from sdcscan.outcomes import Case
    from sdcscan.profile import load_profile
    from sdcscan.run.plan import Plan
    from sdcscan.torch_setup import configure_torch
    from sdcscan.units import Unit
    from sdcscan.workloads import load
    from sdcscan.workloads.base import Context

    kind, _, index = args.unit.partition(":")
    torch = configure_torch(Unit(id=args.unit, kind=kind, index=int(index), model=""), threads=1)
    device = torch.device(args.unit if kind == "cuda" else "cpu")
    name_of_gpu = torch.cuda.get_device_name(device) if kind == "cuda" else ""
    rates = DEVICES[args.device or ("h100" if "H100" in name_of_gpu else "h200")]
    wanted = set(args.workloads.split(",")) if args.workloads else None
    plan = Plan(load_profile(args.profile), seed=20261127, device_kind=kind)
    for name, params in gpu_params(args.profile).items():
        if wanted and name not in wanted:
            continue
        cost = model_workload(name, params)
        predicted = {c.occurrence: budgets.case_figures(cost, c, rates) for c in cost.cases}
        ctx = Context(unit=args.unit, device=device, run_seed=20261127, params=params)
        workload = load(name)(params)
        started = _synced(torch, device)
        workload.prepare(ctx)
        prepare_s = _synced(torch, device) - started
        cases = [plan.case(i) for i in range(20_000) if plan.workload_of(i) == name]
        for occurrence in range(SHAPES[name].kinds(params)):
            picked = [c for c in cases if c.occurrence % SHAPES[name].kinds(params) == occurrence][:2]
            measured = [
                _timed(torch, device, ctx, workload, Case(c.index, name, c.seed, c.occurrence, params))
                for c in picked
            ]
            f, warm = predicted[occurrence], measured[-1]
            _emit(
                {
                    "workload": name,
                    "kind": f.kind,
                    "device": rates.name,
                    "gpu": name_of_gpu,
                    "prepare_s": round(prepare_s, 2),
                    "predicted_ms": {
                        "compute": _ms(f.compute_s),
                        "check": _ms(f.check_s),
                        "case": _ms(f.case_s),
                    },
                    "measured_ms": {k: _ms(v) for k, v in warm.items()},
                    "measured_over_predicted": {
                        k: round(warm[k] / p, 3) if p else None
                        for k, p in (("compute", f.compute_s), ("check", f.check_s), ("case", f.case_s))
                        if k in warm
                    },
                    "first_case_ms": _ms(measured[0]["case"]),
                }
            )


def _timed(torch: Any, device: Any, ctx: Any, workload: Any, case: Any) -> dict[str, float]:
    """One case: its phases' seconds (device events on a GPU) and the whole case's, synchronized."""
    ctx.begin_case(None)
    started = _synced(torch, device)
    outcome = workload.run(ctx, case)
    seconds = _synced(torch, device) - started
    if outcome.status != "ok":
        _emit({"warning": f"{case.workload} case {case.index}: {outcome.status} {outcome.error or ''}"})
    return {**ctx.phases, "case": seconds}


def _synced(torch: Any, device: Any) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _ms(seconds: float) -> float:
    return round(1e3 * seconds, 3)


def _emit(row: dict[str, object]) -> None:
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
