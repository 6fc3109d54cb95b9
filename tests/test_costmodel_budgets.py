"""Every built-in profile's GPU cases held to the budgets of sdcscan/costmodel/budgets.py, by the device-free
cost model (issue 42): one host wait per case, no host tensor work, kernels linear in the repeats, checks
that move about what they check and take at most 5% of the compute, a unit ready within seconds.

A workload listed in `budgets.OVER_BUDGET` is expected to fail the two check budgets (strict xfail: the
day it meets them, the test says so and the entry goes). No GPU is needed; scripts/gpu_model.py prints the
same figures, and a lent GPU confirms them (scripts/gpu_check.sh).
"""

from __future__ import annotations

import functools
import json

import pytest

from sdcscan.costmodel import budgets
from sdcscan.costmodel.cases import SHAPES, WorkloadCost, gpu_params, model_workload
from sdcscan.costmodel.rates import GPUS, H200
from sdcscan.profile import builtin_profile_names

GEMMS = ("gemm_int8", "matmul_golden", "gemm_fp", "embbag_int8")  # one product (or lookup) per repeat


def _entries() -> list[tuple[str, str]]:
    """(profile, workload) for every per-unit workload with GPU parameters, each parameter set once."""
    seen, found = set(), []
    for profile in builtin_profile_names():
        for name, params in gpu_params(profile).items():
            key = (name, json.dumps(params, sort_keys=True))
            if key not in seen:
                seen.add(key)
                found.append((profile, name))
    return found


ENTRIES = _entries()
IDS = [f"{profile}-{name}" for profile, name in ENTRIES]


@functools.cache
def _modelled(profile: str, name: str) -> WorkloadCost:
    return model_workload(name, gpu_params(profile)[name])


def _over(name: str, budget: str) -> pytest.MarkDecorator:
    """Strict xfail for a workload whose check is over `budget` today, with the reason it is."""
    reason = budgets.OVER_BUDGET.get(name)
    return pytest.mark.xfail(reason is not None, reason=f"{budget}: {reason}", strict=True)


def test_every_per_unit_workload_of_every_gpu_profile_is_modelled() -> None:
    """Nothing escapes the budgets by having no model: every workload a GPU profile runs has its shape."""
    names = {name for _, name in ENTRIES}
    assert names and names <= set(SHAPES)
    assert {"doctor", "burnin", "quick"} <= {profile for profile, _ in ENTRIES}


@pytest.mark.parametrize(("profile", "name"), ENTRIES, ids=IDS)
def test_a_gpu_case_waits_for_the_device_once_and_leaves_the_host_idle(profile: str, name: str) -> None:
    """After prepare, every kind of case reads the device once (its result) and does no host tensor work
    beyond a few scalars."""
    for case in _modelled(profile, name).cases:
        assert case.host_waits <= budgets.WAITS_PER_CASE, (case.occurrence, case.phases)
        assert case.total(lambda t: t.host_bytes) <= budgets.HOST_BYTES_PER_CASE, case.occurrence


@pytest.mark.parametrize(
    ("profile", "name"),
    [pytest.param(p, n, marks=_over(n, "check bytes")) for p, n in ENTRIES],
    ids=IDS,
)
def test_a_check_moves_about_twice_what_it_checks(profile: str, name: str) -> None:
    """Check bytes (read and written) at most about twice the bytes of the outputs they check."""
    cost = _modelled(profile, name)
    ratios = [budgets.case_figures(cost, case, H200).check_bytes_ratio for case in cost.cases]
    assert max(ratios) <= budgets.CHECK_BYTES_PER_OUTPUT, ratios


@pytest.mark.parametrize(
    ("profile", "name"),
    [pytest.param(p, n, marks=_over(n, "check share")) for p, n in ENTRIES],
    ids=IDS,
)
@pytest.mark.parametrize("device", sorted(GPUS))
def test_a_check_takes_at_most_five_percent_of_the_compute(profile: str, name: str, device: str) -> None:
    """Predicted check time at most 5% of the predicted compute on an H100 and an H200 (10% where
    budgets.STATED_SHARE says why)."""
    cost = _modelled(profile, name)
    limit = budgets.STATED_SHARE.get(name, (budgets.CHECK_SHARE, ""))[0]
    shares = [budgets.case_figures(cost, case, GPUS[device]).check_share for case in cost.cases]
    assert max(shares) <= limit, shares


@pytest.mark.parametrize("profile", sorted({profile for profile, _ in ENTRIES}))
def test_a_gpu_unit_is_ready_within_seconds(profile: str) -> None:
    """Every workload of the profile prepared, by the model on an H100 (the slower memory): within
    STARTUP_S, torch's import and the plain-op peaks aside."""
    total = 0.0
    for name, params in gpu_params(profile).items():
        cost = next((_modelled(p, n) for p, n in ENTRIES if n == name and gpu_params(p)[n] == params), None)
        assert cost is not None
        total += budgets.startup_figures(cost, GPUS["h100"]).total_s
    assert total <= budgets.STARTUP_S


def _kinds() -> list[pytest.param]:
    """(workload, occurrence) of every kind of the doctor profile's GPU cases; those of thousands of
    repeats (modelled at twice as many) run with the slow tests."""
    found = []
    for name, params in gpu_params("doctor").items():
        shape = SHAPES[name]
        for occurrence in range(shape.kinds(params)):
            slow = shape.repeats(params, occurrence) >= 1000
            found.append(pytest.param(name, occurrence, marks=[pytest.mark.slow] if slow else []))
    return found


@pytest.mark.parametrize(("name", "occurrence"), _kinds())
def test_a_case_launches_a_fixed_number_of_kernels_per_repeat(name: str, occurrence: int) -> None:
    """Kernels grow linearly with the repeats, by at most the workload's budget a repeat; a product's
    compute phase is that one product (or lookup) a repeat."""
    per_repeat = budgets.kernels_per_repeat(name, gpu_params("doctor")[name], occurrence)
    assert 0 < per_repeat <= budgets.KERNELS_PER_REPEAT[name], per_repeat
    if name in GEMMS:
        case = _modelled("doctor", name).cases[occurrence]
        assert len(case.phase("compute").kernels) == case.repeats


PENDING = [(p, n) for p, n in ENTRIES if n in budgets.PENDING_KERNELS]


@functools.cache
def _modelled_pending(profile: str, name: str) -> WorkloadCost:
    return model_workload(name, {**gpu_params(profile)[name], **budgets.PENDING_KERNELS[name].params})


def test_a_workload_over_its_check_budgets_has_a_kernel_pending_or_says_why_not() -> None:
    """gemm_int8's and embbag_int8's fused check kernels are modelled; gemm_fp's reason is stated
    (budgets.OVER_BUDGET)."""
    assert {"gemm_int8", "embbag_int8"} <= set(budgets.PENDING_KERNELS)
    assert set(budgets.OVER_BUDGET) - set(budgets.PENDING_KERNELS) == {"gemm_fp"}
    assert set(budgets.PENDING_KERNELS) <= {name for _, name in ENTRIES}


@pytest.mark.parametrize(("profile", "name"), PENDING, ids=[f"{p}-{n}" for p, n in PENDING])
@pytest.mark.parametrize("device", sorted(GPUS))
def test_a_check_kernel_awaiting_a_gpu_meets_the_check_budgets_by_the_model(
    profile: str, name: str, device: str
) -> None:
    """With the pending kernel switched on: one wait a case, about one read of the outputs, and the check
    share it is held to (budgets.PENDING_KERNELS says why where that is above 5%)."""
    cost = _modelled_pending(profile, name)
    pending = budgets.PENDING_KERNELS[name]
    for case in cost.cases:
        figures = budgets.case_figures(cost, case, GPUS[device])
        assert figures.host_waits <= budgets.WAITS_PER_CASE
        assert figures.check_bytes_ratio <= budgets.CHECK_BYTES_PER_OUTPUT, figures
        assert figures.check_share <= pending.share, figures
    assert any(k.op == pending.op for k in cost.cases[0].phase("check").kernels)
