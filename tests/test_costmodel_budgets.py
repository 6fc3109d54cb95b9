"""Every built-in profile's GPU cases held to the budgets of sdcscan/costmodel/budgets.py, by the device-free
cost model (issue 42): one host wait per case, no host tensor work, kernels linear in the repeats, checks
that move about what they check and take at most 5% of the compute, a unit ready within seconds.

A (workload, budget) listed in `budgets.OVER_BUDGET` is expected to fail that check budget (strict xfail:
the day it meets it, the test says so and the entry goes). No GPU is needed; scripts/gpu_model.py prints the
same figures, and a lent GPU confirms them (scripts/gpu_check.sh).
"""

from __future__ import annotations

import functools
import json

import pytest

from sdcscan.checks import triton_kernels
from sdcscan.costmodel import budgets
from sdcscan.costmodel.cases import SHAPES, WorkloadCost, gpu_params, model_workload
from sdcscan.costmodel.device_rates import GPUS, H200
from sdcscan.profile import builtin_profile_names

# The module caches what it models (`_modelled`, `_kernels_per_repeat`) in its process: one pytest worker runs
# it all, so that each workload is prepared on the meta device once per size, not once per worker
pytestmark = pytest.mark.xdist_group("cost_model")

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
    reason = budgets.OVER_BUDGET.get((name, budget))
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


@functools.cache
def _kernels_per_repeat(name: str) -> dict[int, float]:
    return budgets.kernels_per_repeat(name, gpu_params("doctor")[name], modelled=_modelled("doctor", name))


@pytest.mark.parametrize(("name", "occurrence"), _kinds())
def test_a_case_launches_a_fixed_number_of_kernels_per_repeat(name: str, occurrence: int) -> None:
    """Kernels grow linearly with the repeats, by at most the workload's budget a repeat; a product's
    compute phase is that one product (or lookup) a repeat."""
    per_repeat = _kernels_per_repeat(name)[occurrence]
    assert 0 < per_repeat <= budgets.KERNELS_PER_REPEAT[name], per_repeat
    if name in GEMMS:
        case = _modelled("doctor", name).cases[occurrence]
        assert len(case.phase("compute").kernels) == case.repeats


def test_what_is_over_its_check_budgets_is_known_and_each_says_why() -> None:
    """The fused kernels took embbag_int8 inside its budgets and gemm_int8 inside its bytes (measured on an
    H200 and modelled); what is left is stated (budgets.OVER_BUDGET)."""
    assert set(budgets.OVER_BUDGET) == {
        ("matmul_golden", "check bytes"),
        ("gemm_int8", "check share"),
        ("gemm_fp", "check bytes"),
        ("gemm_fp", "check share"),
    }
    assert all(len(why) > 80 for why in budgets.OVER_BUDGET.values())


FUSED_OPS = {
    "gemm_int8": "int8_block_partials",
    "embbag_int8": "embbag_exact_partials",
    "gemm_fp": "fp_tile_partials",
    "matmul_golden": "golden_bad_partials",
    "train": "keyed_partials",
}


def _check_ops(name: str, kernels: str) -> set[str]:
    cost = model_workload(name, gpu_params("doctor")[name], occurrences=[0], kernels=kernels)
    return {k.op for k in cost.cases[0].phase("check").kernels}


@pytest.mark.parametrize("name", list(FUSED_OPS))
def test_a_gpu_case_is_modelled_with_the_check_kernels_it_runs(name: str) -> None:
    """check_kernel "auto" takes a fused kernel on a GPU once a lent GPU has matched it (gemm_int8's and
    embbag_int8's), so the model (the meta device) counts those by default; gemm_fp's block check and the
    fingerprint's kernel (train's digest) only where asked for."""
    matched = name in triton_kernels.MATCHED_ON_A_GPU
    assert (FUSED_OPS[name] in _check_ops(name, "auto")) is matched
    assert FUSED_OPS[name] in _check_ops(name, "fused")


def _int8_product_kinds(profile: str) -> set[str]:
    cost = model_workload("gemm_int8", gpu_params(profile)["gemm_int8"])
    return {
        k.flop_dtype for c in cost.cases for t in c.phases.values() for k in t.kernels if k.op == "_int_mm"
    }


def test_no_gpu_int8_product_has_a_dimension_that_gets_the_slow_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An H200 ran `_int_mm` three times slower with a dimension 8 more than a multiple of 16, and gemm_int8's
    inner dimension was one (8,200) until the tagged width was padded to 32 on GPUs: padded to 8 again, the
    model sees it."""
    assert _int8_product_kinds("doctor") == {"int8"}
    monkeypatch.setattr("sdcscan.checks.int8.GPU_ROW_MULTIPLE", 8)
    assert "int8/unaligned" in _int8_product_kinds("doctor")


def test_gemm_fp_converts_an_output_its_checker_widens_once_for_both_sides() -> None:
    """The fp32 slot (fp64 checker): torch's sum would copy the output into fp64 for the row side and
    again for the column side; one conversion serves both. bf16 summed into fp32 is widened as it is
    read on a GPU: no copy at all."""
    (m, _, n), repeats = (
        gpu_params("doctor")["gemm_fp"]["shapes"][0],
        gpu_params("doctor")["gemm_fp"]["repeats"],
    )
    for case, width in zip(_modelled("doctor", "gemm_fp").cases, (4, 8, 2, 2), strict=True):
        copied = sum(k.read for k in case.phase("check").kernels if k.op == "_to_copy")
        output = m * n * width * repeats[case.occurrence]
        assert copied <= 1.01 * output if width == 4 else copied < 0.01 * output, case.occurrence
