#!/usr/bin/env python3
"""Write a synthetic fleet of sdcscan reports (schema version 1) with planted faults, for tests and bench.

Example:
    python scripts/simulate_fleet.py --hosts 40 --units 8 --cases 100 --out fleet/ --seed 1

Writes DIR/reports/**.json (one report per host, plus a few corrupt and duplicate files),
DIR/hosts.txt (every host that should report, including some that did not) and DIR/planted.json:
the faults planted and the findings `sdcscan compare --hosts DIR/hosts.txt --now NOW` must report,
exactly. Self-contained (does not import sdcscan) so it runs from a bare checkout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

PROFILE_SHA = hashlib.sha256(b"sdcscan simulated profile").hexdigest()
COHORTS = ("sim-cohort-a", "sim-cohort-b")  # every fourth host is of the second hardware model
MODELS = {"sim-cohort-a": "Simulated CPU A", "sim-cohort-b": "Simulated CPU B"}
WORKLOADS = ("train", "matmul_golden")
OPS = {"train": (2.0e9, "flop/s"), "matmul_golden": (3.0e10, "flop/s")}
NOW = datetime(2025, 6, 2, 12, 0, 0, tzinfo=timezone.utc)  # fixed, so the fleet is the same every time


def hexdigest(*parts: object) -> str:
    """A 16-hex-digit digest of the parts, like the real ones."""
    return hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).hexdigest()


@dataclass
class UnitPlan:
    """What one simulated unit does: how many cases, which digests are wrong, how fast it is."""

    cases: int
    wrong: dict[int, str] = field(default_factory=dict)  # case index -> digest it produces instead
    mismatch_at: int | None = None  # case index of an invariant failure
    speed: float = 1.0
    invalid: bool = False


def iso(t: datetime) -> str:
    """UTC ISO-8601 with a Z."""
    return t.isoformat().replace("+00:00", "Z")


def pick_faults(rng: random.Random, hosts: list[str], units: int, cases: int) -> list[dict[str, Any]]:
    """Choose distinct (host, unit) pairs for every planted fault kind."""
    n = len(hosts)
    counts = {
        "persistent": max(1, n // 200),
        "intermittent": max(2, n // 100),
        "invariant": max(1, n // 200),
        "slow": max(1, n // 200),
        "invalid": 1,
    }
    cohort_a = [h for i, h in enumerate(hosts) if i % 4 != 3]
    taken: set[tuple[str, str]] = set()
    faults = []
    partition = rng.sample(cohort_a, 3)  # one wrong value spread to three machines (Adept)
    for h in partition:
        taken.add((h, "cpu:0"))
        faults.append({"host": h, "unit": "cpu:0", "fault": "partition", "expect": "divergent"})
    for fault, k in counts.items():
        while k:
            h, u = rng.choice(hosts), f"cpu:{rng.randrange(units)}"
            if (h, u) in taken or (fault == "invalid" and any(f["host"] == h for f in faults)):
                continue
            taken.add((h, u))
            expect = {"persistent": "divergent", "intermittent": "divergent"}.get(fault, fault)
            faults.append({"host": h, "unit": u, "fault": fault, "expect": expect})
            k -= 1
    return faults


def unit_plans(
    rng: random.Random, faults: list[dict[str, Any]], hosts: list[str], units: int, cases: int
) -> dict[tuple[str, str], UnitPlan]:
    """Per faulty unit, its plan; healthy units get a default plan on demand."""
    plans: dict[tuple[str, str], UnitPlan] = {}
    shared = sorted(rng.sample(range(cases // 2), 2))  # the cases the partition group gets wrong
    for f in faults:
        key, p = (f["host"], f["unit"]), UnitPlan(cases)
        if f["fault"] == "partition":
            p.wrong = {i: hexdigest("partition", i) for i in shared}
        elif f["fault"] == "persistent":  # wrong on every case of one workload: a bad instruction path
            p.wrong = {i: hexdigest("bad", *key, i) for i in range(cases) if i % 2 == 1}
        elif f["fault"] == "intermittent":
            p.wrong = {
                i: hexdigest("flip", *key, i) for i in rng.sample(range(cases // 2), rng.randint(1, 3))
            }
        elif f["fault"] == "invariant":
            p.mismatch_at = rng.randrange(cases // 2)
        elif f["fault"] == "slow":
            p.speed = 0.5
        elif f["fault"] == "invalid":
            p.cases, p.invalid = 0, True
        f["detail"] = {"wrong_cases": sorted(p.wrong), "mismatch_at": p.mismatch_at, "speed": p.speed}
        plans[key] = p
    return plans


def build_unit(
    rng: random.Random, cohort: str, uid: str, p: UnitPlan, base: dict[str, list[Any]], seed: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One unit record in the report schema, and its invariant-failure records."""
    n = p.cases
    idx, wl, dig = base["index"][:n], base["workload"][:n], base["digest"][:n]
    status = ["ok"] * n
    for i, d in p.wrong.items():
        if i < n:
            dig[i] = d
    mism = []
    if p.mismatch_at is not None:
        status[p.mismatch_at] = "mismatch"
        mism.append(mismatch_record(uid, p.mismatch_at, wl[p.mismatch_at]))
    secs = base["seconds"][:n]
    tp = throughput(rng, wl, p.speed)
    bad = bool(p.wrong) or p.mismatch_at is not None
    verdict = "invalid" if p.invalid else "fail" if bad else "pass"
    reason = (
        "worker died before its first case"
        if p.invalid
        else ("digest disagrees with the host's other units" if bad else None)
    )
    first_bad = min([*p.wrong, *[m["index"] for m in mism]], default=None)
    unit = {
        "id": uid,
        "kind": "cpu",
        "model": MODELS[cohort],
        "cohort": cohort,
        "verdict": verdict,
        "reason": reason,
        "cases_run": n,
        "workloads": sorted(set(wl)),
        "throughput": tp,
        "mismatches": len(mism),
        "first_bad_case": first_bad,
        "notes": [],
        "cases": {"index": idx, "workload": wl, "digest": dig, "status": status, "seconds": secs},
    }
    return unit, mism


def mismatch_record(uid: str, index: int, workload: str) -> dict[str, Any]:
    """An invariant failure as the runner records it (a golden matmul element off by one ulp)."""
    return {
        "unit": uid,
        "index": index,
        "workload": workload,
        "check": "golden_matmul",
        "where": "fp32[3,7]",
        "expected": "12.0",
        "actual": "12.000001",
        "mask": "00000001",
    }


def throughput(rng: random.Random, workloads: list[str], speed: float) -> dict[str, Any]:
    """Per-workload throughput: nominal x speed x uniform noise of +-3% (never 10% off by chance)."""
    tp = {}
    for w in WORKLOADS:
        k = sum(1 for x in workloads if x == w)
        if k:
            ops, unit = OPS[w]
            tp[w] = {
                "ops_per_s": round(ops * speed * rng.uniform(0.97, 1.03), 1),
                "ops_unit": unit,
                "cases": k,
                "seconds": round(0.2 * k, 3),
            }
    return tp


def base_cases(cohort: str, seed: int, cases: int) -> dict[str, list[Any]]:
    """The correct outcome of every case for a cohort: what a healthy unit produces."""
    return {
        "index": list(range(cases)),
        "workload": [WORKLOADS[i % 2] for i in range(cases)],
        "digest": [hexdigest(cohort, seed, i) for i in range(cases)],
        "seconds": [round(0.15 + 0.1 * ((i * 7919) % 10) / 10, 3) for i in range(cases)],
    }


def build_report(
    rng: random.Random,
    host: str,
    cohort: str,
    units: list[dict[str, Any]],
    mism: list[dict[str, Any]],
    ended: datetime,
    seed: int,
) -> dict[str, Any]:
    """A whole report around its units."""
    order = ("pass", "fail", "invalid", "interrupted")
    verdict = max((u["verdict"] for u in units), key=order.index)
    started = ended - timedelta(seconds=60)
    return {
        "schema_version": 1,
        "tool": {"name": "sdcscan", "version": "0.1.0"},
        "verdict": verdict,
        "exit_code": {"pass": 0, "fail": 1, "invalid": 3}[verdict],
        "run": {
            "id": f"{host}-{seed}-{int(ended.timestamp())}",
            "profile": {"name": "quick", "sha256": PROFILE_SHA},
            "seed": seed,
            "seed_source": "week",
            "budget_s": 60.0,
            "started_at": iso(started),
            "ended_at": iso(ended),
            "duration_s": 60.0,
            "argv": ["sdcscan", "run"],
            "workloads": list(WORKLOADS),
            "injections": [],
        },
        "host": {"hostname": host},
        "software": {"python": "3.11", "torch": "2.5.0"},
        "cohorts": {cohort: {"kind": "cpu", "model": MODELS[cohort], "threads": 1}},
        "units": units,
        "mismatches": mism,
        "findings": [],
    }


def host_report(
    rng: random.Random,
    host: str,
    cohort: str,
    units_n: int,
    plans: dict[tuple[str, str], UnitPlan],
    base: dict[str, list[Any]],
    ended: datetime,
    seed: int,
    cases: int,
) -> dict[str, Any]:
    """One host's report; a fifth of healthy units ran 1-3 cases fewer (budget ran out)."""
    units, mism = [], []
    for u in range(units_n):
        uid = f"cpu:{u}"
        p = plans.get((host, uid)) or UnitPlan(cases - (rng.randrange(1, 4) if rng.random() < 0.2 else 0))
        unit, m = build_unit(rng, cohort, uid, p, base, seed)
        units.append(unit)
        mism += m
    return build_report(rng, host, cohort, units, mism, ended, seed)


def write_corrupt(out: Path, sample: Path) -> list[dict[str, str]]:
    """A few files compare must skip: truncated, not JSON, another schema version, a duplicate copy."""
    raw = sample.read_bytes()
    bad = out / "reports" / "zz-bad"
    bad.mkdir(parents=True, exist_ok=True)
    files = {
        "truncated.json": raw[: len(raw) // 2],
        "not-json.json": b"this is not json\n",
        "schema-99.json": raw.replace(b'"schema_version":1', b'"schema_version":99', 1),
        "copy.json": raw,
    }
    for name, data in files.items():
        (bad / name).write_bytes(data)
    reasons = {
        "truncated.json": "truncated",
        "not-json.json": "truncated or not JSON",
        "schema-99.json": "schema_version",
        "copy.json": "duplicate",
    }
    return [{"path": f"reports/zz-bad/{n}", "reason_contains": r} for n, r in reasons.items()]


def simulate(hosts_n: int, units_n: int, cases: int, out: Path, seed: int) -> dict[str, Any]:
    """Write the fleet and return the manifest."""
    rng = random.Random(seed)
    week_seed = 1000 + seed
    hosts = [f"host{i:05d}" for i in range(hosts_n)]
    faults = pick_faults(rng, hosts, units_n, cases)
    plans = unit_plans(rng, faults, hosts, units_n, cases)
    stale_host = next(h for h in reversed(hosts) if not any(f["host"] == h for f in faults))
    bases = {c: base_cases(c, week_seed, cases) for c in COHORTS}
    if out.exists():
        shutil.rmtree(out)
    enc = json.JSONEncoder(separators=(",", ":"))  # compact: 10,000 reports are ~400 MB already
    for i, host in enumerate(hosts):
        cohort = COHORTS[1] if i % 4 == 3 else COHORTS[0]
        age = timedelta(days=90) if host == stale_host else timedelta(seconds=rng.randrange(7 * 86400))
        report = host_report(rng, host, cohort, units_n, plans, bases[cohort], NOW - age, week_seed, cases)
        path = out / "reports" / f"{i // 1000:02d}" / f"{host}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(enc.encode(report) + "\n", encoding="utf-8")
    skipped = write_corrupt(out, out / "reports" / "00" / f"{hosts[0]}.json")
    missing = [f"host-missing-{k}" for k in range(2)]
    (out / "hosts.txt").write_text("\n".join(["# every host that should report", *hosts, *missing]) + "\n")
    expected = [{"host": f["host"], "unit": f["unit"], "kind": f["expect"]} for f in faults]
    expected += [{"host": h, "unit": None, "kind": "missing"} for h in missing]
    expected.append({"host": stale_host, "unit": None, "kind": "stale"})
    expected.sort(key=lambda e: (e["kind"], e["host"], e["unit"] or ""))
    manifest = {
        "now": iso(NOW),
        "hosts_file": "hosts.txt",
        "stale_days": 60,
        "hosts": hosts_n,
        "units": units_n,
        "cases": cases,
        "seed": seed,
        "faults": faults,
        "partition_size": 3,
        "skipped": skipped,
        "expected_findings": expected,
    }
    (out / "planted.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, required=True)
    ap.add_argument("--units", type=int, default=8)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.hosts < 8 or args.units < 1 or args.cases < 8:
        ap.error("need at least 8 hosts, 1 unit and 8 cases to plant every fault")
    m = simulate(args.hosts, args.units, args.cases, args.out, args.seed)
    print(
        json.dumps(
            {
                "out": str(args.out),
                "hosts": m["hosts"],
                "faults": len(m["faults"]),
                "expected_findings": len(m["expected_findings"]),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
