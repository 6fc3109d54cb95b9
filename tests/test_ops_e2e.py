"""Issue 5 acceptance, end to end: a real run's JUnit and Prometheus files parse, sticky failures, clear, history."""

from __future__ import annotations

import json

import pytest
from junitparser import JUnitXml
from prometheus_client.parser import text_string_to_metric_families

from sdcscan.profile import load_profile
from tests.helpers.cli import CPUS, TWO, needs_two_cpus

pytestmark = pytest.mark.slow


@needs_two_cpus
def test_failed_unit_stays_flagged_until_cleared_and_history_lists_both_runs(run_cli, tmp_path):
    bad = f"cpu:{CPUS[-1]}"
    db, junit, prom = tmp_path / "h.sqlite3", tmp_path / "j.xml", tmp_path / "m.prom"
    first = run_cli(
        "run",
        "--budget",
        "8s",
        "--units",
        TWO,
        "--inject",
        f"{bad}:bitflip",
        "--history",
        str(db),
        "--junit",
        str(junit),
        "--prom",
        str(prom),
    )
    assert first.returncode == 1, first.stderr

    suites = {s.name.split("/", 1)[1]: s for s in JUnitXml.fromfile(str(junit))}  # HOST/UNIT
    assert set(suites) == {f"cpu:{CPUS[0]}", bad}
    assert {c.name for c in suites[bad]} == {w.name for w in load_profile("quick").workloads}
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    verdicts = {
        (s.labels["unit"], s.labels["verdict"]): s.value for s in families["sdcscan_unit_verdict"].samples
    }
    assert verdicts[(bad, "fail")] == 1 and verdicts[(f"cpu:{CPUS[0]}", "pass")] == 1

    status = run_cli("status", "--history", str(db))
    assert status.returncode == 1 and bad in status.stderr

    second = run_cli("run", "--budget", "8s", "--units", TWO, "--history", str(db))
    assert second.returncode == 0, second.stderr
    assert run_cli("status", "--history", str(db)).returncode == 1  # a pass does not clear a failure

    cleared = run_cli("clear", bad, "--reason", "replaced", "--history", str(db))
    assert cleared.returncode == 0, cleared.stderr
    assert run_cli("status", "--history", str(db)).returncode == 0

    history = json.loads(run_cli("history", "--json", "--history", str(db)).stdout)
    runs = history["runs"] if isinstance(history, dict) else history
    assert len(runs) == 2
