"""What gemm_fp's fp64 confirmation keeps (issue 44): the fraction of a product's elements whose relative
error of 10^-2, 10^-3 or 10^-4 lies beyond the bound correct arithmetic cannot exceed
(sdcscan/checks/confirm.py), so that a fault of that size there is confirmed. Prints JSON lines.

Usage: python scripts/bench_confirm_sensitivity.py [--shapes 256x4096x256 512x4096x512 256x1024x256]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sdcscan.checks import confirm

INPUTS = {"N(0,1)": lambda x: x, "|N|+0.5": lambda x: x.abs() + 0.5}  # zero-mean, and gemm_fp's default


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["256x4096x256", "512x4096x512", "256x1024x256"])
    args = ap.parse_args()
    torch.manual_seed(0)
    for text in args.shapes:
        m, k, n = (int(v) for v in text.split("x"))
        for name, shape_of in INPUTS.items():
            a, b = shape_of(torch.randn(m, k)), shape_of(torch.randn(k, n))
            for dtype in (torch.float32, torch.bfloat16, torch.float16):
                x, y = a.to(dtype), b.to(dtype)
                errors = confirm.product_errors(x, y, x @ y)
                seen = {
                    str(rel): round(
                        float(((rel * errors.reference.abs()) > errors.bound + errors.error).double().mean()),
                        4,
                    )
                    for rel in (1e-2, 1e-3, 1e-4)
                }
                print(
                    json.dumps(
                        {
                            "shape": [m, k, n],
                            "inputs": name,
                            "dtype": str(dtype).split(".")[1],
                            "caught": seen,
                        }
                    )
                )


if __name__ == "__main__":
    main()
