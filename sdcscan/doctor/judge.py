"""Each doctor step's judgement, from what its children left: pure, so tests drive it with recorded inputs.

- `selftest_reasons`: every detection floor held, no false positive, negative controls silent.
- `determinism`: one plan run twice; every case's digest is the same across the runs and across the
  units of a cohort. A unit the run itself judged `fail` is a real finding, not a determinism problem.
- `drill_reasons`: the struck unit is named with the injection's verdict, its peers pass, the run ended
  within its documented bound and left no process behind.
- `speed`: achieved rate, plain-op peak, efficiency and compute share per kind and workload, and on a
  GPU its utilisation, SM clock, power and temperature against its power limit.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdcscan.errors import EXIT_FAIL, EXIT_INVALID
from sdcscan.outcomes import STATUS_OK
from sdcscan.report import case_records
from sdcscan.report.document import Report, Throughput, Unit

# What each injection must produce on the struck unit: its verdict, the run's exit code, and a word of
# the reason the runner writes (runner._watchdog: "... hung: ...", "worker process died ...").
EXPECTED = {
    "bitflip": ("fail", EXIT_FAIL, None),
    "nan": ("fail", EXIT_FAIL, None),
    "hang": ("invalid", EXIT_INVALID, "hung"),
    "crash": ("invalid", EXIT_INVALID, "died"),
}
MAX_CASES_NAMED = 8
GPU_TELEMETRY = ("util_pct", "clock_sm_mhz", "power_w", "power_limit_w", "temp_c")


def selftest_reasons(device: str, result: dict[str, Any]) -> list[str]:
    """Why `sdcscan selftest --device DEVICE` does not vouch for the detectors (empty: it does)."""
    reasons = []
    for row in result["rows"]:
        if row["passed"]:
            continue
        what = f"{device}: {row['workload']} {row['variant']}"
        if row["site"] == "clean":
            reasons.append(
                f"{what}: false positive in {row['false_positives']} of {row['trials']} clean trials"
                + (f" ({row['first_false_positive']})" if row.get("first_false_positive") else "")
            )
        elif row["not_reached"]:
            reasons.append(f"{what}: fault site {row['site']} was never reached")
        elif row["negative_control"]:
            reasons.append(
                f"{what}: negative control {row['site']} fired in {row['detected']} of {row['trials']} trials"
            )
        else:
            rate = "no trial" if row["rate"] is None else f"{row['rate']:.0%}"
            reasons.append(
                f"{what}: detection floor missed at {row['site']} bit {row['bit']}: {rate} of "
                f"{row['trials']} trials, below {row['floor']:.0%} beyond chance"
            )
    if not result["rows"]:
        reasons.append(f"{device}: the self-test ran no workload")
    return reasons


@dataclass
class Judgement:
    """A step's verdict: real findings (exit 1), reasons not to trust sdcscan (exit 3), facts shown."""

    findings: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


def determinism(reports: Sequence[Report], plan_workloads: Sequence[str]) -> Judgement:
    """Judge the same plan run twice: units' verdicts, then digests across runs and across a cohort."""
    out = Judgement()
    blamed: set[str] = set()
    for n, report in enumerate(reports, 1):
        for record in report["units"]:
            _clean_verdict(out, n, record, blamed)
    differing: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    compared: dict[tuple[str, str], int] = defaultdict(int)  # (unit, workload) -> cases compared
    for where, unit, workload, index, same in _digest_groups(reports, blamed):
        if not same:
            differing[workload][where].append(index)
        elif unit is not None:
            compared[(unit, workload)] += 1
    for workload, places in sorted(differing.items()):
        named = "; ".join(f"{where}: cases {_cases(ix)}" for where, ix in sorted(places.items()))
        out.reasons.append(f"{workload} does not reproduce on this stack ({named})")
    units = sorted({u["id"] for r in reports for u in r["units"]} - blamed)
    for unit in units:
        for workload in plan_workloads:
            if not compared[(unit, workload)] and workload not in differing:
                out.reasons.append(f"{workload} on {unit}: no case ran in both runs (give a larger --budget)")
    out.details = {
        "cases_compared": sum(compared.values()),
        "per_workload": {w: sum(n for (_, wl), n in compared.items() if wl == w) for w in plan_workloads},
    }
    return out


def _clean_verdict(out: Judgement, run: int, unit: Unit, blamed: set[str]) -> None:
    """A clean run's unit: `fail` is a finding (unless every unit failed the case: software), `invalid`
    a reason not to trust this stack."""
    verdict, reason = unit["verdict"], unit.get("reason") or ""
    retest = unit.get("retest")
    classification = retest.get("classification") if isinstance(retest, dict) else None  # not validated
    if verdict == "fail" and classification != "case":
        blamed.add(unit["id"])
        out.findings.append(
            f"{unit['id']} miscomputed in clean run {run}: {reason} (re-runs: {classification})"
        )
    elif verdict == "fail":
        out.reasons.append(
            f"run {run}: {unit['id']} failed cases that fail on every unit (software): {reason}"
        )
    elif verdict != "pass":
        out.reasons.append(f"run {run}: {unit['id']} was {verdict}: {reason}")


def _digest_groups(
    reports: Sequence[Report], blamed: set[str]
) -> list[tuple[str, str | None, str, int, bool]]:
    """(where, unit, workload, case, digests agree) for each case a unit, or a cohort, ran more than once.

    `where` names the comparison: "cpu:0 across runs" (`unit` cpu:0) or "cohort of cpu:0, cpu:1 in
    run 2" (`unit` None). Units the
    runs blamed are left out: their difference is the finding. Plans differ by kind, so a case is
    always keyed by its unit or cohort too.
    """
    groups: list[tuple[str, str | None, str, int, bool]] = []
    across_runs: dict[tuple[str, int], dict[int, str]] = defaultdict(dict)
    workload_of: dict[tuple[str, int], str] = {}
    for run, report in enumerate(reports, 1):
        cohorts = {u["id"]: u["cohort"] for u in report["units"]}
        per_case: dict[tuple[str, int], dict[str, str]] = defaultdict(dict)
        for rec in case_records(report):
            if rec.unit in blamed or rec.status != STATUS_OK or rec.digest is None:
                continue
            across_runs[(rec.unit, rec.index)][run] = rec.digest
            per_case[(cohorts[rec.unit], rec.index)][rec.unit] = rec.digest
            workload_of[(rec.unit, rec.index)] = rec.workload
        for (_, index), digests in per_case.items():
            if len(digests) > 1:
                first = min(digests)
                where = f"cohort of {', '.join(sorted(digests))} in run {run}"
                same = len(set(digests.values())) == 1
                groups.append((where, None, workload_of[(first, index)], index, same))
    for (unit, index), runs in across_runs.items():
        if len(runs) == len(reports) > 1:
            same = len(set(runs.values())) == 1
            groups.append((f"{unit} across runs", unit, workload_of[(unit, index)], index, same))
    return groups


def _cases(indices: list[int]) -> str:
    shown = ", ".join(str(i) for i in sorted(indices)[:MAX_CASES_NAMED])
    return shown + (f" and {len(indices) - MAX_CASES_NAMED} more" if len(indices) > MAX_CASES_NAMED else "")


@dataclass(frozen=True)
class DrillRun:
    """What one injection run left: its report (None: it wrote none), exit code, time, bound, leftovers."""

    kind: str
    struck: tuple[str, ...]
    report: Report | None
    exit_code: int | None  # None: killed at the doctor's time limit
    seconds: float
    bound_s: float
    left_behind: tuple[str, ...] = ()


def run_reasons(label: str, seconds: float, bound_s: float, left_behind: Sequence[str]) -> list[str]:
    """Why a run broke its contract with cron and Slurm: it ended past its bound, or left processes."""
    reasons = []
    if seconds > bound_s:
        reasons.append(f"{label}: the run took {seconds:.0f} s, past its bound of {bound_s:.0f} s")
    if left_behind:
        reasons.append(f"{label}: processes left behind: {', '.join(left_behind)}")
    return reasons


def drill_reasons(run: DrillRun) -> list[str]:
    """Why one injection run does not show that sdcscan names and contains a bad unit (empty: it does)."""
    verdict, code, word = EXPECTED[run.kind]
    reasons = run_reasons(f"{run.kind} drill", run.seconds, run.bound_s, run.left_behind)
    if run.report is None:
        return [*reasons, f"{run.kind} drill: the run wrote no report (exit {run.exit_code})"]
    if run.exit_code != code:
        reasons.append(f"{run.kind} drill: the run exited {run.exit_code}, expected {code}")
    for unit in run.report["units"]:
        got, why = unit["verdict"], unit.get("reason") or ""
        if unit["id"] in run.struck:
            if got != verdict or (word is not None and word not in why):
                expected = verdict + (f" ({word})" if word else "")
                reasons.append(
                    f"{run.kind} drill: struck {unit['id']} was {got} ({why}), expected {expected}"
                )
        elif got != "pass":
            reasons.append(f"{run.kind} drill: peer {unit['id']} was {got}, expected pass: {why}")
    missing = set(run.struck) - {u["id"] for u in run.report["units"]}
    reasons += [f"{run.kind} drill: struck {u} is missing from the report" for u in sorted(missing)]
    return reasons


def speed(report: Report) -> dict[str, Any]:
    """Per kind and workload the median over its units of rate, peak, efficiency and compute share; per
    GPU the telemetry of the run beside its power limit."""
    per_kind: dict[str, dict[str, list[Throughput]]] = defaultdict(lambda: defaultdict(list))
    for unit in report["units"]:
        for workload, t in unit.get("throughput", {}).items():
            per_kind[unit["kind"]][workload].append(t)
    rows = [
        {
            "kind": kind,
            "workload": workload,
            "units": len(records),
            "ops_per_s": _median([r.get("ops_per_s") for r in records]),
            "ops_unit": records[0].get("ops_unit"),
            "peak_ops_per_s": _median([r.get("peak_ops_per_s") for r in records]),
            "efficiency": _median([r.get("efficiency") for r in records]),
            "compute_share": _median([(r.get("shares") or {}).get("compute") for r in records]),
        }
        for kind, workloads in sorted(per_kind.items())
        for workload, records in sorted(workloads.items())
    ]
    telemetry = (report.get("telemetry") or {}).get("units") or {}
    gpus = {
        unit: gpu_load(metrics or {})
        for unit, metrics in sorted(telemetry.items())
        if unit.startswith("cuda:")
    }
    return {"workloads": rows, "gpus": gpus}


def gpu_load(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A GPU's load as the doctor shows it: utilisation, SM clock and power over the samples taken while it
    ran cases (mean, and `_max`), where the report has them (else over the whole run, start-up included,
    and `while` says so); the power limit and the hottest temperature; and the sentence (`line`)."""
    out: dict[str, Any] = {}
    in_cases = all(((metrics.get(m) or {}).get("in_cases")) for m in ("util_pct", "power_w"))
    for m in GPU_TELEMETRY:
        stats = metrics.get(m) or {}
        case_stats = stats.get("in_cases") or {}
        out[m] = case_stats.get("mean", stats.get("value")) if in_cases else stats.get("value")
        if m in ("util_pct", "clock_sm_mhz", "power_w"):
            out[f"{m}_max"] = case_stats.get("max") if in_cases else None
    out["while"] = "running cases" if in_cases else "the whole run"
    out["line"] = (
        f"utilisation {_num(out['util_pct'])} % (max {_num(out['util_pct_max'])}), SM clock "
        f"{_num(out['clock_sm_mhz'])} MHz (max {_num(out['clock_sm_mhz_max'])}), power {_num(out['power_w'])} W "
        f"(max {_num(out['power_w_max'])}) of {_num(out['power_limit_w'])} W, {_num(out['temp_c'])} °C at most, "
        f"over {out['while']}"
    )
    return out


def _num(value: object) -> str:
    return "?" if not isinstance(value, int | float) else f"{value:.0f}"


def _median(values: list[Any]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return round(statistics.median(numbers), 4) if numbers else None
