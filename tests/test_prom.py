"""Prometheus textfile: prometheus_client's own parser reads every family, verdicts are one-hot per unit."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sdcscan.errors import ReportError
from sdcscan.outputs.prom import write_prom
from sdcscan.report import SCHEMA_PATH
from tests.helpers.reports import make_report


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
