"""How far the order of the checker's sums moves gemm_fp's residuals, against their thresholds.

The fused block check (sdcscan/checks/tile_verdicts.py) sums each tile of 8 outputs as a tree and each
line's total per program of 32 columns, where torch sums in its own order; calibration measured e_max
with torch's. For each dtype the kernel covers and two input distributions, one product of the unit's
calibrated e_max is checked both ways on this CPU: prints one JSON line with the clean ratio (max |d|/t)
and the largest shift of a residual between the two orders over its threshold, for tiles and for totals.
Usage: python scripts/tile_sum_order.py [--m 512] [--k 4096] [--n 4096]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for side, default in (("--m", 512), ("--k", 4096), ("--n", 4096)):
        ap.add_argument(side, type=int, default=default)
    args = ap.parse_args()
    import torch

    from sdcscan.calibration import measure as calibration
    from sdcscan.checks import tile_verdicts, vabft

    m, k, n = args.m, args.k, args.n
    if n % 32 or m % 8:
        sys.exit("error: n must be a multiple of 32 and m of 8")
    for dtype, checker in tile_verdicts.COVERED.items():
        name = str(dtype).removeprefix("torch.")
        found = calibration.resolve(
            torch.device("cpu"), name, str(checker).removeprefix("torch."), (m, k, n), ""
        )
        for inputs in ("abs_normal", "normal"):
            g = torch.Generator().manual_seed(1)
            a = calibration.sample(inputs, (m, k), g, dtype)
            b = calibration.sample(inputs, (k, n), g, dtype)
            exp = vabft.expected(a, b, vabft.encode(b, checker), checker, found.e_max, e_mean=found.e_mean)
            x = (a @ b).to(checker)
            by_torch = vabft.checksums(x, checker) - exp.rows
            pairs = x.view(m, n // 8, 8)
            for _ in range(3):  # a tree over each tile: 8 -> 4 -> 2 -> 1
                pairs = pairs[..., 0::2] + pairs[..., 1::2]
            tiles = pairs[..., 0]
            totals = tiles.view(m, n // 32, 4).sum(-1).sum(-1)  # per program of 32 columns, then programs
            by_tree = torch.cat([tiles, totals[:, None]], 1) - exp.rows
            shift = (by_torch - by_tree).abs().double() / exp.row_t
            print(
                json.dumps(
                    {
                        "dtype": name,
                        "checker": str(checker).removeprefix("torch."),
                        "inputs": inputs,
                        "shape": [m, k, n],
                        "clean_ratio": round(float((by_torch.abs().double() / exp.row_t).max()), 4),
                        "tile_shift_over_t": float(shift[:, :-1].max()),
                        "total_shift_over_t": float(shift[:, -1].max()),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
