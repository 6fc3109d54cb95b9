"""Benchmark: `torch._int_mm` at the output widths and inner dimensions gemm_int8 can have, on one device.

gemm_int8 multiplies tagged activation rows (k data columns and a few tag columns) by a weight of n data
rows plus its checksum rows, both padded: to multiples of 8 on a CPU, of 32 on a GPU (int8.row_multiple).
An H200 ran 8,200 wide three times slower than 8,192 or 8,224 wide. Times m = 8192 products (s8 x s8 on
CUDA, u8 x s8 where a CPU takes it) at each (inner dimension, width) with device events, median of
`--repeats` after a warm-up, and prints one JSON line each: milliseconds and TOPS.
Usage: python scripts/bench_int_mm_width.py [--unit cuda:0] [--size 8192] [--widths 8192,8200,8256]
    [--inner 8192,8200,8224]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unit", default="cuda:0")
    ap.add_argument("--size", type=int, default=8192, help="m")
    ap.add_argument("--widths", default="8192,8200,8256", help="n")
    ap.add_argument("--inner", default="8192,8200,8224", help="k")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    from sdcscan.torch_setup import configure_torch
    from sdcscan.units import Unit
    from sdcscan.workloads.gemm_int8.int_mm_path import takes_signed_path

    kind, _, index = args.unit.partition(":")
    torch = configure_torch(Unit(id=args.unit, kind=kind, index=int(index), model=""), threads=1)
    device = torch.device(args.unit if kind == "cuda" else "cpu")
    signed = takes_signed_path("auto", device)
    m = args.size
    for k in (int(i) for i in args.inner.split(",")):
        a = torch.randint(
            -128 if signed else 0, 128 if signed else 256, (m, k), dtype=torch.int8 if signed else torch.uint8
        )
        a = a.to(device)
        for n in (int(w) for w in args.widths.split(",")):
            w = torch.randint(-128, 128, (n, k), dtype=torch.int8).to(device)
            out = torch.empty(m, n, dtype=torch.int32, device=device)
            times = [_timed(torch, device, a, w, out) for _ in range(args.repeats + 2)][2:]
            ms = statistics.median(times) * 1e3
            print(json.dumps({"unit": args.unit, "m": m, "k": k, "n": n, "ms": round(ms, 4),
                              "tops": round(2 * m * k * n / ms / 1e9, 1)}), flush=True)  # fmt: skip


def _timed(torch, device, a, w, out) -> float:  # type: ignore[no-untyped-def]
    """Seconds of one product into `out`: device events on a GPU, the host clock on a CPU."""
    if device.type != "cuda":
        started = time.perf_counter()
        torch._int_mm(a, w.t(), out=out)
        return time.perf_counter() - started
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch._int_mm(a, w.t(), out=out)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


if __name__ == "__main__":
    main()
