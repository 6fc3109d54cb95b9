"""The plan: deterministic cases from (profile, seed), weighted interleaving, ISO-week seeds."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sdcscan.profile import load_profile
from sdcscan.run.plan import Plan, week_seed


def test_same_profile_and_seed_give_identical_cases():
    p = load_profile("quick")
    a, b = Plan(p, 1234), Plan(p, 1234)
    assert [a.case(i) for i in range(50)] == [b.case(i) for i in range(50)]


def test_different_seeds_give_different_case_seeds():
    p = load_profile("quick")
    assert Plan(p, 1).case(3).seed != Plan(p, 2).case(3).seed


def test_workloads_alternate_and_occurrences_count_per_workload(tmp_path: Path):
    f = tmp_path / "two.yaml"
    f.write_text("version: 1\nworkloads: [{name: train}, {name: matmul_golden}]\n")
    plan = Plan(load_profile(str(f)), 7)
    cases = [plan.case(i) for i in range(6)]
    assert [c.workload for c in cases] == ["train", "matmul_golden"] * 3
    assert [c.occurrence for c in cases] == [0, 0, 1, 1, 2, 2]


def test_weights_shape_the_mix(tmp_path: Path):
    f = tmp_path / "w.yaml"
    f.write_text("version: 1\nworkloads: [{name: train, weight: 3}, {name: matmul_golden}]\n")
    plan = Plan(load_profile(str(f)), 7)
    names = [plan.case(i).workload for i in range(8)]
    assert names == ["train", "matmul_golden", "train", "train"] * 2
    assert [plan.case(i).occurrence for i in (0, 2, 3, 4)] == [0, 1, 2, 3]


def test_week_seed_is_stable_within_an_iso_week_and_changes_across_weeks():
    p = load_profile("quick")
    monday = dt.datetime(2026, 11, 23, 0, 5, tzinfo=dt.timezone.utc)
    sunday = dt.datetime(2026, 11, 29, 23, 55, tzinfo=dt.timezone.utc)
    next_monday = dt.datetime(2026, 11, 30, 0, 5, tzinfo=dt.timezone.utc)
    assert week_seed(p, monday) == week_seed(p, sunday) != week_seed(p, next_monday)
    assert week_seed(p, monday) != week_seed(load_profile("burnin"), monday)


def test_gpu_units_get_cuda_params(tmp_path: Path):
    f = tmp_path / "g.yaml"
    f.write_text("version: 1\nworkloads: [{name: train, params: {steps: 5}, cuda_params: {steps: 50}}]\n")
    p = load_profile(str(f))
    assert Plan(p, 1, "cpu").case(0).params["steps"] == 5
    assert Plan(p, 1, "cuda").case(0).params["steps"] == 50
