"""Prometheus metrics from a report, in node_exporter's textfile-collector format.

node_exporter reads every `*.prom` file in its `--collector.textfile.directory` on each scrape, so
the file is written atomically (temporary file in the same directory, then rename) and readable by
other users. Verdicts are one-hot gauges (`sdcscan_unit_verdict{unit="cpu:1",verdict="fail"} 1`),
the Prometheus idiom for an enum, so alerts read `sdcscan_unit_verdict{verdict="fail"} == 1`. Each
unit's telemetry levels carry its model (`sdcscan_unit_telemetry{unit,model,metric}`), so that a GPU's
power or clock can be compared with the median of its model's (deploy/prometheus/sdcscan.rules.yml).

Two families come from beyond the report: what each unit screened in the last 24 h, from the run
history (`coverage`, passed in by `publish`: an alert on `sdcscan_unit_screened_seconds_24h == 0`
catches a unit background screening never reaches), and a kernel-log scan's events and outlier
cores (`sentinel` section; `sentinel_prom_text` writes them alone for `sdcscan sentinel --prom`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from typing import Literal

from sdcscan.files import write_text_atomic
from sdcscan.outcomes import VERDICTS, unit_order
from sdcscan.outputs.coverage import UnitCoverage
from sdcscan.outputs.sentinel_history import is_count, outlier_units, sources
from sdcscan.report.document import Metrics, Report, Telemetry, Unit
from sdcscan.timefmt import parse_iso_utc

Sample = tuple[dict[str, str], float]


Family = tuple[str, str, list[Sample]]
Coverage = Mapping[str, UnitCoverage]  # unit -> what it screened (history.coverage)
_LEVELS = ("mean", "max", "min")  # telemetry reductions (sampler.REDUCE) that give a level over the run


def write_prom(report: Report, path: str | os.PathLike[str], *, coverage: Coverage | None = None) -> None:
    """Write the report's metrics to `path` (name it `*.prom` for node_exporter), atomically.

    Args:
        report: a judged report.
        path: the textfile.
        coverage: each unit's screening over the last 24 h (`history.coverage`); None: no such families.

    Raises:
        ReportError: the file could not be written, or `path` exists and is not a regular file or
            is a symlink (`sdcscan.files.replace_problem`: /dev/null is never replaced).
    """
    write_text_atomic(path, prom_text(report, coverage=coverage))


def prom_text(report: Report, *, coverage: Coverage | None = None) -> str:
    """The report as Prometheus text exposition format (version 0.0.4) with HELP and TYPE lines.

    Args:
        report: a judged report; its optional `sentinel` section adds the sentinel families.
        coverage: each unit's screening over the last 24 h (`history.coverage`); None: no such families.
    """
    families = _run_families(report) + _unit_families(report["units"]) + _unit_telemetry_families(report)
    if coverage is not None:
        families += _coverage_families(coverage)
    section = report.get("sentinel")
    if isinstance(section, Mapping):
        families += _sentinel_families(section, report["host"]["hostname"])
    return _exposition(families)


def sentinel_prom_text(section: Mapping[str, object], hostname: str) -> str:
    """A kernel-log scan alone (for `sdcscan sentinel --prom FILE`), in the families `prom_text` uses.

    Args:
        section: the scan's section (`since`, `until`, `sources`, `host_counts`, `units`, `outliers`);
            values of the wrong type are left out.
        hostname: the scanned host, as the `hostname` label of `sdcscan_sentinel_info`.
    """
    return _exposition(_sentinel_families(section if isinstance(section, Mapping) else {}, hostname))


def _exposition(families: list[Family]) -> str:
    lines = []
    for name, help_text, samples in families:
        lines.append(f"# HELP {name} {_escape_help(help_text)}")
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f"{name}{_labels(labels)} {_value(value)}" for labels, value in samples)
    return "\n".join(lines) + "\n"


def _run_families(report: Report) -> list[Family]:
    run = report["run"]
    info = {"run_id": run["id"], "profile": run["profile"]["name"], "seed": str(run["seed"]),
            "hostname": report["host"]["hostname"], "version": report["tool"]["version"]}  # fmt: skip
    return [
        ("sdcscan_run_info", "Labels of the last run (value always 1): run id, profile, seed, host, version.",
         [(info, 1)]),
        ("sdcscan_run_verdict", "Verdict of the last run, one-hot: 1 for the verdict it had "
         "(pass, fail = SDC suspected, invalid = could not judge, interrupted).",
         _one_hot({}, report["verdict"])),
        ("sdcscan_run_exit_code", "Exit code of the last run: 0 pass, 1 fail, 3 invalid, 130/143 stopped.",
         [({}, report.get("exit_code", -1))]),
        ("sdcscan_run_duration_seconds", "Wall time of the last run.", [({}, run["duration_s"])]),
        ("sdcscan_run_budget_seconds", "Time budget of the last run.", [({}, run["budget_s"])]),
        ("sdcscan_last_run_timestamp_seconds", "When the last run ended, Unix time; alert when it is stale.",
         [({}, _epoch(run.get("ended_at")))]),
        ("sdcscan_findings", "Findings of the last run by kind.", _findings(report)),
        ("sdcscan_telemetry_counter_delta", "Rise of a hardware error counter during the last run "
         "(scope is host or a unit).", _counter_deltas(report.get("telemetry") or {})),
    ]  # fmt: skip


def _unit_families(units: list[Unit]) -> list[Family]:
    return [
        ("sdcscan_unit_verdict", "Verdict of each unit in the last run, one-hot: 1 for the verdict it had.",
         [s for u in units for s in _one_hot({"unit": u["id"], "kind": u["kind"]}, u["verdict"])]),
        ("sdcscan_unit_mismatches", "Mismatching values the invariant checks found on each unit, last run.",
         [({"unit": u["id"]}, u["mismatches"]) for u in units]),
        ("sdcscan_unit_cases_run", "Cases each unit ran in the last run.",
         [({"unit": u["id"]}, u["cases_run"]) for u in units]),
        ("sdcscan_unit_throughput_ops_per_second", "Throughput of each unit per workload in the last run "
         "(ops_unit says what an op is, e.g. flop).", _throughput(units, "ops_per_s")),
        ("sdcscan_unit_workload_cases", "Cases each unit ran per workload in the last run.",
         _throughput(units, "cases")),
        ("sdcscan_unit_checked_ops", "Operations each unit's checks covered per workload in the last run "
         "(op says what one is; evidence=digest proves something only once compared with peers).",
         _checked(units)),
        ("sdcscan_unit_sdc_rate_bound", "95% upper bound on each passing unit's silent-corruption rate per "
         "checked op, per workload, from the last run: 3 / (checked ops x the self-test's detection floor).",
         _bounds(units)),
    ]  # fmt: skip


def _unit_telemetry_families(report: Report) -> list[Family]:
    return [
        ("sdcscan_unit_telemetry", "Each unit's sensor reading over the last run, reduced as the report's "
         "telemetry says (mean clocks, frequency, load and utilisation; max power and temperature; min "
         "power limit); model is the unit's, to compare it with units of the same model.",
         _levels(report)),
        ("sdcscan_unit_telemetry_in_cases", "A unit's utilisation, SM clock and power over the samples taken "
         "while it ran a case (start-up and waits left out): stat is mean or max.", _case_levels(report)),
    ]  # fmt: skip


def _case_levels(report: Report) -> list[Sample]:
    models = {u["id"]: u.get("model", "") for u in report["units"]}
    out: list[Sample] = []
    for unit, metrics in ((report.get("telemetry") or {}).get("units") or {}).items():
        for metric, stats in sorted((metrics or {}).items()):
            in_cases = stats.get("in_cases") if isinstance(stats, dict) else None
            if not isinstance(in_cases, dict):
                continue
            for stat in ("mean", "max"):
                value = in_cases.get(stat)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    labels = {"unit": unit, "model": models.get(unit, ""), "metric": metric, "stat": stat}
                    out.append((labels, value))
    return out


def _levels(report: Report) -> list[Sample]:
    # Levels only: counters are exported as their deltas, and a throttle-reason bitmask ("or") is not a
    # quantity one could compare across a cohort.
    models = {u["id"]: u.get("model", "") for u in report["units"]}
    out: list[Sample] = []
    for unit, metrics in ((report.get("telemetry") or {}).get("units") or {}).items():
        for metric, stats in sorted((metrics or {}).items()):
            if not isinstance(stats, dict) or stats.get("reduce") not in _LEVELS:
                continue
            value = stats.get("value")
            if isinstance(value, int | float) and not isinstance(value, bool):
                out.append(({"unit": unit, "model": models.get(unit, ""), "metric": metric}, value))
    return out


def _coverage_families(coverage: Coverage) -> list[Family]:
    units = [(u, c) for u, c in coverage.items() if isinstance(u, str) and isinstance(c, Mapping)]
    return [
        ("sdcscan_unit_screened_seconds_24h", "Seconds of cases each unit ran in the runs that ended in "
         "the last 24 h (from the run history); 0 or absent: the unit is not being screened.",
         [({"unit": u}, c["seconds"]) for u, c in units if _is_number(c.get("seconds"))]),
        ("sdcscan_unit_cases_24h", "Cases each unit ran in the runs that ended in the last 24 h.",
         [({"unit": u}, c["cases"]) for u, c in units if _is_number(c.get("cases"))]),
    ]  # fmt: skip


def _sentinel_families(section: Mapping[str, object], hostname: str) -> list[Family]:
    outliers = outlier_units(section)
    info = {"hostname": str(hostname), "sources": ",".join(sources(section))}
    return [
        ("sdcscan_sentinel_info", "Labels of the last kernel-log scan (value always 1): host and the "
         "logs it read.", [(info, 1)]),
        ("sdcscan_sentinel_events", "Kernel events (segfault, trap, mce, xid) in the last scan's window, "
         "per unit and kind; unit=\"host\" counts the whole host, events without a CPU included.",
         _sentinel_events(section)),
        ("sdcscan_sentinel_outlier", "1 for each core on which far more programs crashed than on its "
         "peers in the last scan (a suspect core: screen it with sdcscan run --units).",
         [({"unit": u}, 1) for u in outliers]),
        ("sdcscan_sentinel_outlier_cores", "How many outlier cores the last kernel-log scan found.",
         [({}, len(outliers))]),
        ("sdcscan_sentinel_last_scan_timestamp_seconds", "End of the last kernel-log scan's window, Unix "
         "time; alert when it is stale.", [({}, _epoch(section.get("until")))]),
    ]  # fmt: skip


def _sentinel_events(section: Mapping[str, object]) -> list[Sample]:
    host = section.get("host_counts")
    samples: list[Sample] = [({"unit": "host", "kind": k}, n) for k, n in _counts(host)]
    units = section.get("units")
    tallies = [(u, t) for u, t in units.items() if isinstance(u, str)] if isinstance(units, Mapping) else []
    for unit, tally in sorted(tallies, key=lambda ut: unit_order(ut[0])):
        if isinstance(tally, Mapping):
            samples.extend(({"unit": unit, "kind": k}, n) for k, n in _counts(tally.get("counts")))
    return samples


def _counts(counts: object) -> list[tuple[str, int]]:
    """The valid `(kind, count)` pairs of a `{kind: count}` mapping, by kind."""
    if not isinstance(counts, Mapping):
        return []
    return sorted((k, c) for k, c in counts.items() if isinstance(k, str) and is_count(c))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _one_hot(labels: dict[str, str], verdict: str) -> list[Sample]:
    return [({**labels, "verdict": v}, 1 if v == verdict else 0) for v in VERDICTS]


def _throughput(units: list[Unit], key: Literal["ops_per_s", "cases"]) -> list[Sample]:
    out: list[Sample] = []
    for u in units:
        for wl, t in sorted((u.get("throughput") or {}).items()):
            labels = {"unit": u["id"], "workload": wl}
            if key == "ops_per_s":
                labels["ops_unit"] = t["ops_unit"]
            out.append((labels, t[key]))
    return out


def _checked(units: list[Unit]) -> list[Sample]:
    return [
        ({"unit": u["id"], "workload": w, "op": c["op"], "evidence": c["evidence"]}, c["checked_ops"])
        for u in units
        for w, c in sorted((u.get("checked") or {}).items())
    ]


def _bounds(units: list[Unit]) -> list[Sample]:
    """Only for a passing unit with a bound: a unit that failed proves no rate (a cluster report may fail
    a unit its rank's report passed), and no sample says so."""
    return [
        ({"unit": u["id"], "workload": w}, bound)
        for u in units
        if u["verdict"] == "pass"
        for w, c in sorted((u.get("checked") or {}).items())
        if (bound := c["sdc_rate_bound"]) is not None
    ]


def _findings(report: Report) -> list[Sample]:
    counts: dict[str, int] = {}
    for f in report.get("findings", []):
        counts[f["kind"]] = counts.get(f["kind"], 0) + 1
    return [({"kind": k}, n) for k, n in sorted(counts.items())]


def _counter_deltas(telemetry: Telemetry) -> list[Sample]:
    scopes: dict[str, Metrics | None] = {
        "host": telemetry.get("host") or {},
        **(telemetry.get("units") or {}),
    }
    return [
        ({"scope": scope, "metric": metric}, delta)
        for scope, metrics in scopes.items()
        for metric, stats in sorted((metrics or {}).items())
        if isinstance(stats, dict) and (delta := stats.get("delta")) is not None
    ]


def _epoch(iso: object) -> float:
    """ISO-8601 UTC -> Unix time; the write time if the report has none (an interrupted run may not)."""
    try:
        return parse_iso_utc(str(iso))
    except ValueError:
        return time.time()


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in labels.items()) + "}"


def _escape_label(value: str) -> str:
    value = value.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate cannot be written as UTF-8
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _value(value: float) -> str:
    try:
        v = float(value)
    except OverflowError:  # an integer too large for a double (a damaged or hostile report's): infinite
        v = math.inf if value > 0 else -math.inf
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)
