"""`train` with autocast: still bit-reproducible and fault-sensitive; bad settings refused; where a case draws."""

from __future__ import annotations

import pytest
import torch

from sdcscan.errors import ProfileError
from sdcscan.faults import FaultSpec
from sdcscan.outcomes import Case
from sdcscan.profile import profile_from_data
from sdcscan.workloads.base import Context
from sdcscan.workloads.params import Choice
from sdcscan.workloads.train.workload import Train, case_generator

PARAMS = {**Train.spec.defaults, "hidden": 32, "batch": 16, "steps": 12, "autocast": "bfloat16"}
FLIP = FaultSpec("bitflip", "weight", seed=3, element=5, bit=0)


def _context(device: str = "cpu") -> Context:
    return Context(unit="x", device=torch.device(device), run_seed=1, params=PARAMS)


def _run(params=PARAMS, fault=None, seed=77, device="cpu"):
    ctx = _context(device)
    w = Train(params)
    w.prepare(ctx)
    ctx.begin_case(fault)
    return w.run(ctx, Case(index=0, workload="train", seed=seed, occurrence=0))


def test_autocast_bfloat16_repeats_bit_for_bit_and_follows_the_seed():
    """Same case, same digest; another case seed, another digest."""
    first, again, other = _run(), _run(), _run(seed=78)
    assert first.status == "ok" and first.digest == again.digest
    assert other.digest != first.digest


def test_autocast_changes_what_is_computed():
    """autocast is not ignored: a bfloat16 forward gives another digest than the float32 one."""
    assert _run().digest != _run({**PARAMS, "autocast": "none"}).digest


def test_weight_fault_still_changes_the_digest_under_autocast():
    """Bit 0 of one float32 master weight, half way through, survives the bfloat16 forward passes."""
    flipped = _run(fault=FLIP)
    assert flipped.status == "ok" and flipped.digest != _run().digest


def test_weights_and_optimizer_state_stay_float32_under_autocast():
    ctx = _context()
    w = Train(PARAMS)
    w.prepare(ctx)
    ctx.begin_case(None)
    w.run(ctx, Case(index=0, workload="train", seed=77, occurrence=0))
    assert w.model is not None
    assert {t.dtype for t in w.model.parameters()} == {torch.float32}


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"autocast": "int8"}, "autocast must be one of none, bfloat16, float16"),
        ({"autocast": "bfloat16", "dtype": "float64"}, "needs dtype float32 (got float64)"),
        ({"autocast": "float16", "dtype": "bfloat16"}, "needs dtype float32 (got bfloat16)"),
    ],
)
def test_bad_autocast_settings_are_refused_at_construction(params, needle):
    with pytest.raises(ValueError, match="train: autocast") as err:
        Train({**PARAMS, **params})
    assert needle in str(err.value)


@pytest.mark.parametrize("autocast", ["none", "bfloat16", "float16"])
def test_good_autocast_settings_are_accepted(autocast):
    Train({**PARAMS, "autocast": autocast})
    Train({**PARAMS, "autocast": "none", "dtype": "float64"})


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"autocast": "int8"}, "one of none, bfloat16, float16"),
        ({"autocast": "float16", "dtype": "float64"}, "needs dtype float32 (got float64)"),
    ],
)
def test_bad_autocast_settings_are_refused_when_the_profile_loads(params, needle):
    """Refused by the catalogue in the parent (exit 2), before any worker starts."""
    doc = {"version": 1, "workloads": [{"name": "train", "params": params}]}
    with pytest.raises(ProfileError, match=r"workloads\[0\]\.params\.autocast \(train\)") as err:
        profile_from_data(doc, label="p.yaml", default_name="p")
    assert needle in str(err.value)


def test_a_profile_with_autocast_on_float32_loads():
    doc = {"version": 1, "workloads": [{"name": "train", "params": {"autocast": "float16"}}]}
    profile_from_data(doc, label="p.yaml", default_name="p")


def test_cpu_cases_draw_from_the_contexts_cpu_generator_stream():
    """On the CPU the case generator is ctx.generator's: CPU digests do not change."""
    ctx = _context()
    g = case_generator(ctx, 12345)
    assert g.device.type == "cpu"
    assert torch.equal(torch.rand(64, generator=g), torch.rand(64, generator=ctx.generator(12345)))
    assert not torch.equal(torch.rand(64, generator=case_generator(ctx, 1)), torch.rand(64, generator=g))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_cases_draw_on_the_device_with_the_contexts_seed():
    ctx = _context("cuda")
    g = case_generator(ctx, 12345)
    assert g.device.type == "cuda" and g.initial_seed() == ctx.generator(12345).initial_seed()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("autocast", ["bfloat16", "float16"])
def test_autocast_on_cuda_repeats_bit_for_bit_and_sees_a_weight_fault(autocast):
    params = {**PARAMS, "autocast": autocast}
    first, again = _run(params, device="cuda"), _run(params, device="cuda")
    assert first.status == "ok" and first.digest == again.digest
    assert _run(params, fault=FLIP, device="cuda").digest != first.digest


def test_the_catalogue_offers_exactly_the_autocast_dtypes_the_workload_knows():
    """The catalogue restates train._AUTOCAST (it imports no torch); the two must not drift apart."""
    from sdcscan.workloads.train import workload as train

    assert Train.spec.params["autocast"] == Choice(tuple(train._AUTOCAST))
