#!/usr/bin/env python3
"""Time to detect: how long each built-in profile takes to fail a unit that corrupts one case in N.

Example:
    python scripts/bench_time_to_detect.py --profiles quick,burnin --models bitflip,tile8 --json
    python scripts/bench_time_to_detect.py --profiles quick --models bitflip --rates 10,100 --validate 3

For each (profile, fault model) it runs `sdcscan run -p PROFILE --budget B --inject cpu:1:MODEL@0.5`
once (a fresh state directory, no history) and reads the run's journal:

- start-up: from the run's start to the end of cpu:1's first case, less that case's seconds;
- the case seconds of cpu:1, in order (each case record's `seconds`);
- detection d: of the cases the injection struck and changed, the share that a check caught (status
  `mismatch`) or whose digest differs from cpu:0's for the same case (the consensus then re-runs it,
  and a corruption that does not reproduce is blamed on its unit).

A unit that corrupts one case in N is caught at the K-th case, K geometric with p = d / N; the time
to a failing verdict is start-up + the unit's first K case seconds (the measured sequence, repeated).
The script prints the median and 90th percentile of that time per N, the budget the profile has, and
the largest N the profile catches within its budget 9 times in 10. `--validate R` also runs R real
runs at N = 10 (`--inject cpu:1:MODEL@0.1`) and prints when each first failed a case, beside the
model's median: the check that the model describes real runs.

A benchmark, not a test: numbers depend on the machine and its load (start-up alone is 3 s on an idle
2-core host and over 20 s on a loaded one). Say which machine and load you measured on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MEASURE_RATE = 0.5  # the injection rate of the measuring run: many struck cases, some clean ones
QUANTILES = {"median": 0.5, "p90": 0.9}


def run_sdcscan(profile: str, budget_s: float, inject: str, work: Path) -> Path:
    """Run one screen on cpu:0 and cpu:1; return its journal."""
    out = work / f"{profile}-{inject.replace(':', '_').replace('@', '_')}-{time.monotonic_ns()}.json"
    env = {
        **os.environ,
        "XDG_STATE_HOME": tempfile.mkdtemp(dir=work),
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    argv = [sys.executable, "-m", "sdcscan", "run", "-p", profile, "--budget", f"{budget_s:g}s"]
    argv += ["--units", "cpu:0,cpu:1", "--inject", inject, "-o", str(out), "--no-history"]
    subprocess.run(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    journals = sorted(work.glob(f"{out.stem}.*.journal.jsonl"))
    if not journals:
        raise SystemExit(f"no journal for {' '.join(argv)}")
    return journals[-1]


def read_journal(path: Path) -> tuple[float, list[dict[str, Any]]]:
    """(run start time, case records of the main pass) of one journal."""
    start, cases = 0.0, []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "run":
            start = float(rec["t"])
        elif rec.get("type") == "case" and rec.get("attempt") == 0:
            cases.append(rec)
    return start, cases


def caught(case: dict[str, Any], peer_digest: dict[int, str | None]) -> bool:
    """Whether a struck case on the bad unit was seen: a check fired, or its digest differs from the peer's."""
    if case.get("status") == "mismatch":
        return True
    mine, theirs = case.get("digest"), peer_digest.get(case["index"])
    return mine is not None and theirs is not None and mine != theirs


def measure(journal: Path) -> dict[str, Any]:
    """Start-up, case seconds and detection of cpu:1 in a measuring run."""
    start, cases = read_journal(journal)
    bad = [c for c in cases if c["unit"] == "cpu:1"]
    if not bad:
        return {"cases": 0}
    peer = {c["index"]: c.get("digest") for c in cases if c["unit"] == "cpu:0"}
    struck = [c for c in bad if (c.get("injected") or {}).get("value_changed")]
    seen = [c for c in struck if caught(c, peer)]
    seconds = [float(c["seconds"]) for c in bad]
    return {
        "cases": len(bad),
        "startup_s": round(float(bad[0]["t"]) - start - seconds[0], 2),
        "case_s": seconds,
        "mean_case_s": round(sum(seconds) / len(seconds), 3),
        "struck": len(struck),
        "caught": len(seen),
        "detection": round(len(seen) / len(struck), 3) if struck else None,
    }


def cases_needed(p: float, q: float) -> int:
    """The q-quantile of a geometric count of trials to the first success of chance p."""
    if p >= 1.0:
        return 1
    return max(1, math.ceil(math.log1p(-q) / math.log1p(-p)))


def time_after(k: int, startup_s: float, case_s: list[float]) -> float:
    """Start-up plus the first k case seconds, the measured sequence repeated past its end."""
    whole, rest = divmod(k, len(case_s))
    return startup_s + whole * sum(case_s) + sum(case_s[:rest])


def predict(m: dict[str, Any], rates: list[int], budget_s: float) -> dict[str, Any]:
    """Median and p90 time to a failing verdict per N, and the largest N caught in budget 9 in 10."""
    d = m.get("detection") or 0.0
    out: dict[str, Any] = {"per_n": {}}
    for n in rates:
        p = d / n
        row = {}
        for name, q in QUANTILES.items():
            row[f"{name}_s"] = (
                None if p <= 0 else round(time_after(cases_needed(p, q), m["startup_s"], m["case_s"]), 1)
            )
        out["per_n"][str(n)] = row
    fits = int((budget_s - m["startup_s"]) / m["mean_case_s"]) if m["mean_case_s"] > 0 else 0
    # p90 within the budget: 1 - (1 - d/N)^fits >= 0.9, so N <= d / (1 - 0.1^(1/fits))
    out["cases_in_budget"] = max(0, fits)
    out["max_n_caught_p90"] = int(d / (1.0 - 0.1 ** (1.0 / fits))) if fits > 0 and d > 0 else 0
    return out


def first_caught_s(journal: Path) -> float | None:
    """Seconds from the run's start to the end of the first struck case the run caught on cpu:1."""
    start, cases = read_journal(journal)
    peer = {c["index"]: c.get("digest") for c in cases if c["unit"] == "cpu:0"}
    for c in cases:
        if c["unit"] == "cpu:1" and (c.get("injected") or {}).get("value_changed") and caught(c, peer):
            return round(float(c["t"]) - start, 1)
    return None


def profile_budget(profile: str) -> float:
    sys.path.insert(0, str(ROOT))
    from sdcscan.profile import load_profile

    return float(load_profile(profile).budget_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default="quick,burnin")
    ap.add_argument("--models", default="bitflip,tile8")
    ap.add_argument("--rates", default="10,100,1000,10000", help="N: the bad unit corrupts one case in N")
    ap.add_argument("--measure-budget", type=float, default=60.0, help="seconds of each measuring run")
    ap.add_argument("--validate", type=int, default=0, help="real runs at N = 10 per (profile, model)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rates = [int(x) for x in args.rates.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="sdcscan-ttd-") as tmp:
        work = Path(tmp)
        for profile in args.profiles.split(","):
            budget = profile_budget(profile)
            for model in args.models.split(","):
                m = measure(run_sdcscan(profile, args.measure_budget, f"cpu:1:{model}@{MEASURE_RATE}", work))
                row: dict[str, Any] = {"profile": profile, "model": model, "profile_budget_s": budget}
                row.update({k: v for k, v in m.items() if k != "case_s"})
                if m.get("cases"):
                    row.update(predict(m, rates, budget))
                if args.validate:
                    runs = [
                        run_sdcscan(profile, budget, f"cpu:1:{model}@0.1", work) for _ in range(args.validate)
                    ]
                    row["validate_n10_first_caught_s"] = [first_caught_s(j) for j in runs]
                results.append(row)
                if not args.json:
                    print(json.dumps(row), flush=True)
    doc = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "load": os.getloadavg(),
        },
        "results": results,
    }
    if args.json:
        print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
