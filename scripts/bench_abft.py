"""Overhead of the ABFT checks: median seconds of the plain vs the checked operation, timed in the same run.

Usage: python scripts/bench_abft.py --json [--repeats N] [--threads N]

gemm_fp: plain = `a @ b`; checked = the same GEMM plus gemm_fp's verification (V-ABFT row check with
the workload's default checker). B's encoding is per weight ("offline") and timed separately as
`encode_s`. Records of the int8 workloads come from scripts/bench_abft_int8.py when it is present.
Dev-only: never imported by sdcscan.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sdcscan.checks import vabft
from sdcscan.workloads import calibration

# (dtype, checker, shapes): fp32 at 512³ and above for the ≤ 10% target; bf16/fp16 small (no fast kernel here)
CASES = [
    ("float32", "float32", [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048)]),
    ("float32", "float64", [(512, 512, 512), (1024, 1024, 1024)]),
    ("float64", "float64", [(512, 512, 512), (1024, 1024, 1024)]),
    ("bfloat16", "float32", [(128, 1024, 256)]),
    ("float16", "float32", [(128, 1024, 256)]),
]
E_MAX = 1e-6  # any value: the threshold's cost does not depend on it


def median_s(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def gemm_fp_records(repeats: int) -> list[dict[str, Any]]:
    out = []
    for dtype, checker, shapes in CASES:
        dt, chk = calibration.DTYPES[dtype], calibration.DTYPES[checker]
        for m, k, n in shapes:
            g = torch.Generator().manual_seed(0)
            a = calibration.sample("abs_normal", (m, k), g, dt)
            b = calibration.sample("abs_normal", (k, n), g, dt)
            enc = vabft.encode(b, chk)
            # interleave plain and checked so drift on a shared machine hits both alike
            plain, checked, encode = [], [], []
            for _ in range(3):
                plain.append(median_s(lambda a=a, b=b: a @ b, repeats))
                checked.append(
                    median_s(lambda a=a, b=b, enc=enc: vabft.row_check(a, a @ b, enc, E_MAX), repeats)
                )
                encode.append(median_s(lambda b=b, chk=chk: vabft.encode(b, chk), repeats))
            p, c = statistics.median(plain), statistics.median(checked)
            out.append({
                "workload": "gemm_fp",
                "variant": f"{dtype}/{checker} checker",
                "shape": [m, k, n],
                "plain_s": p,
                "checked_s": c,
                "overhead": c / p - 1.0,
                "encode_s": statistics.median(encode),
                "threads": torch.get_num_threads(),
            })  # fmt: skip
    return out


def int8_records() -> list[dict[str, Any]]:
    """The int8 helper's records, when its script is on this branch."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        from bench_abft_int8 import records  # type: ignore[import-not-found]
    except ImportError:
        return []
    return list(records())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the records as JSON on stdout")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per median")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (units run on one)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    records = gemm_fp_records(args.repeats) + int8_records()
    if args.json:
        print(json.dumps(records, indent=2))
    else:
        for r in records:
            pct = 100 * (r["checked_s"] / r["plain_s"] - 1)
            shape = "x".join(map(str, r["shape"]))
            times = f"{r['plain_s']:.4f}s {r['checked_s']:.4f}s {pct:+.1f}%"
            print(f"{r['workload']:10} {r['variant']:24} {shape:16} {times}")


if __name__ == "__main__":
    main()
