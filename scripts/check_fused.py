"""Confirm the fused check kernels on a device: bit for bit against the torch checks, and their speed.

For a workload's `check_kernel: fused` to become its default, a lent GPU must give the same results as
the torch ops: gemm_int8's five block sums (sdcscan/checks/int8_block.py) and embbag_int8's bad-bag
flags and fingerprint (sdcscan/checks/embbag/exact_fused.py), on outputs of the GPU profiles' size, clean
and struck, and the same verdict and digest for whole cases. The fingerprint's own kernel
(sdcscan/checks/keyed_sums.py), which a GPU unit takes by default after a start-up trial, is held
to the torch sums the same way on a block of gemm_fp's bf16 outputs, and gemm_fp's block check
(sdcscan/checks/tile_verdicts.py) to the torch verdicts and fingerprints on a block of its GPU cases'
bf16 outputs, clean and struck (its ratio within 10^-3 of torch's), and matmul_golden's comparison
(sdcscan/checks/golden_compare.py) to torch's bad elements per row on a block of bf16 outputs. Prints
one JSON line per output shape (equal, what differed, and milliseconds of each path by device events,
median of `--repeats` after a warm-up) and one per case of the profile's gemm_int8, embbag_int8, gemm_fp
and matmul_golden with each kernel, then {"cases_equal": ...}. On a CPU it runs the kernels in Triton's
interpreter (TRITON_INTERPRET=1, small shapes only: the tests run it so).
Usage: python scripts/check_fused.py [--unit cuda:0] [--rows 65536] [--bags 200000] [--words 16777216]
    [--tiles 8,4096,4096,4096] [--golden 8,8192,8192] [--profile doctor]
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

# (n, n_ext) of the GPU profiles' gemm_int8 weights: 8192 and 4096 data rows with checksum and tag readers,
# padded to a multiple of 32 (int8.row_multiple)
WIDTHS = ((8192, 8224), (4096, 4128))
INT8_MODELS = ("any", "row_swap", "burst:4", "swap_columns", "row_offset:127")  # struck three times each
EMBBAG_DIM = 64  # the GPU profiles' dim
EMBBAG_STRIKES = (float("nan"), float("inf"), 3e9, 2.0**24, 1e-40)  # values no dyadic table gives


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unit", default="cuda:0")
    ap.add_argument("--rows", type=int, default=65536, help="rows of an int8 block (eight 8192-row repeats)")
    ap.add_argument("--widths", help="n:n_ext pairs, comma-separated (default: the GPU profiles')")
    ap.add_argument(
        "--bags", type=int, default=200000, help="bags of an EmbeddingBag output (doctor's batch)"
    )
    ap.add_argument(
        "--words", type=int, default=2**24, help="64-bit words a row to fingerprint (one 8192² bf16 output)"
    )
    ap.add_argument(
        "--tiles",
        default="8,4096,4096,4096",
        help="repeats,m,k,n of a block of gemm_fp's bf16 outputs (the GPU profiles': 4096³)",
    )
    ap.add_argument(
        "--golden",
        default="8,8192,8192",
        help="repeats,m,n of a block of matmul_golden's bf16 outputs (the GPU profiles': 8192²)",
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", default="doctor", help="whose cases to run with both kernels")
    ap.add_argument("--cases", type=int, default=2, help="cases of each workload and kernel (0: none)")
    args = ap.parse_args()
    import torch

    from sdcscan.checks import triton_kernels

    device = torch.device(args.unit)
    why = triton_kernels.unavailable(device)
    if why:
        sys.exit(f"error: the fused kernels cannot run on {device}: {why}")
    widths = WIDTHS if not args.widths else [tuple(map(int, w.split(":"))) for w in args.widths.split(",")]
    for n, n_ext in widths:
        print(json.dumps(_int8_blocks(torch, device, args.rows, n, n_ext, args.repeats)), flush=True)
    print(json.dumps(_embbag_outputs(torch, device, args.bags, args.repeats)), flush=True)
    print(json.dumps(_fingerprints(torch, device, args.words, args.repeats)), flush=True)
    tiles = tuple(int(v) for v in args.tiles.split(","))
    print(json.dumps(_fp_tiles(torch, device, tiles, args.repeats)), flush=True)
    golden = tuple(int(v) for v in args.golden.split(","))
    print(json.dumps(_golden_block(torch, device, golden, args.repeats)), flush=True)
    found = [
        line
        for name in ("gemm_int8", "embbag_int8", "gemm_fp", "matmul_golden")
        for line in _cases(device, args.profile, name, args.cases)
    ]
    for line in found:
        print(json.dumps(line), flush=True)
    if found:  # a switch flips only if every case's verdict and digest are the torch check's
        pairs = {}
        for line in found:
            pairs.setdefault((line["workload"], line["case"]), []).append((line["status"], line["digest"]))
        print(json.dumps({"cases_equal": all(a == b for a, b in pairs.values())}), flush=True)


def _int8_blocks(torch: Any, device: Any, rows: int, n: int, n_ext: int, repeats: int) -> dict[str, Any]:
    """One gemm_int8 block shape: every sum equal on clean and struck blocks, and both paths timed."""
    from sdcscan.checks import int8_block
    from sdcscan.faults import corrupt_, from_label

    g = torch.Generator(device=device).manual_seed(rows + n_ext)
    pad_start = n + 8  # checksum and tag columns, then zeros
    block = torch.randint(-(2**31), 2**31, (rows, n_ext), generator=g, device=device, dtype=torch.int64)
    block = block.to(torch.int32)
    block[:, pad_start:] = 0
    differ = []
    for index, label in enumerate(("clean", *INT8_MODELS)):
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
    return _timing("gemm_int8", device, [rows, n_ext], differ, fused_s, torch_s, block.numel() * 4)


def _embbag_outputs(torch: Any, device: Any, bags: int, repeats: int) -> dict[str, Any]:
    """One EmbeddingBag output: flags and fingerprint equal, clean and with values no table gives."""
    from sdcscan.checks.digest import fingerprint_words
    from sdcscan.checks.embbag import exact, exact_fused

    g = torch.Generator(device=device).manual_seed(bags)
    units = torch.randint(-(2**17), 2**17, (bags, EMBBAG_DIM), generator=g, device=device, dtype=torch.int32)
    weights = exact.column_weights(EMBBAG_DIM, bags, device)
    expected = units.sum(1, dtype=torch.int32)
    weighted = (units * weights).sum(1, dtype=torch.int32)
    out = units.float() * exact.UNIT
    struck = out.clone()
    for i, value in enumerate(EMBBAG_STRIKES):
        struck[(7919 * i) % bags, i] = value
    struck[bags // 2, 1], struck[bags // 2, 2] = struck[bags // 2, 2].item(), struck[bags // 2, 1].item()
    differ = []
    for label, tried in (("clean", out), ("struck", struck)):
        flags, printed = exact_fused.bad_bags(tried, expected, weights, weighted)
        if not torch.equal(flags, exact.exact_bad_bags(tried, expected, None, (weights, weighted))):
            differ.append(f"{label}: flags")
        if not torch.equal(printed, fingerprint_words(tried)):
            differ.append(f"{label}: fingerprint")
    scratch = exact.Scratch()

    def by_torch() -> None:
        exact.exact_bad_bags(out, expected, scratch, (weights, weighted))
        fingerprint_words(out)

    fused_s = _timed(torch, device, lambda: exact_fused.bad_bags(out, expected, weights, weighted), repeats)
    torch_s = _timed(torch, device, by_torch, repeats)
    return _timing("embbag_int8", device, [bags, EMBBAG_DIM], differ, fused_s, torch_s, out.numel() * 4)


def _fingerprints(torch: Any, device: Any, words: int, repeats: int) -> dict[str, Any]:
    """A block of eight outputs' words: the kernel's keyed sums equal torch's, clean and struck."""
    from sdcscan.checks import keyed_sums

    g = torch.Generator(device=device).manual_seed(words)
    halves = torch.randint(-(2**31), 2**31, (8, 2 * words), generator=g, device=device, dtype=torch.int64)
    block = halves.to(torch.int32).view(torch.int64)
    struck = block.clone()
    struck[3, words // 2] ^= 1 << 40
    struck[5, [0, words - 1]] = struck[5, [words - 1, 0]]
    differ = [
        label
        for label, tried in (("clean", block), ("struck", struck))
        if not torch.equal(keyed_sums.by_kernel(tried), keyed_sums.by_torch(tried))
    ]
    fused_s = _timed(torch, device, lambda: keyed_sums.by_kernel(block), repeats)
    torch_s = _timed(torch, device, lambda: keyed_sums.by_torch(block), repeats)
    return _timing("fingerprint", device, [8, words], differ, fused_s, torch_s, block.numel() * 8)


def _fp_tiles(torch: Any, device: Any, shape: tuple[int, ...], repeats: int) -> dict[str, Any]:
    """A block of gemm_fp's bf16 outputs: the kernel's failing rows, columns and repeats and its
    fingerprints equal the torch path's, and its ratio within 10^-3 of torch's, clean and struck."""
    import math

    from sdcscan.checks import tile_verdicts, vabft
    from sdcscan.checks.digest import RepeatDigest

    r, m, k, n = shape
    g = torch.Generator(device=device).manual_seed(m * n)
    a = (torch.randn((m, k), generator=g, device=device).abs() + 0.5).to(torch.bfloat16)
    b = (torch.randn((k, n), generator=g, device=device).abs() + 0.5).to(torch.bfloat16)
    exp = vabft.expected(a, b, vabft.encode(b, torch.float32), torch.float32, 2.0**-6)  # e_max: 4 bf16 ulps
    block = torch.stack([a @ b for _ in range(r)])
    struck = block.clone()
    struck[r - 1, m // 2, n // 3] *= 2  # a lowest exponent bit
    struck[r // 2, m - 1, n - 1] = float("nan")
    struck[0, 1, 0] *= -1  # a sign bit
    differ = []
    for label, tried in (("clean", block), ("struck", struck)):
        fused, reference = tile_verdicts.by_kernel(tried, exp), tile_verdicts.by_torch(tried, exp)
        digest = RepeatDigest()
        digest.add_stack(tried)
        assert fused.fingerprints is not None
        for name, same in (
            ("bad", torch.equal(fused.bad, reference.bad)),
            ("failed", torch.equal(fused.failed, reference.failed)),
            ("fingerprints", torch.equal(fused.fingerprints, digest.sums())),
            ("ratio", math.isclose(float(fused.ratio), float(reference.ratio), rel_tol=1e-3)),
            (
                "caught",
                fused.failed.tolist() == [label == "struck" and i in (0, r // 2, r - 1) for i in range(r)],
            ),
        ):
            if not same:
                differ.append(f"{label}: {name}")

    def by_torch() -> None:
        tile_verdicts.by_torch(block, exp)
        RepeatDigest().add_stack(block)

    fused_s = _timed(torch, device, lambda: tile_verdicts.by_kernel(block, exp), repeats)
    torch_s = _timed(torch, device, by_torch, repeats)
    return _timing("gemm_fp", device, [r, m, n], differ, fused_s, torch_s, block.numel() * 2)


def _golden_block(torch: Any, device: Any, shape: tuple[int, ...], repeats: int) -> dict[str, Any]:
    """A block of matmul_golden's bf16 outputs: the kernel's bad elements per repeat and row equal torch's,
    clean and struck (a low bit, a negated value, NaN, an infinity, and -0.0 where +0.0 is expected: not
    bad)."""
    from sdcscan.checks import golden_compare

    r, m, n = shape
    g = torch.Generator(device=device).manual_seed(m * n + r)
    expected = torch.randint(-4096, 4097, (m, n), generator=g, device=device).to(torch.bfloat16)
    expected[0, :8], expected[1, 1] = 0.0, 3.0
    block = expected.expand(r, m, n).clone()
    struck = block.clone()
    struck.view(torch.int16)[r - 1, m // 2, n // 3] ^= 1
    struck[r // 2, m - 1, n - 1] = float("nan")
    struck[r // 2, 1, 0] = float("inf")
    struck[0, 1, 1] = -3.0  # a sign bit
    struck[0, 0, :8] = -0.0
    caught = [0] * r  # bad elements a repeat of the struck block holds
    caught[0] += 1
    caught[r // 2] += 2
    caught[r - 1] += 1
    differ = []
    for label, tried, bad in (("clean", block, [0] * r), ("struck", struck, caught)):
        fused = torch.zeros((r, m), dtype=torch.int64, device=device)
        reference = torch.zeros_like(fused)
        golden_compare.by_kernel(tried, expected, fused)
        golden_compare.by_torch(tried, expected, reference)
        if not torch.equal(fused, reference):
            differ.append(f"{label}: counts")
        if fused.sum(1).tolist() != bad:
            differ.append(f"{label}: caught")
    counts = torch.zeros((r, m), dtype=torch.int64, device=device)
    fused_s = _timed(torch, device, lambda: golden_compare.by_kernel(block, expected, counts), repeats)
    torch_s = _timed(torch, device, lambda: golden_compare.by_torch(block, expected, counts), repeats)
    return _timing("matmul_golden", device, [r, m, n], differ, fused_s, torch_s, block.numel() * 2)


def _timing(
    workload: str, device: Any, shape: list[int], differ: list[str], fused_s: float, torch_s: float, size: int
) -> dict[str, Any]:
    return {
        "workload": workload,
        "unit": str(device),
        "output": shape,
        "equal": not differ,
        "differ": differ,
        "fused_ms": round(fused_s * 1e3, 3),
        "torch_ms": round(torch_s * 1e3, 3),
        "fused_gb_s": round(size / fused_s / 1e9, 1),
    }


def _cases(device: Any, profile: str, name: str, cases: int) -> list[dict[str, Any]]:
    """The profile's first `cases` cases of `name` with each kernel: status, digest, phase seconds."""
    from sdcscan.checks import keyed_sums
    from sdcscan.costmodel.cases import gpu_params
    from sdcscan.outcomes import Case
    from sdcscan.workloads import load
    from sdcscan.workloads.base import Context

    found = []
    workload_class = load(name)
    for kernel in ("torch", "fused") if cases else ():
        keyed_sums.choose(device, kernel)  # every workload's digests: the kernel or torch
        fused = kernel == "fused"
        params = dict(gpu_params(profile)[name])
        if "check_kernel" in params:
            params["check_kernel"] = kernel
        if device.type == "cpu":
            params = {**params, **workload_class.spec.tiny}
        workload = workload_class(params)
        ctx = Context(unit=str(device), device=device, run_seed=20261129, params=params)
        workload.prepare(ctx)
        for occurrence in range(cases):
            ctx.begin_case(None)
            out = workload.run(ctx, Case(occurrence, name, 7 + occurrence, occurrence, params))
            found.append(
                {
                    "workload": name,
                    "case": occurrence,
                    # "?" where the workload's check or the fingerprint did not take the path asked for
                    "check_kernel": kernel
                    if {getattr(workload, "fused", fused), keyed_sums.chosen(device)} == {fused}
                    else "?",
                    "status": out.status,
                    "digest": out.digest,
                    "check_s": round(ctx.phases.get("check", 0.0), 4),
                    "compute_s": round(ctx.phases.get("compute", 0.0), 4),
                }
            )
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
