"""The re-run schedule, with a fake clock: who gets which job when free, attempt numbers, the window's end."""

from __future__ import annotations

import pytest

from sdcscan.judgement.verdict import retest_plan
from sdcscan.outcomes import CaseResult
from sdcscan.run.rerun_schedule import (
    MAX_RETEST_CASES,
    RETEST_MAX_S,
    RETEST_MIN_S,
    RETEST_SHARE,
    Rerun,
    RerunSchedule,
    retest_window,
)

UNITS = {"cpu:0", "cpu:1"}
# As verdict.retest_plan lists them: cpu:1 failed cases 4 and 9 (2 re-runs each), cpu:0 is the peer.
JOBS = [("cpu:1", 4), ("cpu:1", 4), ("cpu:0", 4), ("cpu:1", 9), ("cpu:1", 9), ("cpu:0", 9)]


def test_the_constants_keep_their_values():
    """The --help text states the re-run window: a change here must be a deliberate one."""
    assert (RETEST_MIN_S, RETEST_MAX_S, RETEST_SHARE, MAX_RETEST_CASES) == (5.0, 30.0, 0.05, 3)


@pytest.mark.parametrize(("budget_s", "window_s"), [(10.0, 5.0), (60.0, 5.0), (200.0, 10.0), (3600.0, 30.0)])
def test_the_window_is_five_percent_of_the_budget_within_5_to_30_s(budget_s, window_s):
    """Short budgets still get 5 s, long ones no more than 30 s."""
    assert retest_window(budget_s) == pytest.approx(window_s)


def test_each_free_unit_gets_its_next_job_in_plan_order():
    """Both free: one job each, cpu:1 first (it comes first in the plan); its second job waits."""
    schedule = RerunSchedule(JOBS, until=100.0)
    assert schedule.cases == (4, 9)
    assert schedule.assign(UNITS) == [Rerun("cpu:1", 4, 1), Rerun("cpu:0", 4, 1)]


def test_a_busy_unit_gets_nothing_and_keeps_its_jobs():
    """Only cpu:0 free: cpu:1's queue is untouched and its next job is still case 4."""
    schedule = RerunSchedule(JOBS, until=100.0)
    assert schedule.assign({"cpu:0"}) == [Rerun("cpu:0", 4, 1)]
    assert schedule.assign({"cpu:1"}) == [Rerun("cpu:1", 4, 1)]
    assert schedule.assign(set()) == []


def test_attempts_are_numbered_per_unit_and_case():
    """Repeats of a case on a unit count 1, 2, …; another case or another unit starts again at 1."""
    schedule = RerunSchedule(JOBS, until=100.0)
    handed = [job for _ in range(4) for job in schedule.assign(UNITS)]
    assert handed == [
        Rerun("cpu:1", 4, 1),
        Rerun("cpu:0", 4, 1),
        Rerun("cpu:1", 4, 2),
        Rerun("cpu:0", 9, 1),
        Rerun("cpu:1", 9, 1),
        Rerun("cpu:1", 9, 2),
    ]
    assert schedule.assign(UNITS) == []


def test_the_phase_waits_for_running_jobs_and_ends_when_all_are_done():
    """Waiting while a unit has jobs left or one running; over once every queue is empty and nobody is busy."""
    schedule = RerunSchedule([("cpu:1", 4)], until=100.0)
    assert schedule.waiting_on(UNITS, busy=set()) == ["cpu:1"]  # a job left
    schedule.assign(UNITS)
    assert schedule.waiting_on(UNITS, busy={"cpu:1"}) == ["cpu:1"]  # its job runs
    assert schedule.waiting_on(UNITS, busy=set()) == []  # done


def test_a_dead_unit_is_not_waited_for():
    """A unit that was stopped (not alive) with jobs left does not hold the phase open."""
    schedule = RerunSchedule(JOBS, until=100.0)
    assert schedule.waiting_on({"cpu:0"}, busy=set()) == ["cpu:0"]
    assert schedule.waiting_on(set(), busy=set()) == []


def test_the_schedule_closes_when_the_window_ends():
    """Open before `until`, closed from `until` on."""
    schedule = RerunSchedule(JOBS, until=100.0)
    assert schedule.is_open(99.9)
    assert not schedule.is_open(100.0)


def test_no_failing_case_means_no_re_run_phase():
    """An empty plan has no cases to announce and nothing to wait for."""
    schedule = RerunSchedule([], until=100.0)
    assert schedule.cases == ()
    assert schedule.assign(UNITS) == []
    assert schedule.waiting_on(UNITS, busy=UNITS) == []


def test_it_consumes_what_retest_plan_says_to_re_run():
    """verdict.retest_plan's jobs in, the same jobs out, one per unit at a time."""
    cohorts = {"cpu:0": "c", "cpu:1": "c"}
    results = [CaseResult("cpu:0", 0, "train", "ok", "a"), CaseResult("cpu:1", 0, "train", "mismatch", "b")]
    jobs = retest_plan(cohorts, results, reruns=2, max_cases=MAX_RETEST_CASES)
    schedule = RerunSchedule(jobs, until=100.0)
    handed = [job for _ in range(len(jobs)) for job in schedule.assign(UNITS)]
    assert sorted((j.unit, j.index) for j in handed) == sorted(jobs)
