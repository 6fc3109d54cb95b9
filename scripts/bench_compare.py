#!/usr/bin/env python3
"""Benchmark `sdcscan compare`: wall time and peak memory on simulated fleets of growing size.

Example:
    python scripts/bench_compare.py --json
    python scripts/bench_compare.py --sizes 500,1000 --units 8 --cases 100

For each size it writes a fleet with scripts/simulate_fleet.py, runs compare in a child process
(timed; peak RSS from os.wait4 for that child alone), checks that the findings are exactly the
planted ones, and deletes the fleet. Target: 10,000 hosts x 8 units x 100 cases within 60 s and
4 GB on a 2-core machine, growing linearly. A benchmark, not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def compare_command() -> tuple[list[str], str]:
    """`python -m sdcscan compare`, from this checkout (run_child puts it on PYTHONPATH)."""
    return [sys.executable, "-m", "sdcscan", "compare"], "python -m sdcscan compare"


def run_child(argv: list[str], stdout: Path, stderr: Path) -> tuple[int, float, float]:
    """Run a child; return (exit code, wall seconds, peak RSS MiB of that child)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with stdout.open("wb") as out, stderr.open("wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=ROOT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, wall, usage.ru_maxrss / 1024  # ru_maxrss is KiB on Linux


def findings(path: Path) -> list[dict[str, Any]]:
    """(host, unit, kind) of every finding in a `compare --json` output, sorted like the manifest."""
    doc = json.loads(path.read_text())
    found = [{"host": f["host"], "unit": f["unit"], "kind": f["kind"]} for f in doc["findings"]]
    return sorted(found, key=lambda e: (e["kind"], e["host"], e["unit"] or ""))


def simulate(hosts: int, units: int, cases: int, fleet: Path) -> float:
    """Write a fleet with the simulator; return the seconds it took."""
    t0 = time.perf_counter()
    sim = [sys.executable, str(ROOT / "scripts" / "simulate_fleet.py"), "--hosts", str(hosts)]
    sim += ["--units", str(units), "--cases", str(cases), "--out", str(fleet), "--seed", "1"]
    subprocess.run(sim, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def bench_one(hosts: int, units: int, cases: int, work: Path) -> dict[str, Any]:
    """Simulate one fleet, time compare on it, check its findings, clean up."""
    fleet = work / f"fleet-{hosts}"
    generate_s = simulate(hosts, units, cases, fleet)
    manifest = json.loads((fleet / "planted.json").read_text())
    size = sum(p.stat().st_size for p in (fleet / "reports").rglob("*.json"))
    argv, _ = compare_command()
    argv += [str(fleet / "reports"), "--hosts", str(fleet / "hosts.txt"), "--now", manifest["now"], "--json"]
    code, wall, rss = run_child(argv, work / "out.json", work / "err.txt")
    found = findings(work / "out.json") if code in (0, 1) else []
    shutil.rmtree(fleet)
    return {
        "hosts": hosts,
        "units": units,
        "cases": cases,
        "report_mb": round(size / 2**20, 1),
        "generate_s": round(generate_s, 2),
        "compare_s": round(wall, 2),
        "peak_rss_mb": round(rss, 1),
        "exit_code": code,
        "findings": len(found),
        "exact": found == manifest["expected_findings"],
        "us_per_case": round(wall / (hosts * units * cases) * 1e6, 3),
    }


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,3000,10000", help="host counts, comma-separated")
    ap.add_argument("--units", type=int, default=8)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument(
        "--workdir", type=Path, default=None, help="where fleets are written (default: a temp dir)"
    )
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sdcscan-bench-", dir=args.workdir))
    try:
        records = []
        for hosts in (int(s) for s in args.sizes.split(",")):
            records.append(bench_one(hosts, args.units, args.cases, work))
            if not args.json:
                print(json.dumps(records[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "entry": compare_command()[1],
        "note": "shared machine; other jobs may run concurrently",
    }
    if args.json:
        print(json.dumps({"benchmark": "compare", "machine": machine, "records": records}, indent=2))
    return 0 if all(r["exact"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
