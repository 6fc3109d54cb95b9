"""Benchmark: what a worker spends before its unit is ready, step by step, for one profile on one unit.

A unit runs no case until torch is configured, every workload is prepared (pools drawn, weights encoded,
gemm_fp calibrated) and the plain-op peaks are measured (sdcscan/run/worker.py, `_Engine`). On a GPU the
pools are drawn on the CPU with the worker's one thread and moved, so this is where a large profile's
start-up goes. Prints one JSON line per step as it ends (the device synchronised first), so a run cut
short still says where its time went, then a line with the total.
Usage: python scripts/bench_startup.py [--profile doctor] [--unit cuda:0] [--workloads gemm_int8,train]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="doctor")
    ap.add_argument("--unit", default="cpu:0")
    ap.add_argument("--workloads", help="comma-separated names (default: every workload of the profile)")
    args = ap.parse_args()
    import os

    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="bench-startup-"))  # no cached e_max
    started = time.perf_counter()
    from sdcscan.profile import load_profile
    from sdcscan.run.worker import _measure_peaks
    from sdcscan.torch_setup import configure_torch
    from sdcscan.units import Unit, unit_class
    from sdcscan.workloads import SPECS, load
    from sdcscan.workloads.base import Context

    kind, _, index = args.unit.partition(":")
    unit = Unit(id=args.unit, kind=kind, index=int(index), model="")
    torch = configure_torch(unit, threads=1)
    device = torch.device(unit.id if kind == "cuda" else "cpu")

    def synced() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    def step(name: str, since: float) -> None:
        print(
            json.dumps({"unit": args.unit, "step": name, "seconds": round(synced() - since, 2)}), flush=True
        )

    torch.ones(1, device=device).sum().item()  # the CUDA context and its first kernel
    step("torch and context", started)
    wanted = set(args.workloads.split(",")) if args.workloads else None
    local: dict[str, dict[str, object]] = {}
    for spec in load_profile(args.profile).workloads:
        if wanted is not None and spec.name not in wanted:
            continue
        params = spec.params_for(kind, unit_class(unit))  # as the worker: sized for the unit's class
        ctx = Context(unit=unit.id, device=device, run_seed=20261127, params=params)
        t = synced()
        load(spec.name)(params).prepare(ctx)
        step(f"prepare {spec.name}", t)
        if not SPECS[spec.name].distributed:
            local[spec.name] = ctx.params
    t = synced()
    notes: list[str] = []
    _measure_peaks(device, local, notes)
    step("peaks", t)
    step("total", started)
    for note in notes:
        print(json.dumps({"unit": args.unit, "note": note}), flush=True)


if __name__ == "__main__":
    main()
