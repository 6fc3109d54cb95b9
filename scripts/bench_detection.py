"""Detection of faults in C by gemm_fp, through the workload as a run uses it, at any shape and inputs.

Usage: python scripts/bench_detection.py --dtype float32 --shape 256 4096 256 --inputs normal --faults relerr:1e-3
       python scripts/bench_detection.py --dtype bfloat16 --shape 128 1024 256 --inputs student_t3 --faults 10,11,12,13,14
Prints JSON: the e_max and where it came from (as `sdcscan run` resolves it, or --e-max to force one),
the clean trials that fired (false positives), then per fault the trials where it changed C and how many
the row or column check caught. Faults are `sdcscan selftest` labels at the output site: a bit number,
or a model such as `relerr:1e-3` (sdcscan/faults/__init__.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"])
    ap.add_argument("--shape", type=int, nargs=3, default=[256, 4096, 256], metavar=("M", "K", "N"))
    ap.add_argument("--inputs", default="normal", help="a gemm_fp input distribution")
    ap.add_argument("--faults", default="relerr:1e-3", help="comma-separated self-test labels (bits, models)")
    ap.add_argument("--checker", default="", help="checksum precision (default: gemm_fp's for the dtype)")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--e-max", type=float, default=0.0, help="force this e_max (0: resolve it as a run does)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch

    from sdcscan.faults import from_label
    from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case
    from sdcscan.workloads import load
    from sdcscan.workloads.base import Context

    torch.set_num_threads(1)
    cls = load("gemm_fp")
    checker = args.checker or cls.spec.defaults["checkers"][cls.spec.defaults["dtypes"].index(args.dtype)]
    params = {**cls.spec.defaults, "dtypes": [args.dtype], "shapes": [args.shape], "repeats": [1],
              "checkers": [checker], "inputs": args.inputs}  # fmt: skip
    workload = cls(params)
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=args.seed, params=params)
    workload.prepare(ctx)
    found = workload.thresholds[0]
    if args.e_max:  # the pool's thresholds scale linearly with e_max
        assert found is not None and found.e_max is not None
        pool, scale = workload.pools[0], args.e_max / found.e_max
        stats = dataclasses.replace(
            pool.stats, row_t=pool.stats.row_t * scale, col_t=pool.stats.col_t * scale
        )
        workload.pools[0] = dataclasses.replace(pool, stats=stats)
    out: dict[str, object] = {
        "dtype": args.dtype,
        "shape": args.shape,
        "inputs": args.inputs,
        "checker": checker,
        "e_max": args.e_max or (found.e_max if found else None),
        "source": "forced" if args.e_max else (found.source if found else None),
        "trials": args.trials,
        "per_fault": {},
    }
    start, false_positives = time.perf_counter(), 0
    for t in range(args.trials):
        ctx.begin_case(None)
        case = Case(index=t, workload="gemm_fp", seed=1000 + t, occurrence=0, params=params)
        false_positives += workload.run(ctx, case).status != STATUS_OK
    out["clean_false_positives"] = false_positives
    for label in args.faults.split(","):
        fault: int | str = int(label) if label.isdigit() else label
        changed = caught = 0
        for t in range(args.trials):
            case = Case(index=t, workload="gemm_fp", seed=1000 + t, occurrence=0, params=params)
            ctx.begin_case(from_label(fault, "output", 7919 * t + 1))
            outcome = workload.run(ctx, case)
            if ctx.injected is not None and ctx.injected["value_changed"]:
                changed += 1
                caught += outcome.status == STATUS_MISMATCH
        out["per_fault"][label] = {  # type: ignore[index]
            "changed": changed,
            "detected": caught,
            "rate": round(caught / changed, 4) if changed else None,
        }
    out["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
