"""The fused exact EmbeddingBag check (sdcscan/checks/embbag/exact_triton.py) gives, bit for bit, the flags
and fingerprint of the torch check it may replace on a GPU (issue 42): on values no table gives, and
through whole embbag_int8 cases under every self-test fault model of exact mode's variants.

The kernel runs in Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest.py), whose numpy
arithmetic warns where an element is NaN, Inf or past fp32's range once scaled by 128: both paths flag
such a bag whatever count the cast gives, so those warnings are expected here.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from sdcscan.checks.digest import fingerprint_words
from sdcscan.checks.embbag import exact, exact_fused
from sdcscan.faults import FaultSpec, from_label
from sdcscan.outcomes import Case
from sdcscan.workloads.base import Context
from sdcscan.workloads.embbag_int8.workload import EmbbagInt8
from tests.helpers.tools import missing_tool

pytestmark = [
    pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning"),
]


@pytest.fixture(autouse=True)
def _triton() -> None:
    if importlib.util.find_spec("triton") is None:
        missing_tool("Triton", "pip install -e '.[test]' on Linux x86_64")


def _outputs(bags: int, dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A clean output on the 2^-7 grid, its column weights and both S_exp (int32, wrapping)."""
    g = torch.Generator().manual_seed(bags * 31 + dim)
    units = torch.randint(-(2**17), 2**17, (bags, dim), generator=g, dtype=torch.int32)
    weights = exact.column_weights(dim, bags, torch.device("cpu"))
    return (
        units.float() * exact.UNIT,
        units.sum(1, dtype=torch.int32),
        weights,
        (units * weights).sum(1, dtype=torch.int32),
    )


@pytest.mark.parametrize(("bags", "dim"), [(1, 4), (33, 64), (70, 128), (5, 12)])
def test_the_fused_flags_and_fingerprint_are_the_torch_ones_on_values_no_table_gives(
    bags: int, dim: int
) -> None:
    """NaN, ±Inf, values past int32 and at 2^24, half a unit, a denormal, elements exchanged, a bag
    moved by a whole unit: the same bags flagged, the same fingerprint."""
    out, expected, weights, weighted = _outputs(bags, dim)
    strikes = [float("nan"), float("inf"), -float("inf"), 3e9, 2.0**24, 1e-40, -(2.0**31)]
    for i, value in enumerate(strikes):
        out[i % bags, (5 * i) % dim] = value
    out[-1, 0] += exact.UNIT / 2
    if bags > 9:  # bags no value above struck: two elements exchanged, one moved by a whole unit
        out[9, 1], out[9, 2] = out[9, 2].item(), out[9, 1].item()
        out[8, 0] += 1.0
    fused, printed = exact_fused.bad_bags(out, expected, weights, weighted)
    assert torch.equal(fused, exact.exact_bad_bags(out, expected, None, (weights, weighted)))
    assert int(printed) == int(fingerprint_words(out))
    clean, expected, weights, weighted = _outputs(bags, dim)
    assert not exact_fused.bad_bags(clean, expected, weights, weighted)[0].any()


def test_the_fused_check_refuses_an_output_it_would_misread() -> None:
    out, expected, weights, weighted = _outputs(4, 8)
    for bad in (out[:, :6], out.double(), out[:, :7].contiguous()):
        with pytest.raises(ValueError, match="contiguous fp32"):
            exact_fused.bad_bags(bad, expected, weights[: bad.shape[1]], weighted)


def _case(variant: str, check_kernel: str, armed: FaultSpec | None) -> tuple[object, ...]:
    """One case of a self-test variant of embbag_int8 with the given check kernel."""
    params = {
        **EmbbagInt8.spec.defaults,
        **EmbbagInt8.selftest_variants[variant],
        "check_kernel": check_kernel,
    }
    workload = EmbbagInt8(params)
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=13, params=params)
    workload.prepare(ctx)
    assert workload.fused == (check_kernel == "fused")
    ctx.begin_case(armed)
    out = workload.run(ctx, Case(0, "embbag_int8", 99, 0, params))
    return out.status, out.digest, [m.where for m in out.mismatches], out.detail


def _faults() -> list[pytest.param]:
    """Exact mode's variants clean, then a spread of every site's self-test models (each struck case
    takes about a second in the interpreter: those run with the slow tests)."""
    found = [pytest.param(variant, "output", None) for variant in ("exact", "exact_4bit", "exact_wide")]
    for variant in ("exact", "exact_4bit", "exact_wide"):
        for site in ("output", "table", "fetch"):
            labels = list(EmbbagInt8.selftest_bits(variant, site))
            runs = [label for label in labels if str(label).startswith("run32")]  # the weighted sum's
            spread = [label for label in labels if label not in runs][:: 2 if variant == "exact_wide" else 7]
            found.extend(
                pytest.param(variant, site, label, marks=pytest.mark.slow) for label in runs + spread
            )
    return found


@pytest.mark.parametrize(("variant", "site", "label"), _faults())
def test_an_embbag_case_is_the_same_with_either_check_kernel(
    variant: str, site: str, label: int | str | None
) -> None:
    """The shipped case: the same verdict, digest, findings and counters with either kernel."""
    armed = None if label is None else from_label(label, site, 5)
    torch_case = _case(variant, "torch", armed)
    assert _case(variant, "fused", armed) == torch_case
    if label is None:
        assert torch_case[0] == "ok"


def test_the_fused_embbag_kernel_that_fails_its_start_up_trial_leaves_the_torch_check_and_a_note(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real kernel passes its trial; one that raises at start-up is not used, and the note says so."""
    assert exact_fused.agrees_on_a_small_output(torch.device("cpu"))

    def broken(*args: object) -> object:
        raise RuntimeError("out of resources")

    monkeypatch.setattr(exact_fused, "bad_bags", broken)
    params = {**EmbbagInt8.spec.defaults, **EmbbagInt8.spec.tiny, "mode": "exact", "check_kernel": "fused"}
    workload = EmbbagInt8(params)
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=13, params=params)
    workload.prepare(ctx)
    assert not workload.fused
    assert any("failed its start-up trial" in n and "out of resources" in n for n in ctx.notes)
