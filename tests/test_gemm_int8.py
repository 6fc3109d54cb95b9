"""gemm_int8 workload: clean cases pass, injected flips and matrix faults are caught by the right check,
the negative control stays silent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import torch

from sdcscan import faults
from sdcscan.checks import int8
from sdcscan.faults import FaultSpec
from sdcscan.faults.hardware import ROW_ADDRESS_KINDS
from sdcscan.outcomes import Case
from sdcscan.peaks.plain_ops import plain_ops
from sdcscan.workloads import load
from sdcscan.workloads.base import Context, has_selftest
from sdcscan.workloads.gemm_int8 import int_mm_path
from sdcscan.workloads.gemm_int8 import workload as gemm_int8
from sdcscan.workloads.gemm_int8.int_mm_path import takes_signed_path
from sdcscan.workloads.gemm_int8.selftest_spec import BURSTS, OUTPUT_MODELS, SPATIAL_MODELS
from sdcscan.workloads.gemm_int8.workload import GemmInt8, _probe, repeats_of

CHECKS = {"abft_mod2_32", "abft_mod127", "abft_weighted_row", "abft_column", "abft_row_tag"}


def _ready(params: Mapping[str, Any], seed: int = 1) -> tuple[GemmInt8, Context]:
    workload = GemmInt8({**GemmInt8.spec.tiny, **params})
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=seed, params={})
    workload.prepare(ctx)
    return workload, ctx


def _n_ext(workload: GemmInt8) -> int:
    """Columns of C of the workload's first shape: data, checksums, row-tag readers, padding."""
    return int(workload.weights[tuple(workload.p["shapes"][0])][0].w_ext.shape[0])


def _run(
    workload: GemmInt8, ctx: Context, seed: int, fault: FaultSpec | None = None, occurrence: int = 0
) -> Any:
    ctx.begin_case(fault)
    return workload.run(ctx, Case(seed, "gemm_int8", seed, occurrence))


def test_registered_with_the_selftest_protocol() -> None:
    """Registry entry, variants, bits, models and floors are what sdcscan selftest reads."""
    assert load("gemm_int8") is GemmInt8 and has_selftest(GemmInt8)
    assert set(GemmInt8.selftest_variants) == {"mod2_32", "mod127", "mod2_32_wide", "mod127_wide"}
    assert GemmInt8.negative_sites == ("operand",) and set(GemmInt8.negative_sites) <= set(
        GemmInt8.spec.fault_sites
    )
    assert GemmInt8.selftest_bits("mod2_32", "output") == [*range(32), *OUTPUT_MODELS, *BURSTS]
    assert GemmInt8.selftest_bits("mod127_wide", "output") == list(SPATIAL_MODELS)
    assert GemmInt8.selftest_bits("mod127_wide", "encoded") == []
    assert {"swap_in_row", "swap_columns", "pair_in_row", "double_flip:31", "row_offset:4194304"} <= set(
        OUTPUT_MODELS
    ) and {"row_offset:127", "column_offset"} <= set(OUTPUT_MODELS)
    assert all(
        faults.from_label(label, "output", 0).kind in (*faults.MATRIX_KINDS, *ROW_ADDRESS_KINDS)
        for label in OUTPUT_MODELS
    )
    assert set(ROW_ADDRESS_KINDS) <= {label.split(":")[0] for label in (*OUTPUT_MODELS, *SPATIAL_MODELS)}
    assert GemmInt8.selftest_bits("mod127", "encoded") == list(range(8))
    for variant in GemmInt8.selftest_variants:
        for label in [*GemmInt8.selftest_bits(variant, "output"), *range(8)]:
            site = "output" if label in GemmInt8.selftest_bits(variant, "output") else "encoded"
            blind = variant.startswith("mod127") and label in ("burst:7", "burst:8")  # its checksum word
            assert GemmInt8.selftest_floor(variant, site, label) == (None if blind else 1.0)
    assert GemmInt8.selftest_floor("mod2_32", "operand", 0) is None


@pytest.mark.parametrize("scheme", ["mod2_32", "mod127"])
@pytest.mark.parametrize("path", ["unsigned", "signed"])
def test_clean_cases_pass_and_are_deterministic(scheme: str, path: str) -> None:
    """Several seeds and both shapes (m = 1 and m = 20) pass; a second worker gets the same digests."""
    first, ctx1 = _ready({"scheme": scheme, "path": path})
    second, ctx2 = _ready({"scheme": scheme, "path": path})
    for seed in range(4):
        a, b = _run(first, ctx1, seed, occurrence=seed), _run(second, ctx2, seed, occurrence=seed)
        assert a.status == "ok" and not a.mismatches and a.detail["path"] == path
        assert a.digest == b.digest and a.ops == b.ops > 0 and a.ops_unit == "op"
        assert a.detail["bad_rows"] == a.detail["bad_weighted_rows"] == a.detail["bad_columns"] == 0


@pytest.mark.parametrize("block_bytes", [1, 3 * 4 * 48, 4 << 20])
def test_clean_cases_pass_in_blocks_of_any_size(monkeypatch: pytest.MonkeyPatch, block_bytes: int) -> None:
    """One repeat per block, 3 per block with a partial last block (20 repeats), or all in one: many
    seeds and shapes, skinny m = 1 included, stay silent."""
    monkeypatch.setattr(gemm_int8, "CHECK_BLOCK_BYTES", block_bytes)
    shapes = [[1, 64, 40], [3, 17, 9], [8, 64, 40], [20, 32, 24]]  # 40, 218, 5 and 7 repeats
    for scheme in ("mod2_32", "mod127"):
        workload, ctx = _ready({"scheme": scheme, "shapes": shapes, "ops_per_case": 2.0e5})
        for seed in range(3 * len(shapes)):
            outcome = _run(workload, ctx, seed, occurrence=seed)
            assert outcome.status == "ok", (scheme, seed, outcome.mismatches[:2])


def test_clean_cases_pass_at_the_smallest_shapes() -> None:
    """n = 1, k = MIN_K, m = 1 and a few repeats: every identity holds (digit rows, weights, layout)."""
    shapes = [[1, 2, 1], [2, 3, 1], [1, 2, 2], [5, 2, 3]]
    for scheme in ("mod2_32", "mod127"):
        workload, ctx = _ready({"scheme": scheme, "shapes": shapes, "ops_per_case": 60.0})
        for seed in range(4 * len(shapes)):
            assert _run(workload, ctx, seed, occurrence=seed).status == "ok", (scheme, seed)


@pytest.mark.parametrize("variant", ["mod2_32", "mod127"])
@pytest.mark.parametrize("site", ["output", "encoded"])
def test_bit_flips_after_encoding_are_caught(variant: str, site: str) -> None:
    """Every bit position of the site's word, several elements each: a mismatch with a record."""
    workload, ctx = _ready(GemmInt8.selftest_variants[variant])
    for bit in range(32 if site == "output" else 8):
        for seed in range(3):
            outcome = _run(workload, ctx, seed, FaultSpec("bitflip", site, 1000 * bit + seed, bit=bit))
            assert ctx.injected is not None and ctx.injected["value_changed"]
            assert outcome.status == "mismatch", (bit, seed)
            assert {m.check for m in outcome.mismatches} <= CHECKS
            if site == "output" and ctx.injected["element"] % _n_ext(workload) < 40:
                # one changed data word: every check names it
                assert {f"abft_{variant}", "abft_weighted_row", "abft_column"} <= {
                    m.check for m in outcome.mismatches
                }


@pytest.mark.parametrize("variant", ["mod2_32", "mod127"])
@pytest.mark.parametrize("label", OUTPUT_MODELS)
def test_matrix_fault_models_are_caught(variant: str, label: str) -> None:
    """Each self-test model, armed through Context.fault with faults.from_label, in any repeat: caught."""
    workload, ctx = _ready(GemmInt8.selftest_variants[variant])
    for seed in range(8):
        outcome = _run(workload, ctx, seed, faults.from_label(label, "output", 77 * seed))
        assert ctx.injected is not None and ctx.injected["value_changed"], seed
        assert outcome.status == "mismatch", seed


@pytest.mark.parametrize(
    ("variant", "label", "check"),
    [
        ("mod2_32", "swap_in_row", "abft_column"),
        ("mod2_32", "pair_in_row", "abft_column"),
        ("mod2_32", "double_flip:31", "abft_column"),
        ("mod2_32", "row_offset:536870912", "abft_column"),
        ("mod127", "row_offset:127", "abft_column"),
        ("mod127", "column_offset:127", "abft_weighted_row"),
        ("mod2_32", "swap_columns", "abft_weighted_row"),
    ],
)
def test_faults_the_row_check_misses_are_named_by_the_check_that_fired(
    variant: str, label: str, check: str
) -> None:
    """The row check stays silent (bad_rows 0) and the record says which check fired and where."""
    workload, ctx = _ready(GemmInt8.selftest_variants[variant])
    for seed in range(5):
        outcome = _run(workload, ctx, seed, faults.from_label(label, "output", seed))
        assert outcome.status == "mismatch" and outcome.detail["bad_rows"] == 0
        fired = [m for m in outcome.mismatches if m.check == check]
        assert fired, outcome.mismatches
        if check == "abft_column":
            assert fired[0].where.startswith("column ") and "repeat" in fired[0].where
            assert outcome.detail["bad_columns"] > 0
        else:
            assert fired[0].where.startswith("row ") and " of C (repeat " in fired[0].where


def test_a_fault_in_any_repeat_of_any_block_is_caught_and_located(monkeypatch: pytest.MonkeyPatch) -> None:
    """20 repeats of m = 1 in blocks of 3: a flip or a swap in repeat r is reported in repeat r."""
    workload, ctx = _ready({"shapes": [[1, 64, 40]], "ops_per_case": 1.0e5})
    monkeypatch.setattr(gemm_int8, "CHECK_BLOCK_BYTES", 3 * 4 * _n_ext(workload))
    for repeat in range(20):
        for spec in (
            FaultSpec("bitflip", "output", repeat, bit=repeat, repeat=repeat),
            FaultSpec("swap_in_row", "output", repeat, repeat=repeat),
        ):
            outcome = _run(workload, ctx, 5, spec)
            assert outcome.status == "mismatch" and outcome.detail["repeats"] == 20
            assert ctx.injected is not None and ctx.injected.get("repeat") == repeat
            assert any(f"(repeat {repeat})" in m.where for m in outcome.mismatches), (repeat, spec.kind)


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
    cpu = torch.device("cpu")
    for signed in (False, True):
        assert _probe(lambda a, w, out: torch._int_mm(a, w.t(), out=out), cpu, signed) == ""
    assert "A=255, W=127" in _probe(lambda a, w, out: out.copy_(_saturating_mm(a, w)), cpu, False)


def test_saturating_kernel_restricts_activations_and_is_not_a_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inexact probe: a note, activations in [0, 127], and clean cases still pass on that kernel (the
    column check's digit rows are in [0, 127] too)."""

    def saturating(
        self: GemmInt8, a: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        c = _saturating_mm(a, w)
        return c if out is None else out.copy_(c)

    monkeypatch.setattr(GemmInt8, "_mm", saturating)
    workload, ctx = _ready({"shapes": [[4, 64, 24]]})
    assert workload.a_max == 127 and any("restricted to [0, 127]" in n for n in ctx.notes)
    outcome = _run(workload, ctx, 3)
    assert outcome.status == "ok" and outcome.detail["activation_max"] == 127
    for bit in range(8):  # the negative control on that kernel: a flip of bit 7 must not leave [0, 127]
        outcome = _run(workload, ctx, bit, FaultSpec("bitflip", "operand", bit, bit=bit))
        assert ctx.injected is not None and outcome.status == "ok", bit


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
        {"scheme": "mod127", "shapes": [[1, 8, int8.MAX_N_WEIGHTED + 1]]},
        {"shapes": [[int8.CHUNK_ROWS, 8, 8]]},
    ],
)
def test_bad_parameters_are_rejected(params: dict[str, Any]) -> None:
    """Unknown scheme or path, malformed shape, k past the int32 limit, k = 1 (a torch CPU bug), n past the
    weighted checksum's digits, or m past the rows an exact fp64 column sum allows."""
    with pytest.raises(ValueError):
        GemmInt8(params)


@pytest.mark.parametrize("site", ["encoded", "operand"])
def test_a_fault_never_reaches_the_pools_the_next_cases_read(site: str) -> None:
    """Operands are views of per-worker pools; a fault corrupts a copy, so later cases stay clean and
    equal to a fresh worker's."""
    workload, ctx = _ready({})
    struck = _run(workload, ctx, 3, FaultSpec("bitflip", site, 3, bit=6))
    assert ctx.injected is not None and ctx.injected["site"] == site
    assert (struck.status == "mismatch") is (site == "encoded")  # operand: the negative control
    fresh, fresh_ctx = _ready({})
    for seed in (3, *range(4, 10)):  # the struck case itself again first: the very same pool bytes
        after = _run(workload, ctx, seed)
        assert after.status == "ok" and after.digest == _run(fresh, fresh_ctx, seed).digest


def test_an_activation_changed_in_the_pool_after_prepare_is_caught_by_the_column_check() -> None:
    """The column check's Σ A is read off prefix sums of the pool as prepare drew it: a pool byte that
    a case's first repeat reads, changed later (a memory fault), fails the column it feeds; restored,
    the case passes again."""
    workload, ctx = _ready({})
    assert _run(workload, ctx, 0).status == "ok"
    rows = workload.activations[workload.p["shapes"][0][1]].rows
    first = _first_row(workload, ctx, 0)  # row 0, column 5 of repeat 0's view
    before = int(rows[first, 5])
    rows[first, 5] = before ^ 0x10
    outcome = _run(workload, ctx, 0)
    assert outcome.status == "mismatch" and outcome.detail["bad_columns"] > 0
    assert outcome.detail["bad_rows"] == outcome.detail["bad_weighted_rows"] == 0  # C = A·W is consistent
    assert outcome.detail["bad_row_tags"] == 0
    rows[first, 5] = before
    assert _run(workload, ctx, 0).status == "ok"


def test_cases_read_different_operands_from_the_pools_and_the_run_seed_sets_them() -> None:
    """Distinct seeds give distinct products; the same run seed gives the same pools, another run seed others."""
    workload, ctx = _ready({})
    digests = {_run(workload, ctx, seed).digest for seed in range(12)}
    assert len(digests) == 12
    other, other_ctx = _ready({}, seed=2)
    assert _run(other, other_ctx, 0).digest != _run(workload, ctx, 0).digest
    firsts = {_first_row(workload, ctx, seed) for seed in range(32)}
    assert len(firsts) > 16


def _first_row(workload: GemmInt8, ctx: Context, seed: int) -> int:
    """The first activation row of repeat 0's view in a case of this seed."""
    m, k, n = workload.p["shapes"][0]
    a, starts, _ = workload._operands(
        ctx, Case(seed, "gemm_int8", seed, 0), (m, k, n), repeats_of(workload.p, (m, k, n))
    )
    rows = workload.activations[k].rows
    first = (a[0].data_ptr() - rows.data_ptr()) // rows.stride(0)
    assert first == int(starts[0])  # the host's view and the device's start agree
    return first


@pytest.mark.parametrize("variant", ["mod2_32_wide", "mod127_wide"])
@pytest.mark.parametrize("label", [*SPATIAL_MODELS, *BURSTS])
def test_fault_models_of_how_hardware_fails_are_caught(variant: str, label: str) -> None:
    """Runs, strides, tiles, stuck bits, wrong rows and bursts at the wide self-test shape: every one
    that changed a value fails the case (bursts off mod 127's checksum word), and a clean case passes."""
    workload, ctx = _ready(GemmInt8.selftest_variants[variant])
    assert _run(workload, ctx, 99).status == "ok"
    for seed in range(4):
        outcome = _run(workload, ctx, seed, faults.from_label(label, "output", 31 * seed))
        assert ctx.injected is not None
        if ctx.injected["value_changed"] and ctx.injected.get("element", 0) % 264 != 256:
            assert outcome.status == "mismatch", (seed, ctx.injected)


def test_a_sign_bit_run_cancels_in_the_mod_2_32_row_sum_and_the_column_check_names_it() -> None:
    """32 changes of ±2^31 in one row sum to 0 mod 2^32: the row check is blind, each column is not."""
    workload, ctx = _ready(GemmInt8.selftest_variants["mod2_32_wide"])
    outcome = _run(workload, ctx, 1, faults.from_label("run32:31", "output", 5))
    assert outcome.status == "mismatch" and outcome.detail["bad_rows"] == 0
    assert outcome.detail["bad_columns"] == 32


def test_a_seven_bit_burst_in_the_mod127_checksum_word_is_its_blind_spot() -> None:
    """+127·2^24 in the checksum word vanishes mod 127 and no other check covers that word; the same
    burst in a data word is caught."""
    workload, ctx = _ready(GemmInt8.selftest_variants["mod127"])
    n_ext = _n_ext(workload)
    blind = FaultSpec("burst", "output", 0, element=2 * n_ext + 40, bit=24, param=7)  # row 2, checksum word
    outcome = _run(workload, ctx, 3, blind)
    assert ctx.injected is not None and ctx.injected["value_changed"] and outcome.status == "ok"
    seen = FaultSpec("burst", "output", 0, element=2 * n_ext + 5, bit=24, param=7)
    assert _run(workload, ctx, 3, seen).status == "mismatch"


def _refuse_uint8_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch whose CPU `_int_mm` refuses a uint8 A, as torch 2.11.0+cu130's did on the H200 host's Xeon
    (every CPU unit's setup failed there); the real kernel answers every other call."""
    real = torch._int_mm

    def int_mm(a: torch.Tensor, b: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if a.device.type == "cpu" and a.dtype == torch.uint8:
            raise RuntimeError("int_mm_out_cpu: Expected self dtype to be of type int8 but got unsigned char")
        return real(a, b, *args, **kwargs)

    monkeypatch.setattr(torch, "_int_mm", int_mm)
    int_mm_path.cpu_takes_unsigned.cache_clear()


def test_auto_takes_the_signed_route_where_the_cpu_kernel_refuses_uint8(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Clean cases pass on the signed route with its usual digests, a flip is caught, the plain-op peak
    multiplies the same types, and an explicit `unsigned` says why it cannot run."""
    signed, ctx = _ready({"path": "signed"})
    expected = [_run(signed, ctx, seed, occurrence=seed).digest for seed in range(3)]
    _refuse_uint8_on_cpu(monkeypatch)
    try:
        workload, ctx = _ready({"path": "auto"})
        assert workload.signed and takes_signed_path("auto", torch.device("cpu"))
        assert {op.dtype for op in plain_ops("gemm_int8", {}, torch.device("cpu"))} == {"int8"}
        for seed in range(3):
            outcome = _run(workload, ctx, seed, occurrence=seed)
            assert outcome.status == "ok" and outcome.detail["path"] == "signed"
            assert outcome.digest == expected[seed]
        assert _run(workload, ctx, 0, FaultSpec("bitflip", "output", 7, bit=20)).status == "mismatch"
        with pytest.raises(ValueError, match=r"path unsigned needs a CPU torch\._int_mm that takes uint8"):
            _ready({"path": "unsigned"})
    finally:
        int_mm_path.cpu_takes_unsigned.cache_clear()  # the next test asks the real kernel


def test_auto_keeps_the_unsigned_route_where_the_cpu_kernel_takes_uint8() -> None:
    """The probe asks the torch in hand: where it takes uint8 (torch 2.13.0+cpu does), auto keeps VNNI's
    native u8 x s8; on CUDA, auto is always signed."""
    int_mm_path.cpu_takes_unsigned.cache_clear()
    cpu = torch.device("cpu")
    assert takes_signed_path("auto", cpu) is not int_mm_path.cpu_takes_unsigned()
    assert takes_signed_path("auto", torch.device("cuda", 0))
    assert takes_signed_path("signed", cpu) and not takes_signed_path("unsigned", cpu)


@pytest.mark.skipif(not int_mm_path.cpu_takes_unsigned(), reason="this torch's CPU _int_mm refuses uint8")
def test_both_routes_multiply_the_same_operands_and_check_their_own_products() -> None:
    """The routes draw the same pools and views; the s8 x s8 product is the u8 one less the column
    shift in every row, and each route passes its own clean cases with repeatable digests (a cohort
    shares one torch, hence one route: its digests are never compared with the other route's)."""
    ready = {path: _ready({"path": path}) for path in ("unsigned", "signed")}
    unsigned, signed = ready["unsigned"][0], ready["signed"][0]
    shape = tuple(unsigned.p["shapes"][0])
    m, k, _ = shape
    assert torch.equal(int8.signed_activations(unsigned.activations[k].rows), signed.activations[k].rows)
    a_u8 = unsigned.activations[k].rows[:m]
    w_u, w_s = unsigned.weights[shape][0], signed.weights[shape][0]
    c_u = torch.empty(m, w_u.w_ext.shape[0], dtype=torch.int32)
    c_s = torch.empty(m, w_s.w_ext.shape[0], dtype=torch.int32)
    unsigned._mm(a_u8, w_u.w_ext, out=c_u)
    signed._mm(int8.signed_activations(a_u8), w_s.w_ext, out=c_s)
    assert w_s.shift is not None
    assert torch.equal(c_s.long() + w_s.shift, c_u.long())
    for workload, ctx in ready.values():
        first = [_run(workload, ctx, seed, occurrence=seed) for seed in range(4)]
        assert all(o.status == "ok" for o in first)
        assert [o.digest for o in first] == [_run(workload, ctx, s, occurrence=s).digest for s in range(4)]


@pytest.mark.parametrize("label", ["row_swap", "row_address_bit", "row_address_bit:0", "row_address_bit:3"])
@pytest.mark.parametrize("scheme", ["mod2_32", "mod127"])
def test_rows_written_at_other_rows_addresses_are_caught_by_their_tags_alone(scheme: str, label: str) -> None:
    """Issue 44: two whole output rows exchanged, or every row i written at i XOR 2^b, were caught 0 of 168
    times: their checksums move with them and no column sum changes. Now the row-tag check names each
    moved row (which activation row's product it holds), and it is the only check that fires."""
    workload, ctx = _ready({"scheme": scheme, "shapes": [[16, 64, 40]], "ops_per_case": 1.0e5})
    for seed in range(6):
        outcome = _run(workload, ctx, seed, faults.from_label(label, "output", 31 * seed))
        assert ctx.injected is not None and ctx.injected["value_changed"]
        assert outcome.status == "mismatch", (label, seed)
        assert outcome.detail["bad_row_tags"] >= 2
        assert (
            outcome.detail["bad_rows"]
            == outcome.detail["bad_weighted_rows"]
            == outcome.detail["bad_columns"]
            == 0
        )
        record = next(m for m in outcome.mismatches if m.check == "abft_row_tag")
        assert "holds activation row" in record.where and record.expected != record.actual
