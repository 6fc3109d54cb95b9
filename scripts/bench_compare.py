#!/usr/bin/env python3
"""Benchmark `sdcscan compare`: wall time and peak memory on simulated fleets of growing size.

Example:
    python scripts/bench_compare.py --json
    python scripts/bench_compare.py --sizes 500,1000 --units 8 --cases 100 --jobs 1
    python scripts/bench_compare.py --sizes '' --big-report-mb 200

For each size it writes a fleet with scripts/simulate_fleet.py, runs compare in a child process
(timed; peak RSS from os.wait4 for that child alone), checks that the findings are exactly the
planted ones, and deletes the fleet. Target: 10,000 hosts x 8 units x 100 cases within 60 s and
4 GB on a 2-core machine, growing linearly. `--jobs` is passed to compare (0: a pool of one reader per
CPU when there are many files; 1: read in one process).

`--big-report-mb N` writes one report of about N MB (8 units, as many cases as it takes) and measures
the peak memory of reading it (`read_reports` alone, in a child) by the unit-by-unit parser compare
uses for large reports and by the whole-document parser, and of the whole `compare` on it; the
ratios to the file size are the point (issue 12: a 200 MB report peaked at 1.6 GB, 8x the file).
A benchmark, not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import hashlib
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


def bench_one(hosts: int, units: int, cases: int, work: Path, jobs: int = 0) -> dict[str, Any]:
    """Simulate one fleet, time compare on it, check its findings, clean up."""
    fleet = work / f"fleet-{hosts}"
    generate_s = simulate(hosts, units, cases, fleet)
    manifest = json.loads((fleet / "planted.json").read_text())
    size = sum(p.stat().st_size for p in (fleet / "reports").rglob("*.json"))
    argv, _ = compare_command()
    argv += [str(fleet / "reports"), "--hosts", str(fleet / "hosts.txt"), "--now", manifest["now"], "--json"]
    argv += ["--jobs", str(jobs)]
    code, wall, rss = run_child(argv, work / "out.json", work / "err.txt")
    found = findings(work / "out.json") if code in (0, 1) else []
    shutil.rmtree(fleet)
    return {
        "hosts": hosts,
        "units": units,
        "cases": cases,
        "jobs": jobs,
        "report_mb": round(size / 2**20, 1),
        "generate_s": round(generate_s, 2),
        "compare_s": round(wall, 2),
        "peak_rss_mb": round(rss, 1),
        "exit_code": code,
        "findings": len(found),
        "exact": found == manifest["expected_findings"],
        "us_per_case": round(wall / (hosts * units * cases) * 1e6, 3),
    }


# ---------------------------------------------------------------------------------------------------
# One large report.

BIG_UNITS = 8
CHUNK_CASES = 100_000  # cases written per piece of text: the generator itself stays small


def write_big_report(path: Path, megabytes: float) -> int:
    """Write one valid report of about `megabytes` MB (8 healthy units), piece by piece; return its bytes."""
    per_case = 57  # bytes of compact JSON per case across the five columns, measured
    cases = max(1, int(megabytes * 2**20 / per_case / BIG_UNITS))
    head = {
        "schema_version": 1,
        "tool": {"name": "sdcscan", "version": "bench"},
        "verdict": "pass",
        "exit_code": 0,
        "run": {
            "id": "bench-big",
            "profile": {"name": "burnin", "sha256": "b" * 64},
            "seed": 7,
            "budget_s": 86400.0,
            "duration_s": 86400.0,
            "started_at": "2025-06-01T00:00:00Z",
            "ended_at": "2025-06-02T00:00:00Z",
        },
        "host": {"hostname": "big-host"},
    }
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps(head, separators=(",", ":"))[:-1] + ',"units":[')
        for u in range(BIG_UNITS):
            f.write("," if u else "")
            _write_big_unit(f, f"cpu:{u}", cases)
        f.write('],"mismatches":[],"findings":[]}\n')
    return path.stat().st_size


def _write_big_unit(f: Any, uid: str, cases: int) -> None:
    """One unit's record with `cases` cases, each column written in pieces of CHUNK_CASES."""
    meta = {
        "id": uid,
        "kind": "cpu",
        "cohort": "big-cohort",
        "verdict": "pass",
        "reason": None,
        "cases_run": cases,
        "workloads": ["matmul_golden", "train"],
        "mismatches": 0,
    }
    columns = {
        "index": lambda i: str(i),
        "workload": lambda i: '"train"' if i % 2 == 0 else '"matmul_golden"',
        "digest": lambda i: '"' + hashlib.blake2b(str(i).encode(), digest_size=8).hexdigest() + '"',
        "status": lambda i: '"ok"',
        "seconds": lambda i: repr(0.0123456789 + (i % 97) * 1e-6),
    }
    f.write(json.dumps(meta, separators=(",", ":"))[:-1] + ',"cases":{')
    for c, (name, cell) in enumerate(columns.items()):
        f.write(("," if c else "") + f'"{name}":[')
        for start in range(0, cases, CHUNK_CASES):
            piece = ",".join(cell(i) for i in range(start, min(cases, start + CHUNK_CASES)))
            f.write(("," if start else "") + piece)
        f.write("]")
    f.write("}}")


READ_ONLY = (
    "import sys, sdcscan.fleet.reading as r, sdcscan.fleet.report_file as f; "
    "f.STREAM_UNITS_ABOVE = int(sys.argv[2]); "
    "reports, skipped = r.read_reports([sys.argv[1]], workers=1); assert reports and not skipped, skipped"
)


def bench_big(megabytes: float, work: Path) -> dict[str, Any]:
    """Peak RSS of reading one large report (unit by unit, whole document) and of compare on it."""
    path = work / "big.json"
    size = write_big_report(path, megabytes)
    out, err = work / "out.txt", work / "err.txt"
    baseline = run_child([sys.executable, "-c", "import sdcscan.fleet.reading"], out, err)[2]
    record: dict[str, Any] = {"report_mb": round(size / 2**20, 1), "interpreter_rss_mb": round(baseline, 1)}
    for name, threshold in (("unit_by_unit", 0), ("whole_document", 1 << 62)):
        code, wall, rss = run_child([sys.executable, "-c", READ_ONLY, str(path), str(threshold)], out, err)
        record[f"read_{name}"] = {
            "exit_code": code,
            "seconds": round(wall, 2),
            "peak_rss_mb": round(rss, 1),
            "peak_over_file": round(rss / (size / 2**20), 2),
        }
    argv, _ = compare_command()
    code, wall, rss = run_child([*argv, str(path), "--json", "--jobs", "1"], out, err)
    record["compare"] = {
        "exit_code": code,
        "seconds": round(wall, 2),
        "peak_rss_mb": round(rss, 1),
        "peak_over_file": round(rss / (size / 2**20), 2),
    }
    path.unlink()
    return record


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,3000,10000", help="host counts, comma-separated")
    ap.add_argument("--units", type=int, default=8)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=0, help="compare --jobs (0: automatic)")
    ap.add_argument("--big-report-mb", type=float, default=0, help="also measure one report of this size")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument(
        "--workdir", type=Path, default=None, help="where fleets are written (default: a temp dir)"
    )
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sdcscan-bench-", dir=args.workdir))
    try:
        records: list[dict[str, Any]] = []
        for hosts in (int(s) for s in args.sizes.split(",") if s):
            records.append(bench_one(hosts, args.units, args.cases, work, args.jobs))
            if not args.json:
                print(json.dumps(records[-1]), flush=True)
        big = bench_big(args.big_report_mb, work) if args.big_report_mb else None
        if big and not args.json:
            print(json.dumps({"big_report": big}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "entry": compare_command()[1],
        "note": "shared machine; other jobs may run concurrently",
    }
    if args.json:
        doc = {"benchmark": "compare", "machine": machine, "records": records, "big_report": big}
        print(json.dumps(doc, indent=2))
    big_ok = big is None or all(big[k]["exit_code"] == 0 for k in ("read_unit_by_unit", "compare"))
    return 0 if all(r["exact"] for r in records) and big_ok else 1


if __name__ == "__main__":
    sys.exit(main())
