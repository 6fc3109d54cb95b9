#!/usr/bin/env python3
"""Benchmark `compare --from DIR` on DuckDB and on Spark (`--engine spark`) over the same datasets.

Example:
    python scripts/bench_spark.py --sizes 10000,100000
    python scripts/bench_spark.py --sizes 2000 --master 'local[2]'

For each size it writes a fleet of HOSTS x 8 units x 100 cases straight into a dataset, as
scripts/bench_parquet.py does (its `generate`: the faults of scripts/simulate_fleet.py planted), then
runs compare --from with --hosts once per engine, each in a child process: DuckDB
(`compare.compare_from`) and Spark (`engine_spark.compare_from_spark`, a local session). Each child
writes the whole document; both documents must be equal, and their findings exactly the planted ones.

It prints one JSON line per size: per engine the child's wall time, the time of the compare itself
(for Spark, after its session started: `session_s`), and peak RSS (the child's own; for Spark also its
JVM's, which holds the data). A benchmark, not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import simulate_fleet as sim  # noqa: E402
from bench_compare import run_child  # noqa: E402  (scripts/ is on sys.path, above)
from bench_parquet import disk_mb, findings, generate  # noqa: E402

# One child per engine: compare --from, the document to a file, its own timings and peak RSS on stdout.
CHILD = """
import json, resource, sys, time
from sdcscan.fleet.compare import Options, compare_from
from sdcscan.fleet.reading import read_hosts
from sdcscan.timefmt import parse_iso_utc
engine, root, now, hosts, out, master = sys.argv[1:7]
opts = Options(hosts=read_hosts(hosts), now=parse_iso_utc(now))
record = {}
if engine == "duckdb":
    started = time.perf_counter()
    summary = compare_from(root, opts)
else:
    from pyspark.sql import SparkSession
    from sdcscan.fleet.engine_spark import compare_from_spark
    started = time.perf_counter()
    builder = SparkSession.builder.master(master).config("spark.ui.showConsoleProgress", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    record["session_s"] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    summary = compare_from_spark(root, opts, master=master)
record["compare_s"] = round(time.perf_counter() - started, 1)
with open(out, "w") as f:
    json.dump(summary.to_dict(), f)
if engine == "spark":
    try:  # the JVM (spark-submit execs java, so it keeps the launched pid): its peak resident memory
        status = open(f"/proc/{spark.sparkContext._gateway.proc.pid}/status").read()
        record["jvm_peak_rss_mb"] = round(int(status.split("VmHWM:")[1].split()[0]) / 1024, 1)
    except (OSError, IndexError, AttributeError):
        pass
    spark.stop()
record["python_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
print(json.dumps(record))
"""


def run_engine(engine: str, work: Path, master: str) -> dict[str, Any]:
    """One engine's compare --from in a child: its timings, peak RSS and exit code."""
    argv = [sys.executable, "-c", CHILD, engine, str(work / "dataset"), sim.iso(sim.NOW)]
    argv += [str(work / "hosts.txt"), str(work / f"{engine}.json"), master]
    out, err = work / f"{engine}.out", work / f"{engine}.err"
    code, wall, _ = run_child(argv, out, err)
    record: dict[str, Any] = {"exit_code": code, "wall_s": round(wall, 1)}
    if code == 0:
        record.update(json.loads(out.read_text().splitlines()[-1]))
    else:
        record["stderr"] = err.read_text()[-2000:]
    return record


def bench(hosts: int, units: int, cases: int, work: Path, master: str) -> dict[str, Any]:
    """Generate one fleet into Parquet, compare --from on both engines, check the documents, clean up."""
    fleet, generate_s = generate(hosts, units, cases, work)
    record: dict[str, Any] = {
        "hosts": hosts,
        "units": units,
        "cases": cases,
        "case_rows": hosts * units * cases,
        "generate_s": round(generate_s, 1),
        "dataset_mb": disk_mb(work / "dataset"),
        "duckdb": run_engine("duckdb", work, master),
        "spark": run_engine("spark", work, master),
        "master": master,
    }
    docs = [work / f"{e}.json" for e in ("duckdb", "spark")]
    if all(d.exists() for d in docs):
        record["same_document"] = json.loads(docs[0].read_text()) == json.loads(docs[1].read_text())
        record["exact"] = findings(docs[0]) == fleet.expected()
    for path in (work / "dataset", *docs):
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    return record


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="hosts, comma-separated")
    ap.add_argument("--units", type=int, default=8)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--master", default="local[*]", help="Spark's master (default: local[*])")
    ap.add_argument("--workdir", type=Path, default=None, help="where fleets are written (default: temp)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sdcscan-bench-spark-", dir=args.workdir))
    records: list[dict[str, Any]] = []
    try:
        for hosts in (int(s) for s in args.sizes.split(",") if s):
            records.append(bench(hosts, args.units, args.cases, work, args.master))
            print(json.dumps(records[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "note": "shared machine"}
    print(json.dumps({"benchmark": "compare --from, DuckDB and Spark", "machine": machine}), flush=True)
    return 0 if all(r.get("same_document") and r.get("exact") for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
