#!/usr/bin/env python3
"""Benchmark the Parquet path, `sdcscan compare --from DIR`, on fleets generated straight into Parquet.

Example:
    python scripts/bench_parquet.py --sizes 10000,100000,1000000
    python scripts/bench_parquet.py --sizes 1000 --json-sizes 1000,10000   # also the JSON path

For each size it writes a fleet of HOSTS x 8 units x 100 cases straight into a dataset (the layout of
`sdcscan.fleet.dataset`, no JSON at all), with the faults of scripts/simulate_fleet.py planted by its
own `pick_faults` and `unit_plans` (a partition group, persistent and intermittent digest faults,
invariant failures, slow and invalid units, a stale and two missing hosts). Then it runs compare --from
with --hosts in a child process and records its wall time and peak RSS (os.wait4, that child alone),
the dataset's size on disk, and whether the findings are exactly the planted ones.

`--json-sizes` writes fleets as JSON reports with scripts/simulate_fleet.py and times, on the same
files: `compare` (the JSON path), `ingest` into a dataset, and `compare --from` on it; the findings of
both paths must be identical.

The child calls `sdcscan.fleet.compare.compare_from` (what `compare --from` runs, without the table
drawn on stderr) and writes what was found (host, unit, kind; `--full-json`: the whole document, as
`compare --json` does); `--cli` runs `python -m sdcscan compare --from --json` instead. The JSON-path
comparison always uses whole documents. A benchmark, not a test:
numbers depend on the machine. Targets (issue 12): 100k hosts within 60 s and 2 GB, 1M hosts within
10 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import numpy as np  # noqa: E402
import pyarrow as pa  # type: ignore[import-untyped]  # noqa: E402
import simulate_fleet as sim  # noqa: E402
from bench_compare import run_child  # noqa: E402  (scripts/ is on sys.path, above)

from sdcscan.fleet.case_rows import digest_key  # noqa: E402
from sdcscan.fleet.dataset import DatasetWriter, prepare_dataset  # noqa: E402
from sdcscan.fleet.tables import comparison_group, partition_of, report_id  # noqa: E402

CHUNK_HOSTS = 4096  # hosts generated at a time: bounds the generator's memory
UNIT_REASON = "digest disagrees with the host's other units"
INVALID_REASON = "worker died before its first case"

CHILD = """
import json, sys
from sdcscan.fleet.compare import Options
from sdcscan.fleet.reading import read_hosts
from sdcscan.fleet.compare import compare_from
from sdcscan.timefmt import parse_iso_utc
root, now, hosts, full = sys.argv[1:5]
summary = compare_from(root, Options(hosts=read_hosts(hosts), now=parse_iso_utc(now)))
if full == "full":
    json.dump(summary.to_dict(), sys.stdout)
else:  # what was found, without evidence: see --full-json
    found = [{"host": f.host, "unit": f.unit, "kind": f.kind} for f in summary.findings]
    json.dump({"exit_code": summary.exit_code, "findings": found}, sys.stdout)
sys.exit(summary.exit_code)
"""


# ---------------------------------------------------------------------------------------------------
# A simulated fleet, written as Parquet rows.


def _dictionary(indices: np.ndarray, values: list[str], null: np.ndarray | None = None) -> pa.Array:
    """A dictionary-encoded string column (written to Parquet as is: no hashing of every value)."""
    return pa.DictionaryArray.from_arrays(pa.array(indices.astype(np.int32), mask=null), pa.array(values))


class FleetWriter:
    """Generates a simulated fleet chunk by chunk, as the rows `sdcscan ingest` would write for it."""

    def __init__(self, hosts_n: int, units_n: int, cases: int, seed: int) -> None:
        self.units_n, self.cases = units_n, cases
        rng = random.Random(seed)
        self.week_seed = 1000 + seed
        self.hosts = [f"host{i:07d}" for i in range(hosts_n)]
        self.faults = sim.pick_faults(rng, self.hosts, units_n, cases)
        self.plans = sim.unit_plans(rng, self.faults, self.hosts, units_n, cases)
        faulty = {f["host"] for f in self.faults}
        self.stale_host = next(h for h in reversed(self.hosts) if h not in faulty)
        self.by_host: dict[int, list[tuple[int, Any]]] = {}  # host number -> (unit number, plan)
        for (host, uid), plan in self.plans.items():
            self.by_host.setdefault(int(host[4:]), []).append((int(uid.split(":")[1]), plan))
        self.np = np.random.default_rng(seed)
        self.now = sim.NOW.timestamp()
        # Dictionaries: the correct digest of each (cohort, case), then the wrong ones as they appear.
        # The correct digest of each (cohort, case); each chunk adds the wrong digests it holds to its own
        # copy (a dictionary shared by every chunk would grow with the fleet, and be written with every
        # row group).
        self.digests = [sim.hexdigest(c, self.week_seed, i) for c in sim.COHORTS for i in range(cases)]
        self.digest_keys = [digest_key(d) for d in self.digests]
        self.unit_ids = [f"cpu:{u}" for u in range(units_n)]
        self.groups = np.array([comparison_group(sim.PROFILE_SHA, self.week_seed, c) for c in sim.COHORTS])

    def write(self, writer: DatasetWriter) -> None:
        """Every host's rows, CHUNK_HOSTS hosts at a time."""
        for start in range(0, len(self.hosts), CHUNK_HOSTS):
            self._chunk(writer, np.arange(start, min(len(self.hosts), start + CHUNK_HOSTS)))

    def _chunk(self, writer: DatasetWriter, host_idx: np.ndarray) -> None:
        n_units, cases = self.units_n, self.cases
        ages = self.np.integers(0, 7 * 86400, size=len(host_idx)).astype(np.float64)
        stale = int(self.stale_host[4:])
        ages[host_idx == stale] = timedelta(days=90).total_seconds()
        ended = self.now - ages
        day = (ended // 86400).astype(np.int64)
        order = np.argsort(day, kind="stable")  # rows of one day contiguous: one slice per partition
        host_idx, ended, day = host_idx[order], ended[order], day[order]
        h = len(host_idx)
        cohort = (host_idx % 4 == 3).astype(np.int32)
        rids = np.array([report_id("bench", int(i)) for i in host_idx], dtype=np.int64)
        # Cases per unit: a fifth of healthy units ran 1-3 fewer (budget), as simulate_fleet does.
        n = np.full(h * n_units, cases, dtype=np.int64)
        short = self.np.random(h * n_units) < 0.2
        n[short] -= self.np.integers(1, 4, size=int(short.sum()))
        speed = np.ones(h * n_units)
        plans: dict[int, Any] = {}
        for k, i in enumerate(host_idx):
            for u, plan in self.by_host.get(int(i), ()):
                plans[k * n_units + u] = plan
                n[k * n_units + u] = plan.cases
                speed[k * n_units + u] = plan.speed
        starts = np.concatenate(([0], np.cumsum(n)[:-1]))
        total = int(n.sum())
        unit_host = np.repeat(np.arange(h), n_units)
        row_unit = np.repeat(np.arange(h * n_units), n)
        case_index = np.arange(total, dtype=np.int64) - np.repeat(starts, n)
        digest = cohort[unit_host][row_unit] * cases + case_index
        null = np.zeros(total, dtype=bool)
        mismatch: dict[int, int] = {}
        digests, keys = list(self.digests), list(self.digest_keys)
        for k, plan in plans.items():
            for i, wrong in plan.wrong.items():
                if i < n[k]:
                    digests.append(wrong)
                    keys.append(digest_key(wrong))
                    digest[starts[k] + i] = len(digests) - 1
            if plan.mismatch_at is not None:
                null[starts[k] + plan.mismatch_at] = True
                mismatch[k] = plan.mismatch_at
        throughput, tp_unit = self._throughput(rids, cohort, n, speed)
        tables = {
            "cases": self._cases(
                rids, cohort, unit_host, row_unit, case_index, (digest, digests, keys), null
            ),
            "units": self._units(rids, cohort, n, plans, mismatch),
            "throughput": throughput,
            "reports": self._reports(host_idx, rids, ended, n, plans),
        }
        rows_of = {  # each row's host (its position in this chunk): ascending in every table
            "cases": unit_host[row_unit],
            "units": unit_host,
            "throughput": tp_unit // n_units,
            "reports": np.arange(h),
        }
        plan = (sim.PROFILE_SHA, self.week_seed)
        for d in np.unique(day):
            hosts_of_day = np.flatnonzero(day == d)
            first, last = hosts_of_day[0], hosts_of_day[-1]
            part = partition_of(plan, float(ended[first]))
            for name in ("cases", "units", "throughput", "reports"):
                rows = rows_of[name]
                lo, hi = np.searchsorted(rows, first), np.searchsorted(rows, last, side="right")
                writer.write(name, part, tables[name].slice(lo, hi - lo))

    def _constant(self, value: str, count: int) -> pa.Array:
        return _dictionary(np.zeros(count, dtype=np.int32), [value])

    def _cases(self, rids, cohort, unit_host, row_unit, case_index, digest_columns, null) -> pa.Table:
        """The case rows; `digest_columns` is (each row's index into the chunk's digests, those digests,
        their keys)."""
        digest, digests, keys = digest_columns
        total = len(case_index)
        units = row_unit % self.units_n
        return pa.table(
            {
                "report": rids[unit_host][row_unit],
                "profile_sha256": self._constant(sim.PROFILE_SHA, total),
                "seed": np.full(total, self.week_seed, dtype=np.int64),
                "cohort": _dictionary(cohort[unit_host][row_unit], list(sim.COHORTS)),
                "comparison_group": self.groups[cohort[unit_host][row_unit]],
                "unit": _dictionary(units, self.unit_ids),
                "case_index": case_index,
                "workload": _dictionary(case_index % 2, list(sim.WORKLOADS)),
                "digest": _dictionary(digest, digests, null),
                "digest_key": pa.array(np.array(keys, dtype=np.int64)[digest], mask=null),
                "voter": np.ones(total, dtype=bool),
            }
        )

    def _units(self, rids, cohort, n, plans, mismatch) -> pa.Table:
        count = len(n)
        verdict, reason, inv_n, inv_first, inv_wl, inv_checks = [], [], [], [], [], []
        for k in range(count):
            plan = plans.get(k)
            bad = plan is not None and (plan.wrong or plan.mismatch_at is not None)
            invalid = plan is not None and plan.invalid
            verdict.append("invalid" if invalid else "fail" if bad else "pass")
            reason.append(INVALID_REASON if invalid else UNIT_REASON if bad else None)
            m = mismatch.get(k)
            inv_n.append(None if m is None else 1)
            inv_first.append(m)
            inv_wl.append([] if m is None else [sim.WORKLOADS[m % 2]])
            inv_checks.append([] if m is None else ["golden_matmul"])
        digests = n - np.array([1 if k in mismatch else 0 for k in range(count)])
        return pa.table(
            {
                "report": np.repeat(rids, self.units_n),
                "profile_sha256": self._constant(sim.PROFILE_SHA, count),
                "seed": np.full(count, self.week_seed, dtype=np.int64),
                "comparison_group": self.groups[np.repeat(cohort, self.units_n)],
                "unit": _dictionary(np.tile(np.arange(self.units_n), len(rids)), self.unit_ids),
                "cohort": _dictionary(np.repeat(cohort, self.units_n), list(sim.COHORTS)),
                "verdict": pa.array(verdict),
                "reason": pa.array(reason, pa.string()),
                "retest": pa.nulls(count, pa.string()),
                "convicted": np.zeros(count, dtype=bool),
                "own_run_findings": pa.array([[]] * count, pa.list_(pa.string())),
                "case_rows": n,
                "digests": digests,
                "invariant_mismatches": pa.array(inv_n, pa.int64()),
                "invariant_first_case": pa.array(inv_first, pa.int64()),
                "invariant_workloads": pa.array(inv_wl, pa.list_(pa.string())),
                "invariant_checks": pa.array(inv_checks, pa.list_(pa.string())),
            }
        )

    def _throughput(self, rids, cohort, n, speed) -> tuple[pa.Table, np.ndarray]:
        """ops/s per unit and workload (train runs the even cases, matmul_golden the odd ones), and the
        unit of each row."""
        units = np.arange(len(n))
        rows = []
        for w, (ops, _) in enumerate(sim.OPS[wl] for wl in sim.WORKLOADS):
            ran = units[n > w]  # workload w ran when the unit has a case of its parity
            noise = self.np.uniform(0.97, 1.03, size=len(ran))
            rows.append((ran, np.full(len(ran), w), np.round(ops * speed[ran] * noise, 1)))
        unit = np.concatenate([r[0] for r in rows])
        order = np.argsort(unit, kind="stable")
        unit, workload = unit[order], np.concatenate([r[1] for r in rows])[order]
        value = np.concatenate([r[2] for r in rows])[order]
        count = len(unit)
        table = pa.table(
            {
                "report": rids[unit // self.units_n],
                "profile_sha256": self._constant(sim.PROFILE_SHA, count),
                "seed": np.full(count, self.week_seed, dtype=np.int64),
                "cohort": _dictionary(cohort[unit // self.units_n], list(sim.COHORTS)),
                "unit": _dictionary(unit % self.units_n, self.unit_ids),
                "workload": _dictionary(workload, list(sim.WORKLOADS)),
                "measure": self._constant("ops_per_s", count),
                "reading": value,
                "reading_unit": self._constant("flop/s", count),
            }
        )
        return table, unit

    def _reports(self, host_idx, rids, ended, n, plans) -> pa.Table:
        h, units_n = len(host_idx), self.units_n
        names = [self.hosts[int(i)] for i in host_idx]
        verdicts = []
        for k in range(h):
            ps = [plans.get(k * units_n + u) for u in range(units_n)]
            if any(p is not None and p.invalid for p in ps):
                verdicts.append("invalid")
            elif any(p is not None and (p.wrong or p.mismatch_at is not None) for p in ps):
                verdicts.append("fail")
            else:
                verdicts.append("pass")
        per_host = n.reshape(h, units_n)
        return pa.table(
            {
                "report": rids,
                "source": [f"generated/{name}.json" for name in names],
                "sha256": [hashlib.sha256(name.encode()).hexdigest() for name in names],
                "hostname": names,
                "machine_id": pa.nulls(h, pa.string()),
                "run_id": [f"{name}-{self.week_seed}-{int(t)}" for name, t in zip(names, ended, strict=True)],
                "profile_name": self._constant("quick", h),
                "profile_sha256": self._constant(sim.PROFILE_SHA, h),
                "seed": np.full(h, self.week_seed, dtype=np.int64),
                "ended_at": ended,
                "verdict": pa.array(verdicts),
                "units": np.full(h, units_n, dtype=np.int64),
                "case_rows": per_host.sum(axis=1),
                "tested_units": (per_host > 0).sum(axis=1),
            }
        )

    def expected(self) -> list[dict[str, Any]]:
        """The findings compare must report (as simulate_fleet's manifest says)."""
        expected = [{"host": f["host"], "unit": f["unit"], "kind": f["expect"]} for f in self.faults]
        expected += [{"host": h, "unit": None, "kind": "missing"} for h in MISSING]
        expected.append({"host": self.stale_host, "unit": None, "kind": "stale"})
        return sorted(expected, key=lambda e: (e["kind"], e["host"], e["unit"] or ""))


MISSING = ("host-missing-0", "host-missing-1")


def generate(hosts: int, units: int, cases: int, out: Path) -> tuple[FleetWriter, float]:
    """Write a simulated fleet as a dataset in `out` and its inventory beside it; return (fleet, seconds)."""
    t0 = time.perf_counter()
    fleet = FleetWriter(hosts, units, cases, seed=1)
    root = prepare_dataset(out / "dataset")
    writer = DatasetWriter(root, "bench")
    fleet.write(writer)
    writer.commit()
    (out / "hosts.txt").write_text("\n".join([*fleet.hosts, *MISSING]) + "\n")
    return fleet, time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------------
# Timing children.


def compare_from_argv(dataset: Path, now: str, hosts: Path, cli: bool, full: bool = True) -> list[str]:
    """The child that runs compare --from: the command line, or the library call (whole document or
    findings only)."""
    if cli:
        return [
            sys.executable,
            "-m",
            "sdcscan",
            "compare",
            "--from",
            str(dataset),
            "--hosts",
            str(hosts),
            "--now",
            now,
            "--json",
        ]
    return [sys.executable, "-c", CHILD, str(dataset), now, str(hosts), "full" if full else "findings"]


def findings(path: Path) -> list[dict[str, Any]]:
    """(host, unit, kind) of every finding of a compare JSON document, sorted."""
    doc = json.loads(path.read_text())
    found = [{"host": f["host"], "unit": f["unit"], "kind": f["kind"]} for f in doc["findings"]]
    return sorted(found, key=lambda e: (e["kind"], e["host"], e["unit"] or ""))


def disk_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20, 1)


def bench_parquet(hosts: int, units: int, cases: int, work: Path, cli: bool, full: bool) -> dict[str, Any]:
    """Generate one fleet into Parquet, time compare --from on it, check its findings, clean up."""
    fleet, generate_s = generate(hosts, units, cases, work)
    dataset = work / "dataset"
    out, err = work / "out.json", work / "err.txt"
    argv = compare_from_argv(dataset, sim.iso(sim.NOW), work / "hosts.txt", cli, full)
    code, wall, rss = run_child(argv, out, err)
    found = findings(out) if code in (0, 1) else []
    record = {
        "path": "parquet",
        "hosts": hosts,
        "units": units,
        "cases": cases,
        "case_rows": hosts * units * cases,
        "generate_s": round(generate_s, 1),
        "dataset_mb": disk_mb(dataset),
        "compare_from_s": round(wall, 1),
        "peak_rss_mb": round(rss, 1),
        "output": "document" if full or cli else "findings",
        "output_mb": round(out.stat().st_size / 2**20, 1),
        "exit_code": code,
        "findings": len(found),
        "exact": found == fleet.expected(),
    }
    if code not in (0, 1):
        record["stderr"] = err.read_text()[-2000:]
    shutil.rmtree(dataset)
    return record


def bench_json(hosts: int, units: int, cases: int, work: Path, cli: bool) -> dict[str, Any]:
    """One JSON fleet (simulate_fleet.py): compare on it, ingest it, compare --from; same findings?"""
    fleet = work / "fleet"
    t0 = time.perf_counter()
    sim_argv = [sys.executable, str(ROOT / "scripts" / "simulate_fleet.py"), "--hosts", str(hosts)]
    sim_argv += ["--units", str(units), "--cases", str(cases), "--out", str(fleet), "--seed", "1"]
    subprocess.run(sim_argv, check=True, stdout=subprocess.DEVNULL)
    generate_s = time.perf_counter() - t0
    manifest = json.loads((fleet / "planted.json").read_text())
    hosts_file, now = fleet / "hosts.txt", manifest["now"]
    reports, dataset = fleet / "reports", work / "dataset"
    out_json, out_pq, err = work / "json.json", work / "pq.json", work / "err.txt"
    cmd = [sys.executable, "-m", "sdcscan"]
    compare = run_child(
        [*cmd, "compare", str(reports), "--hosts", str(hosts_file), "--now", now, "--json"], out_json, err
    )
    ingest = run_child([*cmd, "ingest", str(reports), "--to", str(dataset)], work / "ingest.txt", err)
    from_dir = run_child(compare_from_argv(dataset, now, hosts_file, cli), out_pq, err)
    same = compare[0] == from_dir[0] and findings(out_json) == findings(out_pq)
    record = {
        "path": "json",
        "hosts": hosts,
        "units": units,
        "cases": cases,
        "generate_s": round(generate_s, 1),
        "reports_mb": disk_mb(reports),
        "compare_s": round(compare[1], 1),
        "compare_peak_rss_mb": round(compare[2], 1),
        "ingest_s": round(ingest[1], 1),
        "ingest_peak_rss_mb": round(ingest[2], 1),
        "dataset_mb": disk_mb(dataset),
        "compare_from_s": round(from_dir[1], 1),
        "compare_from_peak_rss_mb": round(from_dir[2], 1),
        "exit_codes": [compare[0], ingest[0], from_dir[0]],
        "same_findings": same,
        "findings_exact": findings(out_json) == manifest["expected_findings"],
    }
    shutil.rmtree(fleet)
    shutil.rmtree(dataset, ignore_errors=True)
    return record


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000", help="hosts, comma-separated ('' for none)")
    ap.add_argument("--json-sizes", default="", help="hosts of JSON fleets to compare both paths on")
    ap.add_argument("--units", type=int, default=8)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--cli", action="store_true", help="time `python -m sdcscan compare --from --json`")
    ap.add_argument(
        "--full-json",
        action="store_true",
        help="the child writes the whole document (each divergent finding lists every digest of its case: "
        "gigabytes at 1M hosts), not just what was found",
    )
    ap.add_argument("--workdir", type=Path, default=None, help="where fleets are written (default: temp)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sdcscan-bench-parquet-", dir=args.workdir))
    records: list[dict[str, Any]] = []
    try:
        for hosts in (int(s) for s in args.json_sizes.split(",") if s):
            records.append(bench_json(hosts, args.units, args.cases, work, args.cli))
            print(json.dumps(records[-1]), flush=True)
        for hosts in (int(s) for s in args.sizes.split(",") if s):
            records.append(bench_parquet(hosts, args.units, args.cases, work, args.cli, args.full_json))
            print(json.dumps(records[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "note": "shared machine"}
    print(json.dumps({"benchmark": "compare --from", "machine": machine}), flush=True)
    ok = all(r.get("exact", r.get("same_findings")) for r in records)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
