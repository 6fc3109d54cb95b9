"""`sdcscan run --cases N`: every unit runs cases 0 to N-1 and stops, however fast the host, so two runs
compare case for case (the doctor's determinism runs rely on it)."""

from __future__ import annotations

import json
import time

import pytest

from sdcscan.profile import load_profile
from sdcscan.run.plan import Plan, cases_per_round


@pytest.mark.slow
def test_each_unit_stops_after_its_cases_long_before_the_budget(run_cli, tmp_path):
    started = time.monotonic()
    r = run_cli(
        "run", "--units", "cpu:0,cpu:1", "--seed", "7", "--budget", "90s", "--cases", "7", "-o", "r.json"
    )
    took = time.monotonic() - started
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["run"]["cases_per_unit"] == 7
    assert {u["id"]: u["cases"]["index"] for u in report["units"]} == {
        "cpu:0": list(range(7)),
        "cpu:1": list(range(7)),
    }
    assert took < 60, took  # ended at its count (seconds here), not at the 90 s budget
    shown = run_cli("report", "r.json")
    assert "at most 7 cases a unit" in shown.stderr


@pytest.mark.parametrize("profile", ["quick", "doctor", "burnin"])
def test_a_round_holds_each_workload_of_the_plan_as_often_as_its_weight(profile):
    loaded = load_profile(profile)
    plan = Plan(loaded, seed=1)
    one_round = [plan.workload_of(i) for i in range(cases_per_round(loaded))]
    assert sorted(one_round) == sorted(w.name for w in loaded.workloads for _ in range(w.weight))
    assert plan.workload_of(cases_per_round(loaded)) == one_round[0]
