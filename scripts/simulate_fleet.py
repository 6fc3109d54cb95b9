#!/usr/bin/env python3
"""Write a synthetic fleet of sdcscan reports (schema version 1) with planted faults, for tests and bench.

Example:
    python scripts/simulate_fleet.py --hosts 40 --units 8 --cases 100 --out fleet/ --seed 1
    python scripts/simulate_fleet.py --scenario adept --out adept/

Writes DIR/reports/**.json (one report per host, plus a few corrupt and duplicate files),
DIR/hosts.txt (every host that should report, including some that did not) and DIR/planted.json:
the faults planted and the findings `sdcscan compare --hosts DIR/hosts.txt --now NOW` must report,
exactly. Self-contained (does not import sdcscan) so it runs from a bare checkout.

`--scenario NAME` writes instead one of the small fleets of issue 12 (`SCENARIOS`): a situation a fleet
operator meets (re-runs, a fixed host, a tiny cohort with a shared wrong digest, two machines with one
hostname, ...), with reports whose own verdicts and findings are those `sdcscan run` would have written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
from collections import Counter
from collections.abc import Callable
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
        "checked": checked(wl, verdict, hexdigest(cohort, uid, seed)),
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


def checked(workloads: list[str], verdict: str, tag: str) -> dict[str, Any]:
    """What the unit's checks covered (sdcscan.proof): matmul_golden by its exact invariant (detection 1),
    train by digests. Whole numbers beyond 2^53 that differ per unit (from `tag`), so that a float sum
    would depend on the order of the rows: `compare` must sum them exactly."""
    out = {}
    for w in WORKLOADS:
        k = sum(1 for x in workloads if x == w)
        if k:
            n = float(k * (10**16 + int(tag[:12], 16)))
            golden = w == "matmul_golden"
            out[w] = {
                "checked_ops": n,
                "op": "multiply-add",
                "evidence": "invariant" if golden else "digest",
                "detection": 1.0 if golden else None,
                "sdc_rate_bound": 3.0 / n if golden and verdict == "pass" else None,
            }
    return out


def bound_checked(unit: dict[str, Any]) -> None:
    """Give the unit's checked workloads the rate bound its (new) verdict allows: none unless it passed."""
    for c in unit.get("checked", {}).values():
        bounded = unit["verdict"] == "pass" and c["detection"] is not None
        c["sdc_rate_bound"] = 3.0 / (c["checked_ops"] * c["detection"]) if bounded else None


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
    *,
    findings: list[dict[str, Any]] | None = None,
    machine_id: str | None = None,
) -> dict[str, Any]:
    """A whole report around its units (`machine_id`: the short hash `host.machine_id`, when given)."""
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
        "host": {"hostname": host} if machine_id is None else {"hostname": host, "machine_id": machine_id},
        "software": {"python": "3.11", "torch": "2.5.0"},
        "cohorts": {cohort: {"kind": "cpu", "model": MODELS[cohort], "threads": 1}},
        "units": units,
        "mismatches": mism,
        "findings": findings or [],
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


# ---------------------------------------------------------------------------------------------------
# Scenarios of issue 12: small fleets, one situation each. Every unit runs SCENARIO_CASES cases; a wrong
# unit gets WRONG_CASES wrong (one case of each workload), with digests named by its tag, so units with
# the same tag are wrong in the same way (one corrupted value spread to several machines).

SCENARIO_SEED = 4242
SCENARIO_CASES = 8
WRONG_CASES = (1, 2)


@dataclass
class ScenarioHost:
    """One report of a scenario: a host, its units, what each gets wrong, and what its own run saw."""

    name: str
    units: int = 2
    wrong: dict[int, str] = field(default_factory=dict)  # unit number -> tag of its wrong digests
    named_failing: tuple[int, ...] = ()  # units its own run blamed after re-runs settled a tie
    age: timedelta = timedelta(hours=1)  # how long before NOW the run ended
    machine_id: str | None = None


def wrong_digest(tag: str, index: int) -> str:
    """The digest a unit wrong in the way `tag` produces for case `index`."""
    return hexdigest("wrong", tag, index)


def scenario_report(h: ScenarioHost, cohort: str = COHORTS[0]) -> dict[str, Any]:
    """The report `sdcscan run` would write on host `h`: its units, and its own in-host judgement."""
    rng = random.Random(f"{h.name}:{h.machine_id}:{h.age}")
    base = base_cases(cohort, SCENARIO_SEED, SCENARIO_CASES)
    units = []
    for k in range(h.units):
        tag = h.wrong.get(k)
        plan = UnitPlan(SCENARIO_CASES, wrong={i: wrong_digest(tag, i) for i in WRONG_CASES} if tag else {})
        unit, _ = build_unit(rng, cohort, f"cpu:{k}", plan, base, SCENARIO_SEED)
        units.append(unit)
    findings = judge_own_run(units, {f"cpu:{k}" for k in h.named_failing})
    return build_report(
        rng, h.name, cohort, units, [], NOW - h.age, SCENARIO_SEED, findings=findings, machine_id=h.machine_id
    )


def judge_own_run(units: list[dict[str, Any]], named: set[str]) -> list[dict[str, Any]]:
    """Set each unit's verdict as `sdcscan run` would from its host alone; return the run's findings.

    A minority digest of a case fails its unit (`divergent`). Without a strict majority, units in
    `named` are those the run's re-runs showed not to reproduce (`not_reproducible`); when none is
    named, every unit of the tie is a suspect (verdict fail, one `undecided` finding, no one named).
    """
    blame: dict[str, list[tuple[str, int, str]]] = {u["id"]: [] for u in units}
    findings: list[dict[str, Any]] = []
    for i in range(SCENARIO_CASES):
        digests = {u["id"]: u["cases"]["digest"][i] for u in units if i < len(u["cases"]["digest"])}
        counts = Counter(digests.values())
        if len(counts) < 2:
            continue
        workload = units[0]["cases"]["workload"][i]
        top, n = counts.most_common(1)[0]
        if n * 2 > len(digests):
            for uid, d in digests.items():
                if d != top:
                    blame[uid].append(("divergent", i, workload))
        elif named & set(digests):
            for uid in sorted(named & set(digests)):
                blame[uid].append(("not_reproducible", i, workload))
        else:
            suspects = sorted(digests)
            for uid in suspects:
                blame[uid].append(("undecided", i, workload))
            findings.append(
                {
                    "kind": "undecided",
                    "unit": None,
                    "message": f"Units {', '.join(suspects)} disagreed at case {i} ({workload}); all are suspects.",
                    "next": None,
                }
            )
    for u in units:
        reasons = blame[u["id"]]
        u["verdict"], u["reason"], u["first_bad_case"] = "pass", None, None
        bound_checked(u)
        if not reasons:
            continue
        kind, i, workload = reasons[0]
        u["verdict"], u["first_bad_case"] = "fail", i
        bound_checked(u)
        u["reason"] = {
            "divergent": f"digest disagreed with the cohort majority at case {i} ({workload})",
            "not_reproducible": f"result of disputed case {i} ({workload}) did not reproduce on re-run",
            "undecided": f"undecided dispute at case {i} ({workload})",
        }[kind]
        if kind != "undecided":
            cls = "persistent" if kind == "divergent" else "transient"
            u["retest"] = {"classification": cls, "counts": {cls: len(reasons)}, "cases": []}
            findings.append({"kind": kind, "unit": u["id"], "message": u["reason"], "next": None})
    return findings


def golden_document(cohort: str = COHORTS[0]) -> dict[str, Any]:
    """A golden (`sdcscan golden record` format) holding the correct digest of every scenario case."""
    base = base_cases(cohort, SCENARIO_SEED, SCENARIO_CASES)
    n = SCENARIO_CASES
    return {
        "golden_version": 1,
        "tool": {"name": "sdcscan", "version": "0.1.0"},
        "reports": 3,
        "entries": [
            {
                "profile_sha256": PROFILE_SHA,
                "seed": SCENARIO_SEED,
                "cohort": cohort,
                "units": 6,
                "cases": {
                    "index": base["index"],
                    "workload": base["workload"],
                    "digest": base["digest"],
                    "votes": [3] * n,
                    "voters": [3] * n,
                },
            }
        ],
        "refused": [],
    }


def _peers(n: int, prefix: str = "peer") -> list[ScenarioHost]:
    return [ScenarioHost(f"{prefix}{k}") for k in range(n)]


def _reruns(age_hours: tuple[int, ...]) -> list[ScenarioHost]:
    """Re-runs of one 2-unit host that is wrong as a whole (its units agree, so its own run passes)."""
    return [ScenarioHost("flaky", wrong={0: "flaky", 1: "flaky"}, age=timedelta(hours=h)) for h in age_hours]


MACHINE_A, MACHINE_B = "a1b2c3d4e5f60718", "0f1e2d3c4b5a6978"

SCENARIOS: dict[str, Callable[[], list[ScenarioHost]]] = {
    # An 8-unit host consistently wrong against two healthy 2-unit hosts (and against four).
    "big-faulty-host": lambda: [ScenarioHost("big", 8, {k: "big" for k in range(8)}), *_peers(2, "small")],
    "big-faulty-host-4-peers": lambda: [ScenarioHost("big", 8, {k: "big" for k in range(8)}), *_peers(4)],
    # Adept's ring all-gather: the wrong value reached two of three machines.
    "adept": lambda: [
        ScenarioHost("ring0", wrong={0: "ring", 1: "ring"}),
        ScenarioHost("ring1", wrong={0: "ring", 1: "ring"}),
        ScenarioHost("ring2"),
    ],
    # Three reports of one faulty host (re-run with the same seed, as compare said) against 2 or 4 peers.
    "reruns": lambda: [*_reruns((3, 2, 1)), *_peers(2)],
    "reruns-4-peers": lambda: [*_reruns((3, 2, 1)), *_peers(4)],
    # A host whose cpu:0 failed two days ago and passes now (fixed), and the reverse (broken since).
    "fixed-host": lambda: [
        ScenarioHost("node", 4, {0: "node"}, age=timedelta(days=2)),
        ScenarioHost("node", 4, age=timedelta(hours=1)),
        *_peers(4),
    ],
    "broken-host": lambda: [
        ScenarioHost("node", 4, age=timedelta(days=2)),
        ScenarioHost("node", 4, {0: "node"}, age=timedelta(hours=1)),
        *_peers(4),
    ],
    # Four hosts share a wrong digest; one is right; the golden (golden_document) knows which.
    "golden-vs-majority": lambda: [
        *[ScenarioHost(f"wrong{k}", wrong={0: "spread", 1: "spread"}) for k in range(4)],
        ScenarioHost("right"),
    ],
    # A 2-unit host alone whose own run named cpu:1 failing (its re-runs did not reproduce).
    "own-run-named": lambda: [ScenarioHost("solo", wrong={1: "solo"}, named_failing=(1,))],
    # Two 8-unit hosts, one wrong as a whole: 8 units against 8.
    "split-8v8": lambda: [ScenarioHost("left", 8, {k: "left" for k in range(8)}), ScenarioHost("right", 8)],
    # Two machines named `node` (different machine ids), cpu:0 of one wrong; three peers.
    "hostname-collision": lambda: [
        ScenarioHost("node", 4, {0: "node"}, machine_id=MACHINE_A),
        ScenarioHost("node", 4, machine_id=MACHINE_B, age=timedelta(hours=2)),
        *_peers(3),
    ],
    # One machine reporting twice under one name: one host, the older report superseded.
    "same-machine-twice": lambda: [
        ScenarioHost("node", 4, {0: "node"}, machine_id=MACHINE_A, age=timedelta(hours=2)),
        ScenarioHost("node", 4, {0: "node"}, machine_id=MACHINE_A),
        *_peers(3),
    ],
}


def scenario_reports(name: str) -> list[dict[str, Any]]:
    """The reports of scenario `name` (a key of SCENARIOS), in a fixed order."""
    return [scenario_report(h) for h in SCENARIOS[name]()]


def write_scenario(name: str, out: Path) -> list[Path]:
    """Write scenario `name` as OUT/reports/HOST-N.json (and OUT/golden.json); return the report paths."""
    if out.exists():
        shutil.rmtree(out)
    (out / "reports").mkdir(parents=True)
    paths = []
    for n, report in enumerate(scenario_reports(name)):
        path = out / "reports" / f"{report['host']['hostname']}-{n}.json"
        path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        paths.append(path)
    (out / "golden.json").write_text(json.dumps(golden_document(), indent=1) + "\n", encoding="utf-8")
    return paths


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int)
    ap.add_argument("--units", type=int, default=8)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), help="Write one small fleet of issue 12.")
    args = ap.parse_args(argv)
    if args.scenario:
        paths = write_scenario(args.scenario, args.out)
        print(json.dumps({"out": str(args.out), "scenario": args.scenario, "reports": len(paths)}))
        return 0
    if args.hosts is None:
        ap.error("--hosts is required (or --scenario)")
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
