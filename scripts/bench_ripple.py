#!/usr/bin/env python3
"""Measure what background (Ripple) mode costs the work beside it, and what it still screens; prints JSON.

Example:
    python scripts/bench_ripple.py                         # 3 alternating rounds of each scenario
    python scripts/bench_ripple.py --rounds 5 --window 10 --scenarios saturated,duty

A foreground job runs one process per CPU, each pinned to its CPU, counting iterations of a fixed
CPU-bound kernel (SHA-256 of a 64 KiB buffer: cache-resident, like most service code) in a
measurement window. Each round measures the job alone, then with `sdcscan run -p ripple --background`
beside it (started `--lead` seconds before the window, so its start-up falls inside the run too),
alternately, so drifts of the machine's speed hit both sides alike. Scenarios:
- saturated: every CPU busy 100% of the time. Target: loss <= 2% (median of the rounds).
- duty: every CPU busy `--duty` of each 100 ms period, idle the rest: sdcscan should fill the gaps.
- idle: no foreground; sdcscan's cases per second in background mode against the same profile in
  the foreground (`--foreground`), which says whether an idle host is screened at full speed.
Each sdcscan run gets a fresh state directory, so its host gate finds the host never screened and
starts at once: this measures the per-core pacing and the priority, the parts that act while it runs.
A benchmark, not a test: numbers depend on the machine; ratios within one run travel best.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUFFER = b"\x5a" * 65536
PERIOD_S = 0.1


def _foreground(cpu: int, start: float, window: float, duty: float, out: Any) -> None:
    """Pinned to `cpu`: wait for `start`, then count kernel iterations over `window` seconds, working
    `duty` of every PERIOD_S and sleeping the rest."""
    os.sched_setaffinity(0, {cpu})
    while time.time() < start:
        time.sleep(min(0.05, max(0.0, start - time.time())))
    end, done = start + window, 0
    while (now := time.time()) < end:
        work_until = min(end, now + duty * PERIOD_S) if duty < 1.0 else end
        while time.time() < work_until:
            hashlib.sha256(BUFFER).digest()
            done += 1
        if duty < 1.0:
            time.sleep(max(0.0, now + PERIOD_S - time.time()))
    out.put(done)


def foreground_rate(cpus: list[int], *, start: float, window: float, duty: float) -> float:
    """Kernel iterations per second of the whole foreground job over the window."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_foreground, args=(c, start, window, duty, queue)) for c in cpus]
    for p in procs:
        p.start()
    total = sum(queue.get(timeout=window + 120) for _ in procs)
    for p in procs:
        p.join()
    return total / window


def start_sdcscan(budget_s: float, out: Path, *, background: bool) -> subprocess.Popen[bytes]:
    """`sdcscan run -p ripple` with its own fresh state directory, writing its report to `out`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="bench-ripple-")
    mode = "--background" if background else "--foreground"
    argv = [sys.executable, "-m", "sdcscan", "run", "-p", "ripple", mode, "--budget", f"{budget_s:.0f}s"]
    argv += ["--no-history", "-o", str(out)]
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def screened(report_path: Path, window: tuple[float, float] | None = None) -> dict[str, Any]:
    """What a run screened: cases (all, and those that ended inside `window`, by the journal's clock),
    case seconds, time its gates held it back, and its exit code."""
    report = json.loads(report_path.read_text())
    units = report["units"]
    in_window = None
    if window is not None:
        records = (json.loads(line) for line in Path(report["run"]["journal"]).read_text().splitlines())
        in_window = sum(
            1 for r in records if r.get("type") == "case" and window[0] <= r.get("t", 0) <= window[1]
        )
    return {
        "cases_in_window": in_window,
        "exit_code": report["exit_code"],
        "cases": sum(u["cases_run"] for u in units),
        "case_seconds": round(sum(t["seconds"] for u in units for t in u["throughput"].values()), 2),
        "waited_s": round(sum((u.get("pacing") or {}).get("waited_s", 0.0) for u in units), 2),
        "duration_s": report["run"]["duration_s"],
    }


def one_round(cpus: list[int], args: argparse.Namespace, duty: float, out: Path) -> dict[str, Any]:
    """The foreground alone, then beside a background sdcscan run, over windows of equal length."""
    alone = foreground_rate(cpus, start=time.time() + 0.5, window=args.window, duty=duty)
    proc = start_sdcscan(args.lead + args.window + 2, out, background=True)
    start = time.time() + args.lead
    try:
        beside = foreground_rate(cpus, start=start, window=args.window, duty=duty)
    finally:
        proc.wait(timeout=args.lead + args.window + 120)
    done = screened(out, (start, start + args.window))
    return {"alone": alone, "beside": beside, "loss": 1 - beside / alone, "sdcscan": done}


def busy_scenario(cpus: list[int], args: argparse.Namespace, duty: float, tmp: Path) -> dict[str, Any]:
    rounds = [one_round(cpus, args, duty, tmp / f"r{i}.json") for i in range(args.rounds)]
    return {
        "duty": duty,
        "loss_median": round(median(r["loss"] for r in rounds), 4),
        "loss_each": [round(r["loss"], 4) for r in rounds],
        "rate_alone_median": round(median(r["alone"] for r in rounds), 1),
        "sdcscan_cases_median": median(r["sdcscan"]["cases"] for r in rounds),
        "sdcscan_cases_in_window_median": median(r["sdcscan"]["cases_in_window"] for r in rounds),
        "rounds": rounds,
    }


def idle_scenario(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Cases per second of the ripple profile in background and foreground mode on an idle host."""
    budget = args.lead + args.window
    rates: dict[str, list[float]] = {"background": [], "foreground": []}
    for i in range(args.rounds):
        for mode in ("background", "foreground"):
            out = tmp / f"idle-{mode}-{i}.json"
            start_sdcscan(budget, out, background=mode == "background").wait(timeout=budget + 120)
            s = screened(out)
            rates[mode].append(s["cases"] / s["duration_s"])
    bg, fg = median(rates["background"]), median(rates["foreground"])
    return {"cases_per_s_background": round(bg, 2), "cases_per_s_foreground": round(fg, 2),
            "background_over_foreground": round(bg / fg, 3), "each": rates}  # fmt: skip


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"cpus": len(os.sched_getaffinity(0)), "kernel": os.uname().release}
    try:
        model = [ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")]
        info["cpu_model"] = model[0].split(":", 1)[1].strip() if model else None
    except OSError:
        info["cpu_model"] = None
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per scenario (3)")
    parser.add_argument("--window", type=float, default=8.0, help="measurement window, seconds (8)")
    parser.add_argument(
        "--lead", type=float, default=4.0, help="sdcscan starts this long before the window (4)"
    )
    parser.add_argument("--duty", type=float, default=0.5, help="busy share of the duty scenario (0.5)")
    parser.add_argument("--scenarios", default="saturated,duty,idle")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    result: dict[str, Any] = {"machine": machine(), "window_s": args.window, "rounds": args.rounds}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.scenarios.split(","):
            started = time.time()
            if name == "saturated":
                result[name] = busy_scenario(cpus, args, 1.0, Path(tmp))
            elif name == "duty":
                result[name] = busy_scenario(cpus, args, args.duty, Path(tmp))
            elif name == "idle":
                result[name] = idle_scenario(args, Path(tmp))
            else:
                parser.error(f"unknown scenario {name!r} (saturated, duty, idle)")
            result[name]["wall_s"] = round(time.time() - started, 1)
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
