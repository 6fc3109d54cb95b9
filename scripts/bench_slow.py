#!/usr/bin/env python3
"""Measure the `slow` rule of `sdcscan compare` (sdcscan/fleet/perf.py) on generated fleets; prints JSON.

Example:
    python scripts/bench_slow.py                      # healthy 10k/50k/100k hosts, slow batches, slow hosts
    python scripts/bench_slow.py --healthy 10000 --batch-hosts 2000 --fractions 0.1,0.3

Fleets are generated straight as extracts (`HostReport`), not JSON, so that 100k hosts take seconds:
one cohort and one profile; every host has `--units` units running two workloads. A healthy unit's
throughput is its workload's nominal rate times a normal factor of mean 1 and sd `--spread` (3%: its
tails are heavier than scripts/simulate_fleet.py's uniform +-3%); `--noise skewed` or `t3` draws that
factor with a long tail of slow runs, or heavy tails both ways, at the same sd. A slow unit runs at
`--factor` (0.75: 25% slow) on every workload, times the same noise.
For every scenario it reports false and missed units of the current rule, and of the rule it replaced
(median and MAD of all peers, z 3.5 and 10% below the median on any one workload). Counting is per
unit: a host-level finding covers the units its evidence lists.
A benchmark, not a test: the numbers depend on the seeds (fixed) and the timings on the machine.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from sdcscan.fleet.compare import Options, summarize
from sdcscan.fleet.findings import FleetFinding
from sdcscan.fleet.model import HostReport, UnitRecord
from sdcscan.fleet.perf import robust_z

PROFILE = "b" * 64
NOMINAL = {"train": 2.0e9, "matmul_golden": 3.0e10}  # flop/s of a healthy unit, as simulate_fleet has
OLD_Z, DEFAULT_Z, DEFAULT_DROP, MIN_UNITS = 3.5, 3.5, 0.10, 5


def unit_record(uid: str, throughput: dict[str, float], cohort: str = "c1") -> UnitRecord:
    """A unit extract with only what the slow rule reads: id, cohort, throughput."""
    tp = tuple(sorted((w, x, "flop/s") for w, x in throughput.items()))
    return UnitRecord(uid, cohort, "pass", None, (), (), (), tp, None)


def host_report(
    host: str,
    units: list[UnitRecord],
    *,
    ended_at: float = 0.0,
    run_id: str = "",
    profile: str = PROFILE,
    seed: int = 7,
) -> HostReport:
    """A host's report extract around `units` (the reader's dedupe is not needed here)."""
    return HostReport(
        f"{host}-{run_id}.json",
        "",
        host,
        run_id or f"{host}-run",
        (profile, seed),
        ended_at,
        "pass",
        tuple(units),
    )


NOISES = ("normal", "skewed", "t3")


def noise_factor(rng: random.Random, spread: float, noise: str) -> float:
    """A run's speed factor, mean 1 and sd `spread`: normal; `skewed`, a long tail of slow runs (1 minus
    a gamma of shape 2, standardized), as units sharing a host with other work see; `t3`, Student-t with
    3 degrees of freedom (heavy tails both ways)."""
    if noise == "skewed":
        return 1.0 - spread * (rng.gammavariate(2.0, 1.0) - 2.0) / 2.0**0.5
    if noise == "t3":
        t = rng.gauss(0.0, 1.0) / (sum(rng.gauss(0.0, 1.0) ** 2 for _ in range(3)) / 3.0) ** 0.5
        return 1.0 + spread * t / 3.0**0.5
    return rng.gauss(1.0, spread)


def generate(
    hosts: int,
    *,
    units: int = 8,
    spread: float = 0.03,
    shared: float = 0.0,
    factor: float = 0.75,
    slow: set[tuple[str, str]] | None = None,
    seed: int = 0,
    reports: int = 1,
    noise: str = "normal",
) -> list[HostReport]:
    """`hosts` hosts `h00000`..., units `cpu:0`...; the (host, unit) pairs in `slow` run at `factor`.
    Each host sends `reports` reports (runs of the profile with seeds 7, 8, ...), slow units slow in all.

    Each workload's noise is its own (sd `spread`, of the kind `noise`: `noise_factor`); `shared` adds a
    factor common to all workloads of a unit (its clock, its cooling), which defeats rules that trust
    workloads to be independent.
    """
    rng = random.Random(seed)
    slow = slow or set()
    out = []
    for i in range(hosts):
        host = f"h{i:05d}"
        # A unit's own speed (`shared`) stays with it from run to run; each run's noise is new.
        speed = {
            f"cpu:{k}": (factor if (host, f"cpu:{k}") in slow else 1.0)
            * (rng.gauss(1.0, shared) if shared else 1.0)
            for k in range(units)
        }
        for run in range(reports):
            records = [
                unit_record(uid, {w: x * v * noise_factor(rng, spread, noise) for w, x in NOMINAL.items()})
                for uid, v in speed.items()
            ]
            run_id = f"{host}-run" if reports == 1 else f"{host}-run{run}"
            out.append(host_report(host, records, ended_at=3600.0 * run, run_id=run_id, seed=7 + run))
    return out


def pick_slow_units(hosts: int, units: int, fraction: float, seed: int = 1) -> set[tuple[str, str]]:
    """`fraction` of all units, chosen at random (a throttled batch spread over the cohort)."""
    everyone = [(f"h{i:05d}", f"cpu:{k}") for i in range(hosts) for k in range(units)]
    return set(random.Random(seed).sample(everyone, round(fraction * len(everyone))))


def flagged_units(findings: tuple[FleetFinding, ...]) -> set[tuple[str, str]]:
    """(host, unit) of every slow unit, unit-level or listed in a host-level finding."""
    out = set()
    for f in findings:
        if f.kind != "slow":
            continue
        if f.unit is not None:
            out.add((f.host, f.unit))
        else:
            out.update((f.host, u["unit"]) for u in f.evidence["units"])
    return out


def current_rule(reports: list[HostReport]) -> tuple[FleetFinding, ...]:
    """The findings of sdcscan/fleet/perf.py with compare's default options."""
    opts = Options(slow_z=DEFAULT_Z, slow_drop=DEFAULT_DROP, slow_min_units=MIN_UNITS)
    return tuple(f for f in summarize(reports, options=opts).findings if f.kind == "slow")


def old_rule(reports: list[HostReport]) -> set[tuple[str, str]]:
    """The rule perf.py replaced: robust z < -3.5 and 10% below the median of all peers, any workload."""
    groups: dict[str, list[tuple[float, str, str]]] = {}
    for r in reports:
        for u in r.units:
            for w, x, _ in u.throughput:
                groups.setdefault(w, []).append((x, r.host, u.unit))
    out = set()
    for group in groups.values():
        med = median(x for x, _, _ in group)
        mad = median(abs(x - med) for x, _, _ in group)
        for x, host, uid in group:
            if robust_z(x, med, mad) < -OLD_Z and x <= med * (1 - DEFAULT_DROP):
                out.add((host, uid))
    return out


def scenario(
    hosts: int,
    units: int,
    slow: set[tuple[str, str]],
    *,
    spread: float,
    shared: float,
    old: bool,
    factor: float = 0.75,
    reports_per_host: int = 1,
    noise: str = "normal",
) -> dict[str, Any]:
    """Generate, judge with the current (and optionally the old) rule, count."""
    reports = generate(
        hosts,
        units=units,
        spread=spread,
        shared=shared,
        slow=slow,
        factor=factor,
        reports=reports_per_host,
        noise=noise,
    )
    t0 = time.perf_counter()
    findings = current_rule(reports)
    seconds = time.perf_counter() - t0
    found = flagged_units(findings)
    row: dict[str, Any] = {
        "hosts": hosts,
        "units": hosts * units,
        "slow_units": len(slow),
        "findings": len(findings),
        "host_level_findings": sum(1 for f in findings if f.unit is None),
        "false_units": len(found - slow),
        "missed_units": len(slow - found),
        "recall": round(len(found & slow) / len(slow), 4) if slow else None,
        "seconds": round(seconds, 2),
    }
    if old:
        found_old = old_rule(reports)
        row["old_rule"] = {
            "false_units": len(found_old - slow),
            "missed_units": len(slow - found_old),
            "recall": round(len(found_old & slow) / len(slow), 4) if slow else None,
        }
    return row


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--healthy", default="10000,50000,100000", help="sizes (hosts) of healthy fleets")
    ap.add_argument("--batch-hosts", type=int, default=10000, help="hosts of the slow-batch fleets")
    ap.add_argument("--fractions", default="0.01,0.1,0.2,0.3,0.4", help="shares of units that are slow")
    ap.add_argument("--slow-hosts", type=int, default=20, help="whole slow hosts in a fleet of --batch-hosts")
    ap.add_argument("--units", type=int, default=8)
    ap.add_argument("--spread", type=float, default=0.03, help="sd of each workload's noise")
    ap.add_argument("--shared", type=float, default=0.0, help="sd of a per-unit factor on all workloads")
    ap.add_argument("--no-old", action="store_true", help="skip the old rule (it is slower)")
    ap.add_argument(
        "--grid",
        action="store_true",
        help="recall table instead: every --grid-spreads x --grid-losses x --fractions at --batch-hosts, "
        "one JSON line each (the README's table)",
    )
    ap.add_argument("--grid-spreads", default="0.02,0.035,0.05")
    ap.add_argument("--grid-losses", default="0.15,0.3")
    ap.add_argument("--reports", type=int, default=1, help="reports per host (recent runs of the profile)")
    ap.add_argument("--noise", choices=NOISES, default="normal", help="the kind of each run's noise")
    args = ap.parse_args(argv)
    if args.grid:
        for spread in (float(x) for x in args.grid_spreads.split(",")):
            for loss in (float(x) for x in args.grid_losses.split(",")):
                for p in (float(x) for x in args.fractions.split(",")):
                    slow = pick_slow_units(args.batch_hosts, args.units, p)
                    row = scenario(
                        args.batch_hosts,
                        args.units,
                        slow,
                        spread=spread,
                        shared=args.shared,
                        old=False,
                        factor=1 - loss,
                        reports_per_host=args.reports,
                        noise=args.noise,
                    )
                    head = {"spread": spread, "loss": loss, "fraction": p, "reports_per_host": args.reports}
                    head |= {"noise": args.noise} if args.noise != "normal" else {}
                    print(json.dumps({**head, **row}), flush=True)
        return 0
    kw: dict[str, Any] = {
        "spread": args.spread,
        "shared": args.shared,
        "old": not args.no_old,
        "reports_per_host": args.reports,
        "noise": args.noise,
    }
    out: dict[str, Any] = {"spread": args.spread, "shared": args.shared, "units_per_host": args.units}
    out |= {"noise": args.noise} if args.noise != "normal" else {}
    out["healthy"] = [scenario(int(n), args.units, set(), **kw) for n in args.healthy.split(",") if n]
    out["batches"] = [
        {"fraction": float(p), **scenario(args.batch_hosts, args.units, slow, **kw)}
        for p in args.fractions.split(",")
        if p and (slow := pick_slow_units(args.batch_hosts, args.units, float(p)))
    ]
    whole = {(f"h{i:05d}", f"cpu:{k}") for i in range(args.slow_hosts) for k in range(args.units)}
    out["whole_slow_hosts"] = scenario(args.batch_hosts, args.units, whole, **kw)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
