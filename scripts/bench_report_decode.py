"""Decode speed and peak memory of reading one large report, as every reader reads it (`load_report`).

Usage:
    python scripts/bench_report_decode.py [--mb 200] [--repeat 3] [--tree DIR ...]

Writes one valid report of about `--mb` MB (8 units; bench_compare's generator), then reads it in a
fresh child process per repeat: `json.loads` alone (the floor: parsing, no checking) and
`sdcscan.report.load_report` (parsing and validation against the declared types). Each `--tree DIR`
is another checkout of sdcscan measured in the same run (its `load_report`, imported from DIR), so
that an old and a new tree are compared on one machine at one time. Prints JSON: per reader the
median seconds and the median peak RSS of the child, and the ratios to the floor.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_compare import write_big_report

FLOOR = "import json, sys; json.loads(open(sys.argv[1], 'rb').read())"
LOAD = "import sys; from sdcscan.report import load_report; load_report(sys.argv[1])"
MEASURE = (
    "import resource, sys, time; code = sys.argv.pop(1); t = time.perf_counter(); exec(code); "
    "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
)


def measure(code: str, path: Path, tree: str | None) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of running `code` on the report in a fresh interpreter."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = tree  # ahead of the installed sdcscan
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, code, str(path)], env=env, capture_output=True, text=True, check=True
    )
    seconds, rss = out.stdout.split()
    return float(seconds), float(rss)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200.0, help="size of the report to write (MB)")
    ap.add_argument("--repeat", type=int, default=3, help="children per reader; medians are reported")
    ap.add_argument("--tree", action="append", default=[], help="another sdcscan checkout to measure too")
    args = ap.parse_args(argv)
    readers: list[tuple[str, str, str | None]] = [
        ("json.loads only", FLOOR, None),
        ("load_report", LOAD, None),
    ]
    readers += [(f"load_report of {tree}", LOAD, tree) for tree in args.tree]
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "big.json"
        size = write_big_report(path, args.mb)
        results = {}
        for name, code, tree in readers:
            runs = [measure(code, path, tree) for _ in range(args.repeat)]
            results[name] = {
                "seconds": round(statistics.median(r[0] for r in runs), 2),
                "peak_rss_mb": round(statistics.median(r[1] for r in runs), 1),
            }
    floor = results["json.loads only"]
    for record in results.values():
        record["seconds_over_floor"] = round(record["seconds"] / floor["seconds"], 2)
        record["rss_over_floor"] = round(record["peak_rss_mb"] / floor["peak_rss_mb"], 2)
    machine = {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()}
    doc = {
        "benchmark": "report_decode",
        "report_mb": round(size / 2**20, 1),
        "machine": machine,
        "readers": results,
    }
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
