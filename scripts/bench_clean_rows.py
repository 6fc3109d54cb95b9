"""False positives of gemm_fp's row and column checks over many clean rows, at this device's own e_max.

Usage: python scripts/bench_clean_rows.py --dtype bfloat16 --shape 128 1024 256 --rows 1000000
Prints JSON: the e_max used and where it came from (as `sdcscan run` resolves it: cache, else a fresh
measurement), then per input distribution the clean rows and columns checked, how many fired (a false
positive) and the largest |D|/T seen (the headroom the threshold kept: 1.0 would fire).

Distributions: the calibration's own zero-mean, heavy-tailed and outlier-channel ones, and three it
never saw, drawn with numpy's generator (not torch's): Laplace, a Student-t with 2.5 degrees of
freedom, and per-column log-normal scales (channels spanning about four decades), so a threshold fitted
to the calibration's inputs is tested on inputs it was not fitted to.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CALIBRATION_SET = ("normal", "student_t3", "llm_like", "row_scales")
UNSEEN = ("laplace", "student_t2_5", "lognormal_channels")


def unseen(name: str, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Operands from distributions the calibration never measured (numpy's generator, float32)."""
    if name == "laplace":
        return rng.laplace(0.0, 1.0, shape).astype(np.float32)
    if name == "student_t2_5":
        return rng.standard_t(2.5, shape).astype(np.float32)
    if name == "lognormal_channels":  # zero-mean, each column its own scale, about 4 decades between them
        return (rng.standard_normal(shape) * rng.lognormal(0.0, 2.0, (1, shape[1]))).astype(np.float32)
    raise ValueError(name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32", "float64"])
    ap.add_argument("--shape", type=int, nargs=3, default=[128, 1024, 256], metavar=("M", "K", "N"))
    ap.add_argument("--rows", type=int, default=1_000_000, help="clean rows per distribution")
    ap.add_argument("--dists", default=",".join(CALIBRATION_SET + UNSEEN))
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    import torch

    from sdcscan.calibration import measure as calibration
    from sdcscan.checks import vabft

    torch.set_num_threads(1)
    dtype, (m, k, n) = calibration.DTYPES[args.dtype], args.shape
    checker_name = calibration.CHECKERS[args.dtype][0]
    checker = calibration.DTYPES[checker_name]
    device = torch.device("cpu")
    found = calibration.resolve(device, args.dtype, checker_name, (m, k, n))
    if found.e_max is None:
        sys.exit(f"no e_max on this device: {found.refused}")
    out: dict[str, object] = {
        "dtype": args.dtype,
        "checker": checker_name,
        "shape": [m, k, n],
        "e_max": found.e_max,
        "source": found.source,
        "ceiling": found.ceiling,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "per_distribution": {},
    }
    g, rng = torch.Generator().manual_seed(args.seed), np.random.default_rng(args.seed)
    for dist in args.dists.split(","):
        start, rows, cols, bad_rows, bad_cols, worst = time.perf_counter(), 0, 0, 0, 0, 0.0
        while rows < args.rows:
            if dist in calibration.DISTRIBUTIONS:
                a = calibration.sample(dist, (m, k), g, dtype)
                b = calibration.sample(dist, (k, n), g, dtype)
            else:
                a = torch.from_numpy(unseen(dist, (m, k), rng)).to(dtype)
                b = torch.from_numpy(unseen(dist, (k, n), rng)).to(dtype)
            exp = vabft.expected(a, b, vabft.encode(b, checker), checker, found.e_max)
            r, c = vabft.verify(a @ b, exp)
            rows, cols = rows + m, cols + n
            bad_rows, bad_cols = bad_rows + int(r.bad.sum()), bad_cols + int(c.bad.sum())
            worst = max(worst, r.ratio(), c.ratio())
        out["per_distribution"][dist] = {  # type: ignore[index]
            "rows": rows,
            "columns": cols,
            "false_positive_rows": bad_rows,
            "false_positive_columns": bad_cols,
            "max_ratio": round(worst, 4),
            "seconds": round(time.perf_counter() - start, 1),
        }
        print(f"{dist}: {out['per_distribution'][dist]}", file=sys.stderr)  # type: ignore[index]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
