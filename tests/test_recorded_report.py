"""A report recorded from a real `sdcscan run` (tests/data/report_v1.json) goes through every reader and writer.

The file was made once, unscrubbed, with:
    sdcscan run --profile quick --budget 8s --units cpu:0,cpu:1 --seed 7 --hostname recorded-host \\
        -o tests/data/report_v1.json --no-history
Re-record it (same command) when the report schema changes; these tests then say what a change broke.
"""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from junitparser import JUnitXml
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from sdcscan.fleet.reading import read_reports
from sdcscan.outputs.junit import junit_xml
from sdcscan.outputs.prom import prom_text
from sdcscan.render.run import render_summary
from sdcscan.report import SCHEMA_PATH, load_report
from tests.helpers.fleet import report as fleet_report
from tests.helpers.reports import make_report

RECORDED = Path(__file__).parent / "data" / "report_v1.json"  # an older run's: readers must keep taking it
# A run of this tree (same command, 2026-11-29, 2-vCPU AVX-512 Xeon): the keys a run writes today.
RECENT = Path(__file__).parent / "data" / "report_recent.json"


@pytest.fixture
def recorded() -> dict[str, Any]:
    """The recorded report, parsed as plain JSON (no sdcscan code in between)."""
    return json.loads(RECORDED.read_text())


def test_recorded_report_is_what_the_recording_command_says(recorded: dict[str, Any]):
    """Two CPUs, seed 7, the quick profile, a pass: the file is the run its docstring describes."""
    assert recorded["host"]["hostname"] == "recorded-host" and recorded["run"]["seed"] == 7
    assert recorded["run"]["profile"]["name"] == "quick"
    assert [u["id"] for u in recorded["units"]] == ["cpu:0", "cpu:1"]
    assert recorded["verdict"] == "pass" and recorded["exit_code"] == 0
    assert all(u["cases_run"] >= 1 for u in recorded["units"])


def test_recorded_report_matches_the_shipped_schema(recorded: dict[str, Any]):
    """report.schema.json accepts what `sdcscan run` really writes."""
    jsonschema.validate(recorded, json.loads(SCHEMA_PATH.read_text()))


def test_recorded_report_loads(recorded: dict[str, Any]):
    """`load_report` (the bounded reader every command uses) returns the same document."""
    assert load_report(RECORDED) == recorded


def test_recorded_report_renders_its_summary(recorded: dict[str, Any]):
    """The summary table names every unit and ends with the `exit:` line."""
    out = StringIO()
    render_summary(recorded, Console(file=out, width=100, no_color=True))
    text = out.getvalue()
    assert all(u["id"] in text for u in recorded["units"])
    assert text.rstrip().splitlines()[-1] == "exit: pass"


def test_recorded_report_exports_to_junit(recorded: dict[str, Any]):
    """One JUnit suite per unit, one testcase per workload it ran, none failed."""
    xml = JUnitXml.fromstring(junit_xml(recorded))
    suites = {s.name: s for s in xml}
    assert set(suites) == {"recorded-host/cpu:0", "recorded-host/cpu:1"}  # HOST/UNIT: hosts never merge
    for unit in recorded["units"]:
        cases = list(suites[f"recorded-host/{unit['id']}"])
        assert {c.name for c in cases} == set(unit["workloads"])
        assert all(c.is_passed for c in cases)


def test_recorded_report_exports_to_prometheus(recorded: dict[str, Any]):
    """The textfile parses, with a one-hot `pass` verdict for each unit."""
    families = {f.name: f for f in text_string_to_metric_families(prom_text(recorded))}
    verdicts = {
        (s.labels["unit"], s.labels["verdict"]): s.value for s in families["sdcscan_unit_verdict"].samples
    }
    assert verdicts[("cpu:0", "pass")] == 1 and verdicts[("cpu:1", "pass")] == 1


def test_recorded_report_is_accepted_by_the_fleet_reader():
    """`compare`'s reader takes the file as one usable host report with every unit and case."""
    reports, skipped = read_reports([str(RECORDED)])
    assert skipped == []
    (host,) = reports
    assert host.host == "recorded-host" and host.verdict == "pass"
    assert [u.unit for u in host.units] == ["cpu:0", "cpu:1"]
    assert all(len(u.digests) >= 1 and None not in u.digests for u in host.units)


@pytest.mark.parametrize(
    "built",
    [make_report(), make_report(fail_unit=None, invalid_unit="cpu:0"), fleet_report("h0")],
    ids=["outputs-fail", "outputs-invalid", "fleet-host"],
)
def test_hand_built_reports_have_the_recorded_shape(built: dict[str, Any]):
    """The test factory's reports validate against the schema and use only keys a real run writes."""
    recorded = json.loads(RECENT.read_text())
    jsonschema.validate(built, json.loads(SCHEMA_PATH.read_text()))
    assert set(built) <= set(recorded)
    assert set(built["run"]) <= set(recorded["run"])
    real_unit = recorded["units"][0]
    for unit in built["units"]:
        assert set(unit) <= set(real_unit) and set(unit["cases"]) == set(real_unit["cases"])


def test_sdcscan_report_prints_which_run_it_shows_first(tmp_path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """Issue 45: `sdcscan report` printed no header. Now its first lines name the host, profile, seed,
    start and length, and the software, unwrapped (logs grep them), before the summary."""
    import json

    from tests.helpers.reports import make_report

    report = make_report(fail_unit=None, hostname="gpu-node-17")
    (tmp_path / "r.json").write_text(json.dumps(report))
    done = run_cli("report", str(tmp_path / "r.json"))
    assert done.returncode == 0, done.stderr
    first, second = done.stderr.splitlines()[:2]
    run = report["run"]
    assert first.startswith("sdcscan report: host gpu-node-17, profile ") and f"seed {run['seed']}" in first
    assert f"started {run['started_at']}" in first
    assert second.startswith("software: sdcscan ") and "torch " in second
