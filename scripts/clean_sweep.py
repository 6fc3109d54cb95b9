"""Count false positives: run clean cases of one workload at its default (profile-size) parameters.

Usage: python scripts/clean_sweep.py embbag_int8 --cases 4 --param mode=realistic
Prints JSON: cases, cases that fired, and the workload's own detail of the last case.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload")
    ap.add_argument("--cases", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--param", action="append", default=[], help="KEY=VALUE (JSON value or plain string)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    from sdcscan.outcomes import Case
    from sdcscan.workloads import load
    from sdcscan.workloads.base import Context

    cls = load(args.workload)
    params = dict(cls.spec.defaults)
    for item in args.param:
        key, _, value = item.partition("=")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=args.seed, params=params)
    workload = cls(params)
    workload.prepare(ctx)
    fired, detail = 0, {}
    for i in range(args.cases):
        ctx.begin_case(None)
        out = workload.run(
            ctx, Case(index=i, workload=cls.name, seed=args.seed * 1000 + i, occurrence=i, params=params)
        )
        fired += out.status != "ok"
        detail = out.detail
    print(
        json.dumps(
            {
                "workload": cls.name,
                "params": params,
                "cases": args.cases,
                "fired": fired,
                "last_detail": detail,
            }
        )
    )


if __name__ == "__main__":
    main()
