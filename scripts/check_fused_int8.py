"""Confirm the fused int8 check kernel on a device: bit for bit against the torch check, and its speed.

For gemm_int8's `check_kernel: fused` to be switched on by default, a lent GPU must give the same five
sums (sdcscan/checks/int8_block.py) as the torch ops on blocks of the GPU profiles' size, clean and
struck by the self-test's output fault models, and the same verdict and digest for whole cases. This
prints one JSON line per block shape (equal, and milliseconds of each path by device events, median of
`--repeats` after a warm-up, with the fused path's GB/s) and one per case of the profile's gemm_int8
(status, digest and check seconds of each path). On a CPU it runs the kernel in Triton's interpreter
(TRITON_INTERPRET=1, small shapes only: the tests use it so).
Usage: python scripts/check_fused_int8.py [--unit cuda:0] [--rows 65536] [--profile doctor] [--cases 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (n, n_ext) of the GPU profiles' weights: 8192 and 4096 data rows with their checksum and tag readers
WIDTHS = ((8192, 8200), (4096, 4104))
MODELS = ("any", "row_swap", "burst:4", "swap_columns", "row_offset:127")  # struck three times each


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unit", default="cuda:0")
    ap.add_argument("--rows", type=int, default=65536, help="rows of a block (eight 8192-row repeats)")
    ap.add_argument("--widths", help="n:n_ext pairs, comma-separated (default: the GPU profiles')")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", default="doctor", help="whose gemm_int8 cases to run with both kernels")
    ap.add_argument("--cases", type=int, default=2, help="cases of each kernel (0: blocks only)")
    args = ap.parse_args()
    import torch

    from sdcscan.checks import int8_block

    device = torch.device(args.unit)
    why = int8_block.fused_available(device)
    if why:
        sys.exit(f"error: the fused kernel cannot run on {device}: {why}")
    widths = WIDTHS if not args.widths else [tuple(map(int, w.split(":"))) for w in args.widths.split(",")]
    for n, n_ext in widths:
        print(json.dumps(_blocks(torch, device, args.rows, n, n_ext, args.repeats)), flush=True)
    for line in _cases(torch, device, args.profile, args.cases):
        print(json.dumps(line), flush=True)


def _blocks(torch: Any, device: Any, rows: int, n: int, n_ext: int, repeats: int) -> dict[str, Any]:
    """One block shape: every sum equal on clean and struck blocks, and both paths timed."""
    from sdcscan.checks import int8_block
    from sdcscan.faults import corrupt_, from_label

    g = torch.Generator(device=device).manual_seed(rows + n_ext)
    pad_start = n + 8  # checksum and tag columns, then zeros
    block = torch.randint(-(2**31), 2**31, (rows, n_ext), generator=g, device=device, dtype=torch.int64)
    block = block.to(torch.int32)
    block[:, pad_start:] = 0
    differ = []
    for index, label in enumerate(("clean", *MODELS)):
        tried = block.clone()
        if label != "clean":
            for strike in range(3):
                corrupt_(tried, from_label(label, "output", 100 * index + strike), columns=n)
        fused, ref = int8_block.fused(tried, n, pad_start), int8_block.reference(tried, n, pad_start)
        for name in ("rows", "weighted", "columns", "pad_nonzero", "fingerprint"):
            if not torch.equal(getattr(fused, name), getattr(ref, name)):
                differ.append(f"{label}: {name}")
    coefficients = int8_block.row_sum_coefficients(n, device)
    fused_s = _timed(torch, device, lambda: int8_block.fused(block, n, pad_start), repeats)
    torch_s = _timed(torch, device, lambda: int8_block.reference(block, n, pad_start, coefficients), repeats)
    return {
        "unit": str(device),
        "block": [rows, n_ext],
        "n": n,
        "equal": not differ,
        "differ": differ,
        "fused_ms": round(fused_s * 1e3, 3),
        "torch_ms": round(torch_s * 1e3, 3),
        "fused_gb_s": round(block.numel() * 4 / fused_s / 1e9, 1),
    }


def _cases(torch: Any, device: Any, profile: str, cases: int) -> list[dict[str, Any]]:
    """The profile's first `cases` gemm_int8 cases with each kernel: status, digest, check seconds."""
    from sdcscan.costmodel.cases import gpu_params
    from sdcscan.outcomes import Case
    from sdcscan.workloads.base import Context
    from sdcscan.workloads.gemm_int8.workload import GemmInt8

    found = []
    for kernel in ("torch", "fused") if cases else ():
        params = {**gpu_params(profile)["gemm_int8"], "check_kernel": kernel}
        if device.type == "cpu":
            params = {**params, **GemmInt8.spec.tiny}
        workload = GemmInt8(params)
        ctx = Context(unit=str(device), device=device, run_seed=20261129, params=params)
        workload.prepare(ctx)
        for occurrence in range(cases):
            ctx.begin_case(None)
            out = workload.run(ctx, Case(occurrence, "gemm_int8", 7 + occurrence, occurrence, params))
            found.append(
                {
                    "case": occurrence,
                    "check_kernel": out.detail["check_kernel"],
                    "shape": out.detail["shape"],
                    "status": out.status,
                    "digest": out.digest,
                    "check_s": round(ctx.phases.get("check", 0.0), 4),
                    "compute_s": round(ctx.phases.get("compute", 0.0), 4),
                }
            )
    if found:  # the switch flips only if every case's verdict and digest are the torch check's
        half = len(found) // 2
        same = all(
            (a["status"], a["digest"]) == (b["status"], b["digest"])
            for a, b in zip(found[:half], found[half:], strict=True)
        )
        found.append({"cases_equal": same})
    return found


def _timed(torch: Any, device: Any, fn: Any, repeats: int) -> float:
    """Median seconds of fn() after one warm-up: device events on a GPU, the host clock elsewhere."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type != "cuda":
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


if __name__ == "__main__":
    main()
