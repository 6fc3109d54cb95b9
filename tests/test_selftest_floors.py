"""A self-test row misses a floor below 1.0 only beyond chance, and a floor of 1.0 on any miss; a fault
that changes no value is drawn again, and one that never does is not exercised, not failed."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import cast

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sdcscan.outcomes import STATUS_MISMATCH, Case, Outcome
from sdcscan.selftest import floors
from sdcscan.selftest.floors import below_floor, binomial_cdf
from sdcscan.selftest.sweep import REDRAWS, _fault_trial, _Tally
from sdcscan.workloads.base import Context, Workload


def _exact_cdf(k: int, n: int, p: Fraction) -> Fraction:
    """P(X <= k) in exact rationals: an independent reference for the log-space sum."""
    return sum((math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1)), Fraction(0))


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 60), data=st.data(), p=st.fractions(Fraction(1, 100), Fraction(99, 100)))
def test_the_binomial_cdf_matches_exact_rational_arithmetic(n: int, data: st.DataObject, p: Fraction) -> None:
    k = data.draw(st.integers(0, n))
    assert binomial_cdf(k, n, float(p)) == pytest.approx(float(_exact_cdf(k, n, p)), rel=1e-9, abs=1e-300)


def test_a_floor_of_one_is_missed_by_any_miss() -> None:
    assert not below_floor(3, 3, 1.0) and not below_floor(200, 200, 1.0)
    assert below_floor(2, 3, 1.0) and below_floor(199, 200, 1.0)


def test_one_chance_miss_in_a_few_trials_is_not_a_missed_floor() -> None:
    """2 of 3 at a 0.96 floor happens to a detector at the floor 11.5% of the time: no failure."""
    assert binomial_cdf(2, 3, 0.96) == pytest.approx(1 - 0.96**3)
    assert not below_floor(2, 3, 0.96) and not below_floor(96, 100, 0.96) and not below_floor(92, 100, 0.96)


def test_a_detector_clearly_below_its_floor_fails() -> None:
    """1 of 3 at 0.96 (p = 0.0047), 90 of 100, 1 of 3 at 0.99, 0 of 8 at 0.6: each below its floor."""
    assert below_floor(1, 3, 0.96) and below_floor(90, 100, 0.96) and not below_floor(91, 100, 0.96)
    assert below_floor(1, 3, 0.99) and not below_floor(2, 3, 0.99) and below_floor(0, 8, 0.6)
    # the boundary is the test's level, not the point estimate
    n, floor = 100, 0.96
    first_pass = min(k for k in range(n + 1) if binomial_cdf(k, n, floor) >= floors.ALPHA)
    assert below_floor(first_pass - 1, n, floor) and not below_floor(first_pass, n, floor)


def test_a_row_judged_by_the_sweep_uses_the_same_rule() -> None:
    def row(detected: int, trials: int, floor: float | None) -> bool:
        tally = _Tally("output", 30, floor, False, trials=trials, detected=detected)
        return tally.record("gemm_fp", "float32")["passed"]

    assert row(2, 3, 0.96) and not row(1, 3, 0.96) and not row(2, 3, 1.0) and row(0, 3, None)
    assert not row(0, 0, 0.96)  # no trial shows nothing


def test_a_fault_whose_every_draw_changed_no_value_is_not_exercised_and_not_failed() -> None:
    """A stuck-at-0 bit already 0 wherever it struck, on every draw: nothing to judge against its floor."""
    record = _Tally("output", "stuck0", 1.0, False, unchanged=9).record("matmul_golden", "float64")
    assert record["passed"] and not record["exercised"] and record["rate"] is None
    judged = _Tally("output", "stuck0", 1.0, False, trials=3, detected=3, unchanged=9).record("w", "v")
    assert judged["passed"] and judged["exercised"]
    unreached = _Tally("output", "stuck0", 1.0, False, unchanged=9, not_reached=1).record("w", "v")
    assert not unreached["passed"]  # a site never passed through is a workload bug, exercised or not


class _StubWorkload:
    """Its fault changes a value only from the `changes_from`-th draw of a trial on; it records each draw."""

    def __init__(self, changes_from: int) -> None:
        self.changes_from = changes_from
        self.seeds: list[int] = []

    def run(self, ctx: Context, case: Case) -> Outcome:
        assert ctx._armed is not None
        self.seeds.append(ctx._armed.seed)
        ctx.injected = {"value_changed": len(self.seeds) >= self.changes_from}
        return Outcome(status=STATUS_MISMATCH, digest="0")


@pytest.mark.parametrize(
    ("floor", "changes_from", "trials", "unchanged"),
    [
        (1.0, 3, 1, 2),  # drawn again twice: the third draw is the trial
        (1.0, 99, 0, 1 + REDRAWS),  # never changes: every draw counted as unchanged, then given up
        (None, 3, 0, 1),  # no floor to judge: one draw, as it is (relative errors below a dtype's resolution)
    ],
)
def test_a_fault_with_a_floor_is_drawn_again_while_it_changes_no_value(
    floor: float | None, changes_from: int, trials: int, unchanged: int
) -> None:
    stub = _StubWorkload(changes_from)
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=0, params={})
    tally = _Tally("output", "stuck0", floor, False)
    _fault_trial(cast(Workload, stub), ctx, Case(0, "stub", 12345, 0, {}), tally)
    assert (tally.trials, tally.detected, tally.unchanged) == (trials, trials, unchanged)
    assert len(set(stub.seeds)) == len(stub.seeds) == trials + unchanged  # each draw from a new seed
