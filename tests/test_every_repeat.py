"""Every repeat counts: a fault in any repeat of a case changes the case's digest, in every workload that
repeats work inside a case (issue "Detection that holds...", item 2)."""

from __future__ import annotations

import pytest
import torch

from sdcscan.checks.digest import RepeatDigest
from sdcscan.faults import FaultSpec
from sdcscan.outcomes import Case
from sdcscan.workloads import load
from sdcscan.workloads.base import Context

REPEATS = 4
PARAMS = {
    "gemm_fp": {
        "dtypes": ["float32"],
        "shapes": [[16, 64, 16]],
        "repeats": [REPEATS],
        "checkers": ["float32"],
    },
    "matmul_golden": {"m": 16, "k": 64, "n": 16, "dtypes": ["float32"], "repeats": [REPEATS]},
    "gemm_int8": {"shapes": [[8, 64, 40]], "ops_per_case": 2 * 8 * 64 * 40 * REPEATS},
}


def _run(name: str, fault: FaultSpec | None):
    cls = load(name)
    params = {**cls.spec.defaults, **PARAMS[name]}
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=5, params=params)
    workload = cls(params)
    workload.prepare(ctx)
    ctx.begin_case(fault)
    return workload.run(ctx, Case(index=0, workload=name, seed=11, occurrence=0)), ctx


@pytest.mark.parametrize("name", list(PARAMS))
@pytest.mark.parametrize("repeat", range(REPEATS))
@pytest.mark.parametrize("bit", [0, 5, 30])
def test_a_flip_in_any_repeat_changes_the_digest(name, repeat, bit):
    clean, _ = _run(name, None)
    hit, ctx = _run(name, FaultSpec("bitflip", "output", seed=1, element=3, bit=bit, repeat=repeat))
    assert ctx.injected is not None and ctx.injected["repeat"] == repeat
    if ctx.injected["value_changed"]:
        assert hit.digest != clean.digest


@pytest.mark.parametrize("name", list(PARAMS))
def test_clean_repeats_give_one_digest_run_after_run(name):
    assert _run(name, None)[0].digest == _run(name, None)[0].digest


def test_without_a_named_repeat_the_fault_strikes_one_drawn_from_its_seed():
    struck = {
        _run("gemm_fp", FaultSpec("bitflip", "output", seed=s, bit=30))[1].injected["repeat"]
        for s in range(40)
    }
    assert struck == set(range(REPEATS))


def test_repeat_digest_differs_exactly_when_some_repeat_differs():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    same, other = RepeatDigest(), RepeatDigest()
    for _ in range(3):
        same.add(x.clone())
    changed = x.clone()
    changed[1, 1] = -0.0 if changed[1, 1] == 0 else changed[1, 1] * 2
    for t in (x.clone(), changed, x.clone()):
        other.add(t)
    single = RepeatDigest()
    single.add(x.clone())
    assert same.hexdigest() == single.hexdigest() != other.hexdigest()
    zero, negzero = RepeatDigest(), RepeatDigest()
    for d, t in ((zero, torch.zeros(2)), (negzero, torch.tensor([0.0, -0.0]))):
        d.add(torch.zeros(2))
        d.add(t)
    assert zero.hexdigest() != negzero.hexdigest()  # bits, not values: -0.0 is another result
