"""Every built-in profile's CPU cases fit their case time on every CPU class with known rates (issue 43).

A case longer than its profile's case time makes a short run end before a unit finishes one, and one ten
times its workload's median is killed as hung. The device-free cost model (sdcscan.costmodel) counts each
case's products by dtype at the parameters a unit of the class gets (profile `class_params`), and the
rates of sdcscan/costmodel/device_rates.py turn them into seconds: measured on this workplace's Xeon (AMX, and
oneDNN held to AVX-512 and to AVX2) and taken from a real AVX2 EPYC's case times. The lower end (cases of
at least 0.05 s) holds only as measured, with per-op overheads the model leaves out:
`python scripts/bench_workloads.py --profile P` prints each kind's longest case on the CPU it runs on.
"""

from __future__ import annotations

import functools
import json

import pytest

from sdcscan.checks import int8
from sdcscan.costmodel.budgets import case_figures
from sdcscan.costmodel.cases import SHAPES, WorkloadCost, cpu_params, model_workload
from sdcscan.costmodel.device_rates import CPU_CLASS_RATES, DeviceRates
from sdcscan.profile import builtin_profile_names, load_profile

CASE_S = {"burnin": 5.0}  # the longest case a profile may plan, on any class; 2 s unless listed
DEFAULT_CASE_S = 2.0

ENTRIES = [
    (profile, cls, name)
    for profile in builtin_profile_names()
    for cls in CPU_CLASS_RATES
    for name in cpu_params(profile, cls)
]


def _modelled(profile: str, cls: str, name: str) -> WorkloadCost:
    return _model(name, json.dumps(cpu_params(profile, cls)[name], sort_keys=True))


@functools.cache
def _model(name: str, params: str) -> WorkloadCost:
    """One model per distinct plan: most classes and profiles give a workload the same CPU parameters
    (train's are alike in all of them), and modelling a workload's cases takes a second or two."""
    return model_workload(name, json.loads(params))


def _case_s(cost: WorkloadCost, occurrence: int, rates: DeviceRates) -> float:
    """Predicted seconds of one case on a CPU. The model runs the GPU path, which pads gemm_int8's
    short products to 32 rows; a CPU multiplies the rows there are, so the prediction is scaled back."""
    case = cost.cases[occurrence]
    seconds = case_figures(cost, case, rates).case_s
    if cost.name == "gemm_int8":
        m, k, n = cost.params["shapes"][occurrence % len(cost.params["shapes"])]
        seconds *= m / int8.plan_cuda(m, k, n + (-n % int8.ROW_MULTIPLE)).m_pad
    return seconds


@pytest.mark.parametrize(("profile", "cls", "name"), ENTRIES, ids=["-".join(e) for e in ENTRIES])
def test_every_case_of_a_profile_fits_its_case_time_on_each_cpu_class(
    profile: str, cls: str, name: str
) -> None:
    cost = _modelled(profile, cls, name)
    bound = CASE_S.get(profile, DEFAULT_CASE_S)
    over = [
        f"{SHAPES[name].label(cost.params, case.occurrence)} on {rates.name}: {_case_s(cost, i, rates):.1f} s"
        for i, case in enumerate(cost.cases)
        for rates in CPU_CLASS_RATES[cls]
        if _case_s(cost, i, rates) > bound
    ]
    assert not over, f"{profile} {name} cases over {bound} s on class {cls}: {over}"


def test_the_model_reproduces_the_case_times_it_was_given() -> None:
    """The AVX2 EPYC's rates came from burnin's cases before its class layer: the model, run at those
    parameters, gives them back (bf16 about 50 s, fp32 about 2.3 s, int8 1e11 ops at about 1 GOP/s)."""
    from sdcscan.costmodel.device_rates import EPYC_AVX2_CORE
    from sdcscan.workloads import SPECS

    burnin = {w.name: w for w in load_profile("burnin").workloads}
    # burnin's gemm_fp as the EPYC ran it, which its avx512-bf16 class keeps (AMX runs more bf16 repeats)
    before_amx = burnin["gemm_fp"].params_for("cpu", "avx512-bf16")
    assert before_amx["repeats"] == [32, 32, 64, 8]
    fp = model_workload("gemm_fp", {**SPECS["gemm_fp"].defaults, **before_amx})
    bf16, fp32 = (case_figures(fp, fp.cases[i], EPYC_AVX2_CORE).case_s for i in (2, 0))
    assert 40 < bf16 < 60 and 2.0 < fp32 < 3.0
    params = {**SPECS["gemm_int8"].defaults, **burnin["gemm_int8"].params_for("cpu")}
    i8 = model_workload("gemm_int8", params, occurrences=[0])
    assert 80 < _case_s(i8, 0, EPYC_AVX2_CORE) < 120
