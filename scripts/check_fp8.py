"""Check: is matmul_golden's fp8 product exact on this unit for sums over k up to 8,192? (issue 44)

The fp8 slots rest on one premise: with integers |x| <= FP8_EXACT_INT and k·max_abs² below 2^24, every
partial sum is exact in fp32, so the product equals its int64 golden bit for bit. Hopper's fp8 tensor
cores keep only about 14 bits while they accumulate (DeepSeek-V3 technical report, §3.3.2), so on a GPU
the premise must be measured before a profile lists the slots.

For each fp8 slot and inner dimension k: random integers in [-max_abs, max_abs] ("signed": sums of random
sign, what the workload's pools give) and in [1, max_abs] ("positive": sums that grow with k, up to
k·max_abs², which a narrow accumulator must round) through the path the
workload ships (`sdcscan.checks.fp8`: `operands`, then `scaled_mm`, cuBLASLt without fast accumulation),
and for comparison the same product with `use_fast_accum=True` (what inference engines often ask for),
each compared element by element with the exact product (a float64 matmul of the same integers on the
host: exact, as every sum is below 2^53). One JSON line each: elements wrong, the largest error, the
largest |sum|. Exit 1 when the shipped path is wrong anywhere.
Usage: python scripts/check_fp8.py [--unit cuda:0] [--m 1024] [--inner 256,2048,8192] [--max-abs 8]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unit", default="cuda:0")
    ap.add_argument("--m", type=int, default=1024, help="m and n (multiples of 16)")
    ap.add_argument("--inner", default="256,2048,8192", help="k values (multiples of 16)")
    ap.add_argument("--max-abs", type=int, default=8)
    ap.add_argument("--seed", type=int, default=44)
    args = ap.parse_args()
    from sdcscan.checks import fp8
    from sdcscan.checks.limits import FP8_EXACT_INT
    from sdcscan.torch_setup import configure_torch
    from sdcscan.units import Unit

    if not 0 < args.max_abs <= FP8_EXACT_INT:
        ap.error(f"--max-abs must be in 1..{FP8_EXACT_INT}: larger integers are not exact in e5m2")
    kind, _, index = args.unit.partition(":")
    torch = configure_torch(Unit(id=args.unit, kind=kind, index=int(index), model=""), threads=1)
    device = torch.device(args.unit if kind == "cuda" else "cpu")
    generator = torch.Generator().manual_seed(args.seed)
    shipped_wrong = 0
    lowest = {"signed": -args.max_abs, "positive": 1}
    for values, k in ((v, int(i)) for v in lowest for i in args.inner.split(",")):
        a = torch.randint(lowest[values], args.max_abs + 1, (args.m, k), generator=generator)
        b = torch.randint(lowest[values], args.max_abs + 1, (k, args.m), generator=generator)
        exact = a.double() @ b.double()
        for slot in fp8.OPERANDS:
            a8, b8 = fp8.operands(a.float().to(device), b.float().to(device), slot)
            for path in ("shipped", "fast_accum"):
                row = {"unit": args.unit, "slot": slot, "path": path, "values": values, "m": args.m, "k": k}
                try:
                    got = _product(fp8, a8, b8, fast_accum=path == "fast_accum").double().cpu()
                except RuntimeError as err:  # a path this device or torch does not take
                    print(json.dumps({**row, "error": str(err).splitlines()[0][:200]}), flush=True)
                    continue
                error = (got - exact).abs()
                wrong = int((error > 0).sum())
                shipped_wrong += wrong if path == "shipped" else 0
                print(json.dumps({**row, "wrong": wrong, "of": exact.numel(), "max_error": float(error.max()),
                                  "max_abs_sum": float(exact.abs().max())}), flush=True)  # fmt: skip
    return 1 if shipped_wrong else 0


def _product(fp8, a8, b8, *, fast_accum: bool):  # type: ignore[no-untyped-def]
    """The shipped product, or the same with cuBLASLt's fast accumulation (torch's own argument)."""
    if not fast_accum:
        return fp8.scaled_mm(a8, b8)
    import torch

    one = torch.ones((), dtype=torch.float32, device=a8.device)
    return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=True)


if __name__ == "__main__":
    raise SystemExit(main())
