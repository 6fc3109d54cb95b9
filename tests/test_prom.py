"""Prometheus textfile: prometheus_client's own parser reads every family, verdicts are one-hot per unit."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sdcscan.errors import ReportError
from sdcscan.outputs.prom import prom_text, sentinel_prom_text, write_prom
from sdcscan.outputs.publish import Outputs, publish
from sdcscan.report import SCHEMA_PATH
from sdcscan.timefmt import iso_utc
from tests.helpers.reports import build_report, build_unit, make_report


@pytest.fixture
def report() -> dict[str, Any]:
    """A hand-built two-unit report with cpu:1 failed; checked against the shipped JSON Schema."""
    data = make_report(fail_unit="cpu:1")
    jsonschema.validate(data, json.loads(SCHEMA_PATH.read_text()))
    return data


def _families(path: Path) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(path.read_text())}


def _value(families: dict[str, Any], name: str, **labels: str) -> float:
    matches = [
        s.value for s in families[name].samples if all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(matches) == 1, (name, labels, matches)
    return float(matches[0])


def test_textfile_parses_with_help_and_type(report: dict[str, Any], tmp_path: Path) -> None:
    """Every family has HELP text and gauge type; run-level values match the report."""
    path = tmp_path / "sdcscan.prom"
    write_prom(report, path)
    fams = _families(path)
    assert all(f.type == "gauge" and f.documentation for f in fams.values())
    assert _value(fams, "sdcscan_run_verdict", verdict="fail") == 1
    assert _value(fams, "sdcscan_run_verdict", verdict="pass") == 0
    assert _value(fams, "sdcscan_run_exit_code") == 1
    assert _value(fams, "sdcscan_run_duration_seconds") == pytest.approx(60.2)
    assert _value(fams, "sdcscan_last_run_timestamp_seconds") == 1735689660  # 2025-01-01T00:01:00Z
    assert _value(fams, "sdcscan_run_info", profile="quick", seed="7", hostname="node-a") == 1


def test_per_unit_verdict_mismatches_cases_and_throughput(report: dict[str, Any], tmp_path: Path) -> None:
    """One verdict metric per unit (one-hot), mismatch count, cases run and throughput per workload."""
    path = tmp_path / "sdcscan.prom"
    write_prom(report, path)
    fams = _families(path)
    assert _value(fams, "sdcscan_unit_verdict", unit="cpu:1", verdict="fail") == 1
    assert _value(fams, "sdcscan_unit_verdict", unit="cpu:0", verdict="pass") == 1
    assert _value(fams, "sdcscan_unit_verdict", unit="cpu:0", verdict="fail") == 0
    assert _value(fams, "sdcscan_unit_mismatches", unit="cpu:1") == 4
    assert _value(fams, "sdcscan_unit_cases_run", unit="cpu:0") == 8
    tp = _value(
        fams, "sdcscan_unit_throughput_ops_per_second", unit="cpu:0", workload="train", ops_unit="flop"
    )
    assert tp == 1.5e9
    assert _value(fams, "sdcscan_unit_workload_cases", unit="cpu:1", workload="matmul_golden") == 4
    assert _value(fams, "sdcscan_findings", kind="invariant") == 1


def test_checked_ops_and_the_bound_per_unit_and_workload(tmp_path: Path) -> None:
    """Checked ops of every unit with op and evidence labels; a bound only where the report gives one."""
    path = tmp_path / "sdcscan.prom"
    write_prom(make_report(fail_unit="cpu:1", checked=True), path)
    fams = _families(path)
    golden = {"workload": "matmul_golden", "op": "multiply-add", "evidence": "invariant"}
    assert _value(fams, "sdcscan_unit_checked_ops", unit="cpu:0", **golden) == 8e9
    assert _value(fams, "sdcscan_unit_checked_ops", unit="cpu:1", **golden) == 8e9
    assert _value(fams, "sdcscan_unit_checked_ops", unit="cpu:0", workload="train", evidence="digest") == 8e9
    assert _value(fams, "sdcscan_unit_sdc_rate_bound", unit="cpu:0", workload="matmul_golden") == 3 / 8e9
    bounded = {(s.labels["unit"], s.labels["workload"]) for s in fams["sdcscan_unit_sdc_rate_bound"].samples}
    assert bounded == {("cpu:0", "matmul_golden")}  # not the failing unit, not digest coverage


def test_a_report_without_checked_gives_no_checked_samples(report: dict[str, Any], tmp_path: Path) -> None:
    """An older report: the families are there, with no sample."""
    path = tmp_path / "sdcscan.prom"
    write_prom(report, path)
    fams = _families(path)
    assert not fams["sdcscan_unit_checked_ops"].samples and not fams["sdcscan_unit_sdc_rate_bound"].samples


def test_label_values_are_escaped(report: dict[str, Any], tmp_path: Path) -> None:
    """Quotes, backslashes and newlines in label values survive a round trip through the parser."""
    report["host"]["hostname"] = 'we"ird\\host\nname'
    path = tmp_path / "sdcscan.prom"
    write_prom(report, path)
    assert _value(_families(path), "sdcscan_run_info", hostname='we"ird\\host\nname') == 1


def test_telemetry_counter_deltas_are_exported(report: dict[str, Any], tmp_path: Path) -> None:
    """A hardware counter's rise during the run becomes a gauge labelled by scope and metric."""
    report["telemetry"] = {"host": {"edac_ue_count": {"before": 0, "after": 2, "value": 2, "delta": 2}}}
    path = tmp_path / "sdcscan.prom"
    write_prom(report, path)
    assert (
        _value(_families(path), "sdcscan_telemetry_counter_delta", scope="host", metric="edac_ue_count") == 2
    )


def test_unit_telemetry_levels_are_exported_with_the_units_model() -> None:
    """Reduced GPU and CPU readings (mean clock, max power) become gauges labelled by unit, model and metric;
    counters (exported as deltas), throttle bitmasks and values that are not numbers are left out."""
    gpu = build_unit("cuda:0", digests=["00"], model="NVIDIA H100 80GB HBM3")
    report = build_report([gpu, build_unit("cpu:0", digests=["00"])])
    report["telemetry"] = {
        "units": {
            "cuda:0": {
                "power_w": {"value": 612.5, "reduce": "max"},
                "clock_sm_mhz": {"value": 1755.0, "reduce": "mean"},
                "power_limit_w": {"value": 700, "reduce": "min"},
                "throttle_reasons": {"value": 4.0, "reduce": "or"},
                "ecc_corrected": {"value": 3.0, "reduce": "last", "delta": 1.0},
                "temp_c": {"value": None, "reduce": "max"},
                "util_pct": {"value": True, "reduce": "mean"},
            },
            "cpu:0": {"freq_mhz": {"value": 2596.1, "reduce": "mean"}},
        }
    }
    fams = _parse(prom_text(report))
    levels = {(s.labels["unit"], s.labels["metric"]): s for s in fams["sdcscan_unit_telemetry"].samples}
    assert set(levels) == {
        ("cuda:0", "power_w"), ("cuda:0", "clock_sm_mhz"), ("cuda:0", "power_limit_w"), ("cpu:0", "freq_mhz"),
    }  # fmt: skip
    assert levels[("cuda:0", "power_w")].value == 612.5
    assert levels[("cuda:0", "clock_sm_mhz")].labels["model"] == "NVIDIA H100 80GB HBM3"
    assert levels[("cpu:0", "freq_mhz")].labels["model"] == "Test CPU"
    assert not _parse(prom_text(make_report()))["sdcscan_unit_telemetry"].samples  # no telemetry, no samples


def test_a_gpus_load_over_case_time_is_exported_as_its_mean_and_max() -> None:
    """`in_cases` levels become sdcscan_unit_telemetry_in_cases{unit,model,metric,stat}; none without them."""
    gpu = build_unit("cuda:0", digests=["00"], model="NVIDIA H200")
    report = build_report([gpu])
    report["telemetry"] = {
        "units": {
            "cuda:0": {
                "util_pct": {
                    "value": 61.0,
                    "reduce": "mean",
                    "in_cases": {"mean": 97.5, "max": 100.0, "samples": 40},
                },
                "power_w": {
                    "value": 690.0,
                    "reduce": "max",
                    "in_cases": {"mean": 640.0, "max": 690.0, "samples": 40},
                },
                "temp_c": {"value": 70.0, "reduce": "max"},
            }
        }
    }
    samples = _parse(prom_text(report))["sdcscan_unit_telemetry_in_cases"].samples
    got = {(s.labels["metric"], s.labels["stat"]): s.value for s in samples}
    assert got == {("util_pct", "mean"): 97.5, ("util_pct", "max"): 100.0, ("power_w", "mean"): 640.0,
                   ("power_w", "max"): 690.0}  # fmt: skip
    assert {s.labels["model"] for s in samples} == {"NVIDIA H200"}
    assert not _parse(prom_text(make_report()))["sdcscan_unit_telemetry_in_cases"].samples


def test_write_is_atomic_and_world_readable(report: dict[str, Any], tmp_path: Path) -> None:
    """The file replaces the old one by rename, leaves no temporary behind, and node_exporter can read it."""
    path = tmp_path / "sdcscan.prom"
    path.write_text("old\n")
    write_prom(report, path)
    assert [p.name for p in tmp_path.iterdir()] == ["sdcscan.prom"]
    assert os.stat(path).st_mode & 0o777 == 0o644


def test_missing_directory_is_a_report_error(report: dict[str, Any], tmp_path: Path) -> None:
    """A textfile directory that does not exist is a clear ReportError, not a traceback."""
    with pytest.raises(ReportError, match="cannot write"):
        write_prom(report, tmp_path / "nope" / "sdcscan.prom")


# Issue 14: coverage from the history (Ripple) and kernel-log scans (Hardware Sentinel).

_SENTINEL = {
    "since": "2026-03-10T10:00:00Z",
    "until": "2026-03-10T11:00:00Z",
    "sources": ["journal", "rasdaemon"],
    "notes": [],
    "stats": {"lines": 100, "events": 9, "skipped": 0},
    "host_counts": {"segfault": 7, "trap": 1, "mce": 1},
    "units": {
        "cpu:7": {"counts": {"segfault": 6, "mce": 1}, "processes": 6, "programs": 5, "first_seen": 1.0,
                  "last_seen": 2.0},
        "cpu:2": {"counts": {"segfault": 1}, "processes": 1, "programs": 1, "first_seen": None, "last_seen": None},
    },
    "outliers": [{"unit": "cpu:7", "programs": 5, "expected": 0.4, "p_value": 1e-6, "events": 7,
                  "examples": ["python3"]}],
}  # fmt: skip
_SENTINEL_FAMILIES = {
    "sdcscan_sentinel_info", "sdcscan_sentinel_events", "sdcscan_sentinel_outlier",
    "sdcscan_sentinel_outlier_cores", "sdcscan_sentinel_last_scan_timestamp_seconds",
}  # fmt: skip
_COVERAGE_FAMILIES = {"sdcscan_unit_screened_seconds_24h", "sdcscan_unit_cases_24h"}


def _parse(text: str) -> dict[str, Any]:
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert all(f.type == "gauge" and f.documentation for f in fams.values())
    return fams


def test_coverage_families_appear_only_when_coverage_is_given(report: dict[str, Any]) -> None:
    """`coverage=` adds screened seconds and cases of the last 24 h per unit; without it, no such family."""
    assert not _COVERAGE_FAMILIES & set(_parse(prom_text(report)))
    cover = {
        "cpu:0": {"cases": 16, "seconds": 4.5, "runs": 2},
        "cpu:1": {"cases": 0, "seconds": 0.0, "runs": 1},
    }
    fams = _parse(prom_text(report, coverage=cover))
    assert _value(fams, "sdcscan_unit_screened_seconds_24h", unit="cpu:0") == 4.5
    assert _value(fams, "sdcscan_unit_screened_seconds_24h", unit="cpu:1") == 0
    assert _value(fams, "sdcscan_unit_cases_24h", unit="cpu:0") == 16
    hostile = {"cpu:0": {"cases": "x", "seconds": True}, "cpu:1": None, 5: {"cases": 1, "seconds": 1.0}}
    fams = _parse(prom_text(report, coverage=hostile))  # type: ignore[arg-type]
    assert (
        not fams["sdcscan_unit_screened_seconds_24h"].samples and not fams["sdcscan_unit_cases_24h"].samples
    )


def test_sentinel_section_of_a_report_becomes_event_outlier_and_timestamp_families(
    report: dict[str, Any],
) -> None:
    """Events per unit and kind (unit="host" for the whole host), 1 per outlier core, the scan's end."""
    assert not _SENTINEL_FAMILIES & set(_parse(prom_text(report)))
    report["sentinel"] = _SENTINEL
    fams = _parse(prom_text(report))
    assert _value(fams, "sdcscan_sentinel_events", unit="cpu:7", kind="segfault") == 6
    assert _value(fams, "sdcscan_sentinel_events", unit="cpu:2", kind="segfault") == 1
    assert _value(fams, "sdcscan_sentinel_events", unit="host", kind="trap") == 1
    assert [s.labels for s in fams["sdcscan_sentinel_outlier"].samples] == [{"unit": "cpu:7"}]
    assert _value(fams, "sdcscan_sentinel_outlier", unit="cpu:7") == 1
    assert _value(fams, "sdcscan_sentinel_outlier_cores") == 1
    assert _value(fams, "sdcscan_sentinel_last_scan_timestamp_seconds") == 1773140400  # 2026-03-10T11:00Z
    assert _value(fams, "sdcscan_sentinel_info", hostname="node-a", sources="journal,rasdaemon") == 1


def test_sentinel_prom_text_alone_has_the_same_families(report: dict[str, Any]) -> None:
    """`sdcscan sentinel --prom` writes exactly the sentinel families, with the same samples as a report's."""
    alone = _parse(sentinel_prom_text(_SENTINEL, "node-a"))
    assert set(alone) == _SENTINEL_FAMILIES
    report["sentinel"] = _SENTINEL
    in_report = _parse(prom_text(report))
    for name in _SENTINEL_FAMILIES:
        assert alone[name].samples == in_report[name].samples


@pytest.mark.parametrize(
    "section",
    [
        None,
        ["cpu:7"],
        {"host_counts": {"segfault": True, "mce": 2**64, "trap": -1, "xid": "2", 3: 1, "ok\ud800": 4},
         "units": {"cpu:1": 5, 7: {"counts": {"trap": 1}}, "cpu:2": {"counts": [1]}},
         "outliers": [None, "cpu:3", {"unit": 4}, {"unit": 'cpu:"9\n'}], "until": "soon", "sources": "journal"},
    ],
    ids=["none", "list", "wrong-types"],
)  # fmt: skip
def test_hostile_sentinel_sections_give_well_formed_text(section: Any) -> None:
    """Wrong types, huge or negative counts, odd unit names: skipped or escaped, the file still parses."""
    fams = _parse(sentinel_prom_text(section, "node-a"))
    assert set(fams) == _SENTINEL_FAMILIES
    events = {(s.labels["unit"], s.labels["kind"]): s.value for s in fams["sdcscan_sentinel_events"].samples}
    assert events == ({("host", "ok?"): 4} if isinstance(section, dict) else {})
    outliers = [s.labels["unit"] for s in fams["sdcscan_sentinel_outlier"].samples]
    assert outliers == (['cpu:"9\n'] if isinstance(section, dict) else [])
    assert _value(fams, "sdcscan_sentinel_last_scan_timestamp_seconds") > 1.7e9  # the write time


def test_publish_records_the_history_then_writes_its_coverage(tmp_path: Path) -> None:
    """With --prom and history, the textfile's 24 h coverage includes the run just recorded."""
    prom, db = tmp_path / "m.prom", tmp_path / "h.sqlite3"
    ended = iso_utc(time.time() - 60)
    publish(make_report(fail_unit=None, run_id="r1", ended_at=ended), Outputs(prom=prom, history=db))
    publish(make_report(fail_unit=None, run_id="r2", ended_at=ended), Outputs(prom=prom, history=db))
    fams = _parse(prom.read_text())
    assert _value(fams, "sdcscan_unit_cases_24h", unit="cpu:1") == 16  # 8 cases in each of the two runs
    assert _value(fams, "sdcscan_unit_screened_seconds_24h", unit="cpu:0") == 4.0
    publish(make_report(run_id="r3", ended_at=ended), Outputs(prom=prom, history=db, record_history=False))
    assert not _COVERAGE_FAMILIES & set(_parse(prom.read_text()))


def test_publish_writes_the_prom_file_without_coverage_when_the_history_fails(tmp_path: Path) -> None:
    """An emptied history is named in the error; the Prometheus file is still written, without coverage."""
    prom, db = tmp_path / "m.prom", tmp_path / "h.sqlite3"
    db.write_bytes(b"")
    with pytest.raises(ReportError, match=r"history .* is an empty file"):
        publish(make_report(run_id="r1"), Outputs(prom=prom, history=db))
    fams = _parse(prom.read_text())
    assert "sdcscan_unit_verdict" in fams and not _COVERAGE_FAMILIES & set(fams)


def test_an_integer_too_large_for_a_double_is_exported_as_infinite() -> None:
    """A damaged or hostile report's 4000-digit telemetry value gives +Inf, not an OverflowError."""
    report = build_report([build_unit("cpu:0", digests=["00"])])
    report["telemetry"] = {"units": {"cpu:0": {"freq_mhz": {"value": 10**4000, "reduce": "mean"}}}}
    (sample,) = _parse(prom_text(report))["sdcscan_unit_telemetry"].samples
    assert sample.value == float("inf")
