"""The watchdog policy, with a fake clock (plain floats): each rule fires when it should and not before."""

from __future__ import annotations

import pytest

from sdcscan.run.watchdog import (
    CASE_TIME_WINDOW,
    OVERRUN_S,
    READY_TIMEOUT_S,
    WATCHDOG_FACTOR,
    WATCHDOG_FIRST_S,
    WATCHDOG_FLOOR_S,
    CaseInFlight,
    Watchdog,
)

T0 = 1_000_000.0  # the workers were spawned then
DEADLINE = T0 + 3600.0  # far away unless a test is about the budget's end


def started(deadline: float = DEADLINE, window: int = 512) -> Watchdog:
    dog = Watchdog(window=window)
    dog.main_pass_started(spawned_at=T0, deadline=deadline)
    return dog


def running(dog: Watchdog, now: float, case: CaseInFlight) -> str | None:
    """The watchdog's decision about a ready worker running `case`."""
    return dog.check(now, ready=True, busy=True, current=case)


def test_the_constants_keep_their_values():
    """The --help text states the shutdown bound from these: a change here must be a deliberate one."""
    assert (READY_TIMEOUT_S, WATCHDOG_FLOOR_S, WATCHDOG_FACTOR, WATCHDOG_FIRST_S, OVERRUN_S) == (
        180.0,
        5.0,
        10.0,
        60.0,
        10.0,
    )
    assert CASE_TIME_WINDOW == 512


def test_a_case_is_hung_after_ten_times_the_median_case_time():
    """Median 2 s: silent at 20 s, hung just after, with the case and the time in the reason."""
    dog = started()
    for seconds in (1.0, 2.0, 3.0, 2.0, 100.0):  # an outlier moves the median, not the limit
        dog.case_finished("train", seconds)
    case = CaseInFlight(7, "train", since=T0 + 50.0)
    assert running(dog, T0 + 50.0 + 10 * 2.0, case) is None
    reason = running(dog, T0 + 50.0 + 10 * 2.0 + 0.4, case)
    assert reason == "case 7 (train) hung: no result after 20 s; worker killed"


def test_fast_cases_are_never_called_hung_before_the_floor():
    """Median 0.01 s would give 0.1 s: the 5 s floor holds instead."""
    dog = started()
    dog.case_finished("matmul_golden", 0.01)
    case = CaseInFlight(0, "matmul_golden", since=T0)
    assert dog.case_limit("matmul_golden") == WATCHDOG_FLOOR_S
    assert running(dog, T0 + 4.9, case) is None
    assert running(dog, T0 + 5.1, case) is not None


def test_a_gpu_case_is_not_held_to_the_cpu_units_times_of_its_workload():
    """On an H200 the CPU units' 0.1 s embbag_int8 cases gave a 5 s limit, and the GPU unit's first
    case, of GPU-sized parameters, was killed as hung after 5 s. Each kind learns its own times; a CPU
    case is still held to them."""
    dog = started()
    for _ in range(5):
        dog.case_finished("embbag_int8", 0.1, "cpu")
    gpu = CaseInFlight(3, "embbag_int8", since=T0, kind="cuda")
    cpu = CaseInFlight(4, "embbag_int8", since=T0, kind="cpu")
    assert dog.case_limit("embbag_int8", "cuda") == WATCHDOG_FIRST_S
    assert running(dog, T0 + 30.0, gpu) is None
    assert running(dog, T0 + 5.1, cpu) == "case 4 (embbag_int8) hung: no result after 5 s; worker killed"
    dog.case_finished("embbag_int8", 8.0, "cuda")
    assert dog.case_limit("embbag_int8", "cuda") == 80.0 and dog.case_limit("embbag_int8", "cpu") == 5.0


def test_the_first_case_of_a_workload_gets_sixty_seconds():
    """No time known yet for the workload (another workload's times do not count): 60 s."""
    dog = started()
    dog.case_finished("matmul_golden", 0.01)
    case = CaseInFlight(1, "train", since=T0)
    assert dog.case_limit("train") == WATCHDOG_FIRST_S
    assert running(dog, T0 + 59.0, case) is None
    assert running(dog, T0 + 61.0, case) == "case 1 (train) hung: no result after 61 s; worker killed"


def test_a_worker_that_never_says_ready_is_stopped_after_the_ready_timeout():
    """Silent while torch imports (up to 180 s), then `did not start`."""
    dog = started()
    assert dog.check(T0 + READY_TIMEOUT_S, ready=False, busy=True, current=None) is None
    reason = dog.check(T0 + READY_TIMEOUT_S + 1.0, ready=False, busy=True, current=None)
    assert reason == "worker did not start within 181 s"


def test_a_worker_not_ready_when_the_main_pass_overruns_is_stopped_early():
    """Budget 30 s: not ready at 40 s is waiting, at 41 s it is stopped, saying the budget ended."""
    dog = started(deadline=T0 + 30.0)
    assert dog.check(T0 + 30.0 + OVERRUN_S, ready=False, busy=True, current=None) is None
    reason = dog.check(T0 + 41.0, ready=False, busy=True, current=None)
    assert reason == "worker did not start within 41 s and the budget ended"


def test_a_case_still_running_after_the_overrun_is_hung_even_within_its_limit():
    """After deadline + 10 s the main pass is over: a case within its own 60 s limit is stopped too."""
    dog = started(deadline=T0 + 30.0)
    case = CaseInFlight(3, "train", since=T0 + 29.0)
    assert running(dog, T0 + 40.0, case) is None
    assert running(dog, T0 + 40.6, case) == "case 3 (train) hung: no result after 12 s; worker killed"


def test_a_busy_worker_between_cases_is_stopped_after_the_overrun():
    """Busy with no case (e.g. still sending results) is fine until deadline + 10 s, then stopped."""
    dog = started(deadline=T0 + 30.0)
    assert dog.check(T0 + 40.0, ready=True, busy=True, current=None) is None
    reason = dog.check(T0 + 40.5, ready=True, busy=True, current=None)
    assert reason == "worker did not finish its plan 10 s after the budget ended; killed"


def test_an_idle_worker_is_never_stopped():
    """Ready, not busy, no case: nothing to time out, however late it is."""
    dog = started(deadline=T0 + 30.0)
    assert dog.check(T0 + 10_000.0, ready=True, busy=False, current=None) is None


def test_after_the_main_pass_only_the_case_limit_counts():
    """In the re-run phase the budget's end no longer stops anyone: only a case's own limit does."""
    dog = started(deadline=T0 + 30.0)
    dog.main_pass_ended()
    assert not dog.overrun(T0 + 1000.0)
    assert dog.check(T0 + 1000.0, ready=True, busy=True, current=None) is None
    case = CaseInFlight(3, "train", since=T0 + 1000.0)
    assert running(dog, T0 + 1000.0 + WATCHDOG_FIRST_S, case) is None
    assert running(dog, T0 + 1000.0 + WATCHDOG_FIRST_S + 1.0, case) is not None


@pytest.mark.parametrize(("window", "limit"), [(3, WATCHDOG_FLOOR_S), (5, 100.0)])
def test_the_median_looks_at_a_bounded_window_of_recent_case_times(window, limit):
    """Three 10 s cases then two 0.1 s ones: a window of 3 has forgotten most slow ones, one of 5 has not."""
    dog = started(window=window)
    for seconds in (10.0, 10.0, 10.0, 0.1, 0.1):
        dog.case_finished("train", seconds)
    assert dog.case_limit("train") == pytest.approx(limit)


def test_the_case_limit_follows_every_finished_case():
    """The limit is cached between messages but moves as soon as another case of the workload finishes."""
    dog = started()
    dog.case_finished("train", 2.0)
    assert dog.case_limit("train") == 10 * 2.0
    for _ in range(2):
        dog.case_finished("train", 4.0)
    assert dog.case_limit("train") == 10 * 4.0
    assert dog.case_limit("gemm_fp") == WATCHDOG_FIRST_S  # other workloads keep their own times


def test_a_worker_waiting_on_its_peers_gets_the_grace_past_its_case_limit_and_the_budget():
    """A distributed case (or the agreement between cases) may wait a collective timeout for a peer
    that stopped answering: `grace_s` delays both the hang verdict and the budget's end, by no more."""
    dog = started(deadline=T0 + 100.0)
    dog.case_finished("collective", 0.1)
    case = CaseInFlight(7, "collective", since=T0 + 50.0)
    late = T0 + 50.0 + WATCHDOG_FLOOR_S + 1.0
    assert running(dog, late, case) is not None
    assert dog.check(late, ready=True, busy=True, current=case, grace_s=15.0) is None
    assert dog.check(late + 15.0, ready=True, busy=True, current=case, grace_s=15.0) is not None
    between = T0 + 100.0 + OVERRUN_S + 1.0  # busy between cases, at the agreement
    assert dog.check(between, ready=True, busy=True, current=None) is not None
    assert dog.check(between, ready=True, busy=True, current=None, grace_s=15.0) is None
    assert dog.check(between + 15.0, ready=True, busy=True, current=None, grace_s=15.0) is not None
