"""Benchmark: the CPU time a GPU unit spends drawing and encoding gemm_int8's and embbag_int8's pools.

A GPU worker makes these on the CPU (every device of a cohort must see the same data) before its unit
is ready. This times the same functions the workloads call, at a profile's cuda_params, on 1 and on
`--threads` threads, without a GPU: the device-side steps (moving, prefix sums) are left out.
Prints JSON. Usage: python scripts/bench_gpu_host_pools.py [--profile doctor] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="doctor")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch

    from sdcscan.checks import int8
    from sdcscan.checks.embbag import exact
    from sdcscan.profile import load_profile
    from sdcscan.workloads import SPECS
    from sdcscan.workloads.embbag_int8.workload import exact_table
    from sdcscan.workloads.gemm_int8.workload import WEIGHTS_PER_SHAPE

    params = {
        e.name: {**SPECS[e.name].defaults, **e.params_for("cuda")}
        for e in load_profile(args.profile).workloads
    }
    seconds: dict[str, float] = {}
    for threads in sorted({1, args.threads}):
        torch.set_num_threads(threads)
        g = torch.Generator().manual_seed(1)
        if "gemm_int8" in params:
            p = params["gemm_int8"]
            start = time.perf_counter()
            for _, k, n in p["shapes"]:
                for _ in range(WEIGHTS_PER_SHAPE):
                    weight = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
                    int8.encode_weight(weight, p["scheme"])
            need = max(m * k for m, k, _ in p["shapes"])
            torch.randint(0, 256, (need,), generator=g, dtype=torch.uint8)
            seconds[f"gemm_int8 on {threads} threads"] = round(time.perf_counter() - start, 2)
        if "embbag_int8" in params and params["embbag_int8"]["mode"] == "exact":
            p = params["embbag_int8"]
            start = time.perf_counter()
            for bits in p["bits"]:
                exact.exact_row_sums(exact_table(g.initial_seed(), p["rows"], p["dim"], bits), bits)
            torch.randint(0, p["rows"], (p["bags"] * p["pooling"][1],), generator=g, dtype=torch.int32)
            seconds[f"embbag_int8 on {threads} threads"] = round(time.perf_counter() - start, 2)
    print(
        json.dumps(
            {"profile": args.profile, "cpu": platform.processor() or platform.machine(), "seconds": seconds}
        )
    )


if __name__ == "__main__":
    main()
