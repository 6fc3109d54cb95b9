"""Overhead of the int8 ABFT checks: plain op versus op + check, timed in the same run (dev-only script).

    python scripts/bench_abft_int8.py [--json] [--threads N] [--repeats N]

gemm_int8: plain = torch._int_mm(A_u8, W.t()); checked = _int_mm(A_u8, W_ext.t()) + verify. The weight
is encoded once per case (offline in the paper), so encoding is not timed. embbag_int8: plain = the
FBGEMM EmbeddingBag; checked = EmbeddingBag + the per-bag checksum check of the mode. Each record is
the median over --repeats interleaved calls after one warm-up. `records()` is imported by
scripts/bench_abft.py, which merges the records of every ABFT workload.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from sdcscan.checks import embbag, int8

GEMM_SHAPES = [(1, 3200, 800), (16, 512, 1024), (64, 512, 512), (64, 1024, 1024), (128, 1024, 1024)]
EMBBAG_CONFIGS = [(1_000_000, 64, 32768, (20, 100)), (1_000_000, 128, 16384, (20, 100))]  # rows, D, bags, L


def _median_pair(plain: Callable[[], Any], checked: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Median seconds of each, interleaved so that drift in machine load hits both alike."""
    plain(), checked()  # warm-up
    tp, tc = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        plain()
        tp.append(time.perf_counter() - t)
        t = time.perf_counter()
        checked()
        tc.append(time.perf_counter() - t)
    return statistics.median(tp), statistics.median(tc)


def gemm_records(repeats: int) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(1)
    out = []
    for m, k, n in GEMM_SHAPES:
        a = torch.randint(0, 256, (m, k), generator=g, dtype=torch.uint8)
        w = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
        for scheme in int8.SCHEMES:
            w_ext = int8.encode_weight(w, scheme)
            plain = partial(torch._int_mm, a, w.t())
            checked = partial(_gemm_checked, a, w_ext, n, scheme)
            plain_s, checked_s = _median_pair(plain, checked, repeats)
            out.append(_record("gemm_int8", scheme, [m, k, n], plain_s, checked_s))
    return out


def _gemm_checked(a: torch.Tensor, w_ext: torch.Tensor, n: int, scheme: str) -> bool:
    return bool(int8.verify(torch._int_mm(a, w_ext.t()), n, scheme).bad.any())


def embbag_records(repeats: int) -> list[dict[str, Any]]:
    out = []
    for rows, dim, bags, (lo, hi) in EMBBAG_CONFIGS:
        g = torch.Generator().manual_seed(2)
        q = torch.randint(0, 256, (rows, dim), generator=g, dtype=torch.uint8)
        packed = embbag.dyadic_pack(q, torch.randint(-255, 1, (rows,), generator=g))
        lengths = torch.randint(lo, hi + 1, (bags,), generator=g)
        idx = torch.randint(0, rows, (int(lengths.sum()),), generator=g)
        plain = partial(_embbag, packed, idx, torch.cumsum(lengths, 0) - lengths)
        # The realistic check's cost does not depend on how the table was quantized, so one table serves.
        for mode, check in (("exact", _exact_check), ("realistic", _realistic_check)):
            sums: Any = (
                embbag.exact_row_sums(packed)
                if mode == "exact"
                else (packed, embbag.row_stats(packed, 8, weighted=False))
            )
            checked = partial(check, plain, sums, idx, lengths)
            plain_s, checked_s = _median_pair(plain, checked, repeats)
            out.append(_record("embbag_int8", mode, [rows, dim, bags, lo, hi], plain_s, checked_s))
    return out


def _embbag(packed: torch.Tensor, idx: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return torch.ops.quantized.embedding_bag_byte_rowwise_offsets(
        packed, idx, offsets, False, 0, False, None, None, False
    )


def _exact_check(
    plain: Callable[[], torch.Tensor], sums: Any, idx: torch.Tensor, lengths: torch.Tensor
) -> bool:
    expected = embbag.exact_expected(sums, idx, lengths, None)
    return bool(embbag.exact_bad_bags(plain(), expected).any())


def _realistic_check(
    plain: Callable[[], torch.Tensor], sums: Any, idx: torch.Tensor, lengths: torch.Tensor
) -> bool:
    """The two-level check (trigger, then recompute of flagged bags); `sums` is (packed, row_stats)."""
    packed, stats = sums
    return bool(embbag.realistic_check(plain(), packed, stats, idx, lengths, None).bad.any())


def _record(
    workload: str, variant: str, shape: list[int], plain_s: float, checked_s: float
) -> dict[str, Any]:
    return {
        "workload": workload,
        "variant": variant,
        "shape": shape,
        "plain_s": plain_s,
        "checked_s": checked_s,
    }


def records(repeats: int = 5, threads: int = 1) -> list[dict[str, Any]]:
    """Benchmark records for gemm_int8 and embbag_int8 (one thread by default, as a per-core unit runs)."""
    torch.set_num_threads(threads)
    return gemm_records(repeats) + embbag_records(repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the records as JSON on stdout")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    recs = records(args.repeats, args.threads)
    if args.json:
        print(json.dumps(recs, indent=1))
        return
    for r in recs:
        overhead = r["checked_s"] / r["plain_s"] - 1
        print(
            f"{r['workload']:12s} {r['variant']:9s} {r['shape']!s:28s} plain {r['plain_s'] * 1e3:9.3f} ms"
            f"  checked {r['checked_s'] * 1e3:9.3f} ms  overhead {overhead:+7.1%}"
        )


if __name__ == "__main__":
    main()
