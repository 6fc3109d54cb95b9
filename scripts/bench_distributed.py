#!/usr/bin/env python3
"""Measure a distributed run on this machine: the share of time in digest exchange and in lockstep
agreement, and the achieved bus bandwidth per collective and size; prints JSON.

Example:
    python scripts/bench_distributed.py                        # 4 gloo ranks, 60 s
    python scripts/bench_distributed.py --ranks 2 --budget 30 --workloads train,collective

It runs `sdcscan run --distributed --standalone` once, in a fresh state directory, and reads the
cluster report: `run.distributed.lockstep` (per rank: seconds in the agreements before distributed
cases, which is mostly waiting for the slowest rank, and seconds in the live digest exchange) and
`run.distributed.bandwidth` (rank 0's algbw and busbw, nccl-tests' definitions). The target of
issue 13: the digest exchange costs at most 1% of the run. A benchmark, not a test: numbers depend
on the machine (on CPU ranks share cores; on GPUs run it on a GPU node); ratios travel best.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=4, help="ranks on this machine (default 4)")
    parser.add_argument("--budget", type=int, default=60, help="seconds (default 60)")
    parser.add_argument(
        "--workloads", help="comma-separated workloads (default: the profile's plus collective, train_dp)"
    )
    parser.add_argument("--profile", default="quick")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="sdcscan-bench-") as tmp:
        out = Path(tmp) / "cluster.json"
        cmd = [
            sys.executable,
            "-m",
            "sdcscan",
            "run",
            "--distributed",
            "--standalone",
            "--nproc-per-node",
            str(args.ranks),
            "--budget",
            f"{args.budget}s",
            "--profile",
            args.profile,
            "--out",
            str(out),
        ]
        if args.workloads:
            cmd += ["--workloads", args.workloads]
        env = {**os.environ, "XDG_STATE_HOME": str(Path(tmp) / "state")}
        started = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        wall = time.monotonic() - started
        if not out.exists():
            print(done.stderr[-2000:], file=sys.stderr)
            return 3
        report = json.loads(out.read_text())
    world = report["run"]["distributed"]
    lockstep = world.get("lockstep", [])
    print(
        json.dumps(
            {
                "machine": _machine(),
                "ranks": args.ranks,
                "budget_s": args.budget,
                "wall_s": round(wall, 1),
                "exit_code": done.returncode,
                "verdict": report["verdict"],
                "cases_per_rank": {u["id"]: u["cases_run"] for u in report["units"]},
                "digest_exchange_share": _shares(lockstep, "exchange_s"),
                "agreement_share": _shares(lockstep, "agree_s"),
                "exchanges": [r.get("exchanges") for r in lockstep],
                "cases_compared_live": [r.get("cases_compared") for r in lockstep],
                "bandwidth": world.get("bandwidth", []),
            },
            indent=2,
        )
    )
    return 0


def _shares(lockstep: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Per rank, `key` seconds over the rank's run; and the largest."""
    shares = [
        round((r.get(key) or 0.0) / r["duration_s"], 5) if r.get("duration_s") else None for r in lockstep
    ]
    known = [s for s in shares if s is not None]
    return {"per_rank": shares, "max": max(known) if known else None}


def _machine() -> dict[str, Any]:
    import torch

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model or platform.processor(),
        "cpus": os.cpu_count(),
        "isa": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    }


if __name__ == "__main__":
    sys.exit(main())
