"""embbag_int8 workload: clean cases pass, table and output flips are caught, raw-id flips stay silent."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from sdcscan.faults import FaultSpec
from sdcscan.outcomes import Case
from sdcscan.workloads import embbag_int8, load
from sdcscan.workloads.base import Context, has_selftest
from sdcscan.workloads.embbag_int8 import EmbbagInt8, fit_rows


def _ready(params: dict[str, Any], seed: int = 1) -> tuple[EmbbagInt8, Context]:
    workload = EmbbagInt8({**EmbbagInt8.spec.tiny, **params})
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=seed, params={})
    workload.prepare(ctx)
    return workload, ctx


def _run(workload: EmbbagInt8, ctx: Context, seed: int, fault: FaultSpec | None = None) -> Any:
    ctx.begin_case(fault)
    return workload.run(ctx, Case(seed, "embbag_int8", seed, seed))


def test_registered_with_the_selftest_protocol() -> None:
    """Registry entry, variants, bits and floors are what sdcscan selftest reads."""
    assert load("embbag_int8") is EmbbagInt8 and has_selftest(EmbbagInt8)
    assert set(EmbbagInt8.selftest_variants) == {"exact", "realistic"}
    assert EmbbagInt8.negative_sites == ("indices",)
    assert EmbbagInt8.selftest_bits("exact", "table") == list(range(8))
    assert EmbbagInt8.selftest_bits("exact", "output") == list(range(32))
    assert EmbbagInt8.selftest_floor("exact", "table", 0) == 0.999
    assert EmbbagInt8.selftest_floor("realistic", "table", 7) is None
    assert EmbbagInt8.selftest_floor("exact", "indices", 3) is None
    assert EmbbagInt8.spec.defaults["rows"] >= 1_000_000


@pytest.mark.parametrize("mode", ["exact", "realistic"])
@pytest.mark.parametrize("weighted", [False, True])
def test_clean_cases_pass_and_are_deterministic(mode: str, weighted: bool) -> None:
    """Several seeds pass; a second worker with the same run seed builds the same table and digests."""
    first, ctx1 = _ready({"mode": mode, "weighted": weighted})
    second, ctx2 = _ready({"mode": mode, "weighted": weighted})
    for seed in range(4):
        a, b = _run(first, ctx1, seed), _run(second, ctx2, seed)
        assert a.status == "ok" and not a.mismatches
        assert a.digest == b.digest and a.ops == b.ops and a.ops_unit == "lookup"


@pytest.mark.parametrize("site", ["output", "table"])
def test_exact_mode_catches_every_value_changing_flip(site: str) -> None:
    """Every bit of an output word or of a pooled table byte; the table is restored after the case."""
    workload, ctx = _ready(EmbbagInt8.selftest_variants["exact"])
    assert workload.packed is not None
    pristine = workload.packed.clone()
    for bit in EmbbagInt8.selftest_bits("exact", site):
        for seed in range(3):
            outcome = _run(workload, ctx, seed, FaultSpec("bitflip", site, 100 * bit + seed, bit=bit))
            assert ctx.injected is not None
            if ctx.injected["value_changed"]:
                assert outcome.status == "mismatch", (bit, seed)
                assert outcome.mismatches[0].check == "embbag_exact"
    assert torch.equal(workload.packed, pristine)
    assert _run(workload, ctx, 0).status == "ok"


@pytest.mark.parametrize("variant", ["exact", "realistic"])
def test_raw_id_flips_stay_silent(variant: str) -> None:
    """Negative control: the lookup and the checksum both use the corrupted, re-hashed id."""
    workload, ctx = _ready(EmbbagInt8.selftest_variants[variant])
    for bit in range(0, 64, 3):
        outcome = _run(workload, ctx, bit, FaultSpec("bitflip", "indices", bit, bit=bit))
        assert ctx.injected is not None and outcome.status == "ok"


def test_realistic_mode_catches_high_bit_output_flips() -> None:
    """Exponent flips exceed the rigorous bound (low mantissa bits are below it: report only)."""
    workload, ctx = _ready(EmbbagInt8.selftest_variants["realistic"])
    for seed in range(3):
        assert _run(workload, ctx, seed, FaultSpec("bitflip", "output", seed, bit=30)).status == "mismatch"


def test_fit_rows_scales_down_to_the_memory_share() -> None:
    """1/(4·cpus) of MemAvailable per worker; unknown memory keeps the requested rows."""
    assert fit_rows(1_000_000, 80, None, 8) == 1_000_000
    assert fit_rows(1_000_000, 80, 80 * 4 * 2 * 1000, 2) == 1000
    assert fit_rows(10, 80, 1, 64) == 1


def test_short_memory_is_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare shrinks the table and says so in a note the report shows."""
    monkeypatch.setattr(embbag_int8, "_mem_available", lambda: 4 * (16 + 16) * 500)
    monkeypatch.setattr(embbag_int8.os, "cpu_count", lambda: 1)
    workload, ctx = _ready({})
    assert workload.packed is not None and workload.packed.shape[0] == 500
    assert any("scaled down" in n for n in ctx.notes)
    assert _run(workload, ctx, 0).status == "ok"


@pytest.mark.parametrize("params", [{"mode": "sum"}, {"dim": 10}, {"pooling": [5, 2]}, {"pooling": [3]}])
def test_bad_parameters_are_rejected(params: dict[str, Any]) -> None:
    """Unknown mode, a dim the CUDA kernel cannot take, or a bad pooling range."""
    with pytest.raises(ValueError):
        EmbbagInt8(params)
