"""gemm_int8 workload: clean cases pass, injected flips are caught, the negative control stays silent."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from sdcscan.faults import FaultSpec
from sdcscan.outcomes import Case
from sdcscan.workloads import load
from sdcscan.workloads.base import Context, has_selftest
from sdcscan.workloads.gemm_int8 import GemmInt8, _probe


def _ready(params: dict[str, Any], seed: int = 1) -> tuple[GemmInt8, Context]:
    workload = GemmInt8({**GemmInt8.spec.tiny, **params})
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=seed, params={})
    workload.prepare(ctx)
    return workload, ctx


def _run(
    workload: GemmInt8, ctx: Context, seed: int, fault: FaultSpec | None = None, occurrence: int = 0
) -> Any:
    ctx.begin_case(fault)
    return workload.run(ctx, Case(seed, "gemm_int8", seed, occurrence))


def test_registered_with_the_selftest_protocol() -> None:
    """Registry entry, variants, bits and floors are what sdcscan selftest reads."""
    assert load("gemm_int8") is GemmInt8 and has_selftest(GemmInt8)
    assert set(GemmInt8.selftest_variants) == {"mod2_32", "mod127"}
    assert GemmInt8.negative_sites == ("operand",) and set(GemmInt8.negative_sites) <= set(
        GemmInt8.spec.fault_sites
    )
    assert GemmInt8.selftest_bits("mod2_32", "output") == list(range(32))
    assert GemmInt8.selftest_bits("mod127", "encoded") == list(range(8))
    assert GemmInt8.selftest_floor("mod2_32", "encoded", 7) == 1.0
    assert GemmInt8.selftest_floor("mod127", "output", 31) == 1.0
    assert GemmInt8.selftest_floor("mod127", "encoded", 0) is None
    assert GemmInt8.selftest_floor("mod2_32", "operand", 0) is None


@pytest.mark.parametrize("scheme", ["mod2_32", "mod127"])
@pytest.mark.parametrize("path", ["unsigned", "signed"])
def test_clean_cases_pass_and_are_deterministic(scheme: str, path: str) -> None:
    """Several seeds and both shapes pass; a second worker gets the same digests."""
    first, ctx1 = _ready({"scheme": scheme, "path": path})
    second, ctx2 = _ready({"scheme": scheme, "path": path})
    for seed in range(4):
        a, b = _run(first, ctx1, seed, occurrence=seed), _run(second, ctx2, seed, occurrence=seed)
        assert a.status == "ok" and not a.mismatches and a.detail["path"] == path
        assert a.digest == b.digest and a.ops == b.ops > 0 and a.ops_unit == "op"


@pytest.mark.parametrize("variant", ["mod2_32", "mod127"])
@pytest.mark.parametrize("site", ["output", "encoded"])
def test_bit_flips_after_encoding_are_caught(variant: str, site: str) -> None:
    """Every bit position of the site's word, several elements each: a mismatch with a record."""
    workload, ctx = _ready(GemmInt8.selftest_variants[variant])
    for bit in GemmInt8.selftest_bits(variant, site):
        for seed in range(3):
            outcome = _run(workload, ctx, seed, FaultSpec("bitflip", site, 1000 * bit + seed, bit=bit))
            assert ctx.injected is not None and ctx.injected["value_changed"]
            assert outcome.status == "mismatch", (bit, seed)
            assert outcome.mismatches[0].check == f"abft_{variant}"


@pytest.mark.parametrize("variant", ["mod2_32", "mod127"])
def test_activation_flips_stay_silent(variant: str) -> None:
    """Negative control: A is not encoded, so the product and its checksum stay consistent."""
    workload, ctx = _ready(GemmInt8.selftest_variants[variant])
    for bit in range(8):
        outcome = _run(workload, ctx, bit, FaultSpec("bitflip", "operand", bit, bit=bit))
        assert ctx.injected is not None and outcome.status == "ok"


def _saturating_mm(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A pre-VNNI kernel: pairs of u8·s8 products saturate to int16 before accumulation."""
    prod = a.int()[:, None, :] * w.int()[None, :, :]  # (m, n, k)
    if prod.shape[-1] % 2:
        prod = torch.nn.functional.pad(prod, (0, 1))
    pairs = (prod[..., 0::2] + prod[..., 1::2]).clamp(-(2**15), 2**15 - 1)
    return pairs.sum(-1, dtype=torch.int32)


def test_probe_reports_saturation_and_passes_exact_kernels() -> None:
    """The probe is silent for torch._int_mm here and names the failing input for a saturating kernel."""
    assert _probe(lambda a, w: torch._int_mm(a, w.t()), torch.device("cpu")) == ""
    assert "A=255, W=127" in _probe(lambda a, w: _saturating_mm(a, w), torch.device("cpu"))


def test_saturating_kernel_restricts_activations_and_is_not_a_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inexact probe: a note, activations in [0, 127], and clean cases still pass on that kernel."""
    monkeypatch.setattr(GemmInt8, "_mm", lambda self, a, w: _saturating_mm(a, w))
    workload, ctx = _ready({"shapes": [[4, 64, 24]]})
    assert workload.a_max == 127 and any("restricted to [0, 127]" in n for n in ctx.notes)
    outcome = _run(workload, ctx, 3)
    assert outcome.status == "ok" and outcome.detail["activation_max"] == 127


def test_defaults_have_profile_friendly_types() -> None:
    """Profiles validate against defaults: shapes is a non-empty list of [m, k, n] integer lists."""
    shapes = GemmInt8.spec.defaults["shapes"]
    assert shapes and all(
        isinstance(s, list) and len(s) == 3 and all(isinstance(x, int) for x in s) for s in shapes
    )
    assert any(s[0] == 1 for s in shapes) and any(s[0] >= 64 and min(s[1:]) >= 512 for s in shapes)


@pytest.mark.parametrize(
    "params",
    [
        {"scheme": "mod3"},
        {"path": "gpu"},
        {"shapes": [[1, 2]]},
        {"shapes": [[1, 70000, 8]]},
        {"shapes": [[4, 1, 8]]},
    ],
)
def test_bad_parameters_are_rejected(params: dict[str, Any]) -> None:
    """Unknown scheme or path, malformed shape, k past the int32 limit, or k = 1 (a torch CPU bug)."""
    with pytest.raises(ValueError):
        GemmInt8(params)
