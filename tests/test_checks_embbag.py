"""Pure EmbeddingBag checksum maths: layouts, dyadic tables, the exact check and the two-level realistic
check (variance trigger, rigorous recompute) on 8- and 4-bit tables of every realistic family."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sdcscan.checks.embbag import exact, packing, realistic
from sdcscan.checks.embbag import table_families as tables
from sdcscan.faults import flip_bit_

UNPACK = {8: torch.ops.quantized.embedding_bag_byte_unpack, 4: torch.ops.quantized.embedding_bag_4bit_unpack}
BITS = list(packing.BITS)


def _bag(
    packed: torch.Tensor, idx: torch.Tensor, lengths: torch.Tensor, w: torch.Tensor | None, bits: int = 8
) -> torch.Tensor:
    offsets = torch.cumsum(lengths, 0) - lengths
    return packing.embedding_bag(packed, bits, idx, offsets, None if w is None else w.float())


def _dyadic(rows: int, dim: int, seed: int, bits: int = 8) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q_max = packing.layout(bits).q_max
    q = torch.randint(0, q_max + 1, (rows, dim), generator=g, dtype=torch.uint8)
    return packing.dyadic_pack(q, torch.randint(-q_max, 1, (rows,), generator=g), bits)


@st.composite
def bags(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, int]:
    """A small dyadic table (extremes included), bags of 0..12 lookups, optional integer weights."""
    bits = draw(st.sampled_from(BITS))
    rows, dim = draw(st.integers(1, 40)), draw(st.sampled_from([8, 16, 24]))
    packed = _dyadic(rows, dim, draw(st.integers(0, 2**31)), bits)
    extreme = draw(st.sampled_from([None, 0, 255]))
    if extreme is not None:
        packed[:, : packing.packed_dim(packed, bits) // packing.layout(bits).per_byte] = extreme
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    lengths = torch.randint(0, 13, (draw(st.integers(1, 8)),), generator=g)
    idx = torch.randint(0, rows, (int(lengths.sum()),), generator=g)
    w = torch.randint(1, 4, idx.shape, generator=g).float() if draw(st.booleans()) else None
    return packed, idx, lengths, w, bits


# ---------------------------------------------------------------------------------------------------
# Layouts


@pytest.mark.parametrize("bits", BITS)
def test_split_packed_reads_fbgemm_prepack(bits: int) -> None:
    """q, scale and bias read back from torch's prepack reproduce its own dequantization: 8-bit rows end
    in fp32 scale and bias, 4-bit rows hold element 2k in the low nibble and end in fp16 scale, bias."""
    w = torch.randn(5, 8, generator=torch.Generator().manual_seed(0))
    packed = tables.quantize(w, bits)
    assert packed.shape == ((5, 16) if bits == 8 else (5, 8))
    q, scale, bias = packing.split_packed(packed, bits)
    manual = q.float() * scale[:, None] + bias[:, None]
    assert torch.allclose(manual, UNPACK[bits](packed), atol=1e-6)
    assert packing.packed_dim(packed, bits) == 8


@pytest.mark.parametrize("bits", BITS)
def test_dyadic_pack_matches_fbgemm_unpack(bits: int) -> None:
    """The hand-written layout is what FBGEMM reads: q·2^-7 + k·2^-7 per element, fp16 exact too."""
    q = torch.tensor([[0, 1, 15, 7]], dtype=torch.uint8)
    packed = packing.dyadic_pack(q, torch.tensor([-3]), bits)
    assert packed.shape == ((1, 12) if bits == 8 else (1, 6))
    assert UNPACK[bits](packed).tolist() == [[(v - 3) / 128 for v in (0, 1, 15, 7)]]


def test_layout_rejects_other_widths() -> None:
    with pytest.raises(ValueError, match="bits"):
        packing.layout(2)


def test_exact_row_sums_hand_worked() -> None:
    """q = [1, 2, 3, 4], k = −3: C_T + D·k = 10 − 12 = −2 (units of 2^-7), stored as int16."""
    for bits in BITS:
        packed = packing.dyadic_pack(
            torch.tensor([[1, 2, 3, 4]], dtype=torch.uint8), torch.tensor([-3]), bits
        )
        sums = exact.exact_row_sums(packed, bits)
        assert sums.dtype == torch.int16 and sums.tolist() == [-2]


@pytest.mark.parametrize("bits", BITS)
def test_exact_row_sums_rejects_a_non_dyadic_table(bits: int) -> None:
    """A table quantized by FBGEMM has arbitrary scales: exact mode must refuse it."""
    with pytest.raises(ValueError, match="dyadic"):
        exact.exact_row_sums(tables.quantize(torch.randn(3, 8), bits), bits)


def test_exact_expected_hand_worked() -> None:
    """Row sums [5, −7]; bags [0, 1], [], [0]: [−2, 0, 5]; with weights [1, 2, 3]: [−9, 0, 15]."""
    row_sums = torch.tensor([5, -7], dtype=torch.int16)
    idx, lengths = torch.tensor([0, 1, 0]), torch.tensor([2, 0, 1])
    assert exact.exact_expected(row_sums, idx, lengths, None).tolist() == [-2, 0, 5]
    weighted = exact.exact_expected(row_sums, idx, lengths, torch.tensor([1.0, 2.0, 3.0]))
    assert weighted.tolist() == [-9, 0, 15]


# ---------------------------------------------------------------------------------------------------
# Exact mode


@settings(max_examples=60, deadline=None)
@given(bags())
def test_exact_mode_identity_holds_and_output_is_exact(case: tuple) -> None:
    """Clean bags never fire, and FBGEMM's fp32 output equals the fp64 reference bit for bit."""
    packed, idx, lengths, w, bits = case
    out = _bag(packed, idx, lengths, w, bits)
    expected = exact.exact_expected(exact.exact_row_sums(packed, bits), idx, lengths, w)
    assert not exact.exact_bad_bags(out, expected).any()
    table = UNPACK[bits](packed).double()
    ref = torch.nn.functional.embedding_bag(
        idx,
        table,
        torch.cumsum(lengths, 0) - lengths,
        mode="sum",
        per_sample_weights=None if w is None else w.double(),
    )
    assert torch.equal(out.double(), ref)


@settings(max_examples=60, deadline=None)
@given(bags(), st.data())
def test_exact_mode_catches_every_value_changing_output_flip(case: tuple, data: st.DataObject) -> None:
    """Any bit of any output element: detected whenever the value changes (+0.0 → −0.0 does not)."""
    packed, idx, lengths, w, bits = case
    out = _bag(packed, idx, lengths, w, bits)
    expected = exact.exact_expected(exact.exact_row_sums(packed, bits), idx, lengths, w)
    element = data.draw(st.integers(0, out.numel() - 1))
    before = float(out.view(-1)[element])
    flip_bit_(out, element, data.draw(st.integers(0, 31)))
    if before != float(out.view(-1)[element]):
        assert exact.exact_bad_bags(out, expected)[element // out.shape[1]]


@settings(max_examples=60, deadline=None)
@given(bags(), st.data())
def test_exact_mode_catches_every_flip_of_a_pooled_element(case: tuple, data: st.DataObject) -> None:
    """A flipped bit of a q byte (8-bit) or of either nibble of a byte (4-bit) of a row that some bag
    reads changes that bag's sum by w·2^b·2^-7."""
    packed, idx, lengths, w, bits = case
    if idx.numel() == 0:
        return
    expected = exact.exact_expected(exact.exact_row_sums(packed, bits), idx, lengths, w)
    row = int(idx[data.draw(st.integers(0, idx.numel() - 1))])
    body = packed.shape[1] - packing.layout(bits).meta_bytes
    flip_bit_(
        packed, row * packed.shape[1] + data.draw(st.integers(0, body - 1)), data.draw(st.integers(0, 7))
    )
    assert exact.exact_bad_bags(_bag(packed, idx, lengths, w, bits), expected).any()


@pytest.mark.parametrize("bits", BITS)
def test_wrong_row_fetch_is_caught_by_intended_row_sums(bits: int) -> None:
    """The checksum uses the intended indices, so reading another row (with another sum) fires."""
    packed = _dyadic(50, 8, 1, bits)
    sums = exact.exact_row_sums(packed, bits)
    idx, lengths = torch.tensor([3, 7, 9, 11]), torch.tensor([2, 2])
    expected = exact.exact_expected(sums, idx, lengths, None)
    other = next(r for r in range(50) if sums[r] != sums[7])
    fetched = idx.clone()
    fetched[1] = other
    assert exact.exact_bad_bags(_bag(packed, fetched, lengths, None, bits), expected).tolist() == [
        True,
        False,
    ]


def test_zero_flipped_to_denormal_is_caught_by_integrality() -> None:
    """A sum absorbs 1e-45; the 2^-7 grid check does not."""
    out = torch.zeros(1, 4)
    out[0, 0] = 300.0
    flip_bit_(out, 2, 0)  # 0.0 → the smallest denormal
    assert exact.exact_bad_bags(out, torch.tensor([300 * 128], dtype=torch.int32)).tolist() == [True]


def test_the_fp32_gather_equals_the_integer_one_where_sums_stay_below_2_24() -> None:
    """The papers' per-lookup form, as cheap as torch makes it (an fp32 EmbeddingBag over the row sums,
    used by scripts/bench_abft_int8.py): the integer path's S_exp wherever no bag sum can reach 2^24."""
    g = torch.Generator().manual_seed(5)
    row_sums = exact.exact_row_sums(_dyadic(300, 16, 2), 8)
    lengths = torch.randint(0, 9, (50,), generator=g, dtype=torch.int32)
    idx = torch.randint(0, row_sums.numel(), (int(lengths.sum()),), generator=g, dtype=torch.int32)
    weights = torch.randint(1, 4, idx.shape, generator=g).float()
    offsets = torch.cumsum(lengths, 0, dtype=torch.int32) - lengths
    fast = exact.exact_expected_fp32(row_sums.float().unsqueeze(1), idx, offsets, weights)
    assert torch.equal(fast, exact.exact_expected(row_sums, idx.long(), lengths.long(), weights))
    assert exact.fp32_sums_exact(4080, 1370, 3) and not exact.fp32_sums_exact(4080, 1371, 3)


def test_all_bags_empty() -> None:
    """No lookups at all: every expected sum is 0 and an all-zero output passes."""
    row_sums = torch.tensor([5, -7], dtype=torch.int16)
    expected = exact.exact_expected(row_sums, torch.zeros(0, dtype=torch.int64), torch.tensor([0, 0]), None)
    assert expected.tolist() == [0, 0]
    assert not exact.exact_bad_bags(torch.zeros(2, 4), expected).any()


# ---------------------------------------------------------------------------------------------------
# Realistic mode: the premise of the rigorous bound


def _sequential_fp32(
    packed: torch.Tensor, bits: int, idx: torch.Tensor, lengths: torch.Tensor, w: torch.Tensor | None
) -> torch.Tensor:
    """FBGEMM's reference order in numpy: members one at a time, buf = fma(w·scale, q, buf + w·bias)."""
    q, scale, bias = (t.numpy() for t in packing.split_packed(packed, bits))
    out, pos = [], 0
    for length in lengths.tolist():
        buf = np.zeros(q.shape[1], np.float32)
        for t in range(length):
            r, weight = int(idx[pos + t]), np.float32(1.0 if w is None else w[pos + t])
            sc, bi = np.float32(weight * scale[r]), np.float32(weight * bias[r])
            shifted = (buf + bi).astype(np.float32)
            # fma: sc·q is exact in fp64 and one rounding of a sum to fp64 then fp32 equals the fp32 fma
            # except at rare double-rounding ties, which these random tables do not hit
            buf = (np.float64(sc) * q[r].astype(np.float64) + shifted.astype(np.float64)).astype(np.float32)
        pos += length
        out.append(buf)
    return torch.from_numpy(np.stack(out))


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("weighted", [False, True])
def test_cpu_kernel_adds_members_one_at_a_time_in_bag_order(bits: int, weighted: bool) -> None:
    """The premise of `running_bound`: torch's CPU kernels are bit-identical to FBGEMM's sequential
    reference (torch's CUDA kernel is sequential per bag as well, by its source)."""
    g = torch.Generator().manual_seed(bits + weighted)
    packed = tables.quantize(
        torch.randn(300, 24, generator=g) * torch.exp(torch.randn(300, 1, generator=g)), bits
    )
    lengths = torch.randint(0, 40, (12,), generator=g)
    idx = torch.randint(0, 300, (int(lengths.sum()),), generator=g)
    w = torch.rand(idx.shape, generator=g) * 2 - 0.5 if weighted else None
    assert torch.equal(_bag(packed, idx, lengths, w, bits), _sequential_fp32(packed, bits, idx, lengths, w))


def _realistic_case(
    family: str, bits: int, kind: str, weighted: bool, seed: int, bags: int = 48, dim: int = 32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    g = torch.Generator().manual_seed(seed)
    rows = 512
    packed = (
        tables.mixed_tables(g, rows, dim, [bits])[bits]
        if family == "mixed"
        else tables.quantize(tables.float_table(family, rows, dim, g), bits)
    )
    lengths = torch.randint(0, 120, (bags,), generator=g)
    lengths[0], lengths[1] = 0, 1
    total = int(lengths.sum())
    idx = (
        torch.randint(0, rows, (total,), generator=g)
        if kind == "uniform"
        else tables.zipf_indices(total, rows, g)
    )
    if kind == "repeat":  # every member of a bag reads the bag's first row: correlated roundings
        starts = torch.cumsum(lengths, 0) - lengths
        idx = torch.repeat_interleave(idx[starts.clamp(max=total - 1)], lengths)
    w = torch.rand(total, generator=g) * 2 - 0.5 if weighted else None  # negative weights too
    return packed, idx, lengths, w


@pytest.mark.parametrize("family", [*tables.FAMILIES, "mixed"])
@pytest.mark.parametrize("bits", BITS)
def test_realistic_check_is_silent_on_clean_bags_of_every_family(family: str, bits: int) -> None:
    """No bag is confirmed, even when every bag is sent to the recompute (the bound is rigorous), for
    uniform, zipf and single-row-repeated indices, with and without weights."""
    for seed, (kind, weighted) in enumerate(
        [(k, w) for k in ("uniform", "zipf", "repeat") for w in (False, True)]
    ):
        packed, idx, lengths, w = _realistic_case(family, bits, kind, weighted, seed)
        stats = realistic.row_stats(packed, bits, weighted=weighted)
        out = _bag(packed, idx, lengths, w, bits)
        verdict = realistic.realistic_check(out, packed, stats, idx, lengths, w)
        assert not verdict.bad.any() and verdict.corrupt_rows == 0, (kind, weighted)
        everything = torch.ones(lengths.shape, dtype=torch.bool)
        confirmed, _ = realistic.confirm_bags(out, packed, stats, idx, lengths, w, everything)
        assert not confirmed.any(), (kind, weighted)


@pytest.mark.parametrize("bits", BITS)
def test_rows_of_one_constant_value_never_confirm(bits: int) -> None:
    """The worst case for the trigger's model (every element rounds alike): it may fire, the recompute
    must not confirm."""
    g = torch.Generator().manual_seed(3)
    packed = tables.quantize(tables.constant_rows(64, 16, g) * 1e3, bits)
    lengths = torch.tensor([500, 37, 1, 200])
    idx = torch.randint(0, 64, (int(lengths.sum()),), generator=g)
    idx[:500] = 5
    stats = realistic.row_stats(packed, bits, weighted=False)
    out = _bag(packed, idx, lengths, None, bits)
    everything = torch.ones(lengths.shape, dtype=torch.bool)
    assert not realistic.confirm_bags(out, packed, stats, idx, lengths, None, everything)[0].any()


def test_running_bound_covers_the_error_and_is_tight() -> None:
    """On a bag of 100 large, cancelling members the bound exceeds the fp32 result's real error, and is
    over 10× tighter than the a-priori bound γ_{2L+2}·Σ_t A_t that holds for any summation order (the
    running bound follows the partial sums of the order the kernels use)."""
    g = torch.Generator().manual_seed(5)
    packed = tables.quantize(torch.randn(64, 16, generator=g) * 1e3, 8)
    idx, lengths = torch.randint(0, 64, (100,), generator=g), torch.tensor([100])
    out = _bag(packed, idx, lengths, None)
    members, present = realistic._members(torch.tensor([0]), lengths)
    reference, bound = realistic.bag_reference(packed[idx[members].flatten()], 8, present, None)
    assert ((out.double() - reference).abs() <= bound).all()
    q, scale, bias = packing.split_packed(packed[idx], 8)
    magnitudes = (scale.double().abs()[:, None] * q.double() + bias.double().abs()[:, None]).sum(0)
    n_u = (2 * 100 + 2) * realistic.U32
    a_priori = n_u / (1 - n_u) * magnitudes
    assert (bound < a_priori / 10).all()


def test_diff_pattern_is_balanced_and_fixed() -> None:
    """±1 in equal numbers (a 0 when D is odd): a change common to every element cancels."""
    for dim in (4, 16, 63):
        pattern = realistic.diff_pattern(dim)
        assert float(pattern.sum()) == 0 and set(pattern.tolist()) <= {-1.0, 0.0, 1.0}
        assert int((pattern == 0).sum()) == dim % 2
        assert torch.equal(pattern, realistic.diff_pattern(dim))


# ---------------------------------------------------------------------------------------------------
# Realistic mode: firing


def _load_path_flip(
    packed: torch.Tensor, bits: int, idx: torch.Tensor, member: int, byte: int, bit: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The op reads a corrupted copy of the member's row (memory keeps the intended one)."""
    copy = packed[idx[member]].clone().unsqueeze(0)
    flip_bit_(copy, byte, bit)
    fetched = idx.clone()
    fetched[member] = packed.shape[0]
    return torch.cat([packed, copy]), fetched


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("family", ["normal", "student_t", "lm_like", "mixed"])
def test_high_bit_flips_and_wrong_rows_are_confirmed(bits: int, family: str) -> None:
    """The top bits of a quantized value (8-bit: 4..7; 4-bit: the nibble's bit 3) and a fetch of row
    r XOR 2^k are confirmed in every bag tried, and only there."""
    packed, idx, lengths, w = _realistic_case(family, bits, "uniform", True, 11, bags=16)
    stats = realistic.row_stats(packed, bits, weighted=True)
    starts = (torch.cumsum(lengths, 0) - lengths).tolist()
    high = [4, 5, 6, 7] if bits == 8 else [3, 7]
    for b in range(2, 16):
        member = starts[b] + int(lengths[b]) // 2
        table, fetched = _load_path_flip(packed, bits, idx, member, (3 * b) % 8, high[b % len(high)])
        bad = realistic.realistic_check(
            _bag(table, fetched, lengths, w, bits), packed, stats, idx, lengths, w
        ).bad
        assert bad.nonzero().flatten().tolist() == [b], b
        wrong = idx.clone()
        wrong[member] ^= 1 << (b % 9)
        bad = realistic.realistic_check(
            _bag(packed, wrong, lengths, w, bits), packed, stats, idx, lengths, w
        ).bad
        assert bad.nonzero().flatten().tolist() == [b], b


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("family", ["normal", "lm_like", "row_scales", "mixed"])
def test_the_trigger_sees_changes_a_few_times_the_rigorous_resolution(bits: int, family: str) -> None:
    """An output element moved by 3× its rigorous rounding bound is flagged and confirmed in every bag:
    the cheap trigger's reach is within a small factor of what any rigorous check can claim."""
    packed, idx, lengths, _ = _realistic_case(family, bits, "uniform", False, 12, bags=64)
    lengths.clamp_(min=20)  # bags of 20..119 lookups
    idx = torch.randint(0, packed.shape[0], (int(lengths.sum()),), generator=torch.Generator().manual_seed(1))
    out = _bag(packed, idx, lengths, None, bits)
    members, present = realistic._members(torch.cumsum(lengths, 0) - lengths, lengths)
    reference, bound = realistic.bag_reference(packed[idx[members].flatten()], bits, present, None)
    bags = torch.arange(64)
    element = torch.randint(0, out.shape[1], (64,), generator=torch.Generator().manual_seed(2))
    out[bags, element] = (reference[bags, element] + 3 * bound[bags, element]).float()
    stats = realistic.row_stats(packed, bits, weighted=False)
    assert realistic.realistic_check(out, packed, stats, idx, lengths, None).bad.all()


@pytest.mark.parametrize("bits", BITS)
def test_a_row_corrupted_in_memory_is_named_by_its_fingerprint(bits: int) -> None:
    """When the table itself changed, the recompute reads the corrupted row too; the fingerprint of the
    intended bytes still condemns the bag."""
    packed, idx, lengths, _ = _realistic_case("normal", bits, "uniform", False, 4, bags=8)
    stats = realistic.row_stats(packed, bits, weighted=False)
    flip_bit_(packed, int(idx[int(lengths[:2].sum())]) * packed.shape[1], 7)  # bag 2's first member
    verdict = realistic.realistic_check(
        _bag(packed, idx, lengths, None, bits), packed, stats, idx, lengths, None
    )
    assert verdict.bad[2] and verdict.corrupt_rows >= 1


@pytest.mark.parametrize("bits", BITS)
def test_a_wrong_bias_is_seen_by_the_plain_checksum(bits: int) -> None:
    """The lowest exponent bit of a row's bias moves every element of the row by the same amount, which
    cancels in the signed checksum; the plain one sees it."""
    packed, idx, lengths, _ = _realistic_case("normal", bits, "uniform", False, 6, bags=8)
    stats = realistic.row_stats(packed, bits, weighted=False)
    member = int(lengths[:3].sum())  # bag 3's first member
    # little-endian: fp32 bit 23 is bit 7 of the bias's third byte; fp16 bit 10 is bit 2 of its last
    byte, bit = (packed.shape[1] - 2, 7) if bits == 8 else (packed.shape[1] - 1, 2)
    table, fetched = _load_path_flip(packed, bits, idx, member, byte, bit)
    bad = realistic.realistic_check(
        _bag(table, fetched, lengths, None, bits), packed, stats, idx, lengths, None
    ).bad
    assert bad.nonzero().flatten().tolist() == [3]


def test_non_finite_and_empty_bag_outputs_are_confirmed() -> None:
    """NaN, ±Inf and anything in an empty bag's output exceed every bound."""
    packed, idx, lengths, _ = _realistic_case("normal", 8, "uniform", False, 2, bags=6)
    stats = realistic.row_stats(packed, 8, weighted=False)
    out = _bag(packed, idx, lengths, None)
    out[0, 0] = 1e-30  # bag 0 is empty
    out[2, 1] = float("nan")
    out[3, 2] = float("inf")
    out[4, 3] = float("-inf")
    assert realistic.realistic_check(out, packed, stats, idx, lengths, None).bad.tolist() == [
        True,
        False,
        True,
        True,
        True,
        False,
    ]


# ---------------------------------------------------------------------------------------------------
# Realistic mode: the blind spot


def test_a_change_below_the_rounding_bound_is_not_claimed() -> None:
    """Changing one output element by less than its rigorous rounding bound is not confirmed, even when
    the recompute runs: the check never calls rounding-sized differences a fault."""
    g = torch.Generator().manual_seed(8)
    packed = tables.quantize(torch.randn(64, 16, generator=g), 8)
    idx, lengths = torch.randint(0, 64, (80,), generator=g), torch.tensor([80])
    out = _bag(packed, idx, lengths, None)
    members, present = realistic._members(torch.tensor([0]), lengths)
    reference, bound = realistic.bag_reference(packed[idx[members].flatten()], 8, present, None)
    nudged = out.clone()
    nudged[0, 5] = float(reference[0, 5]) + 0.5 * float(bound[0, 5])  # a real change of several ulps
    assert nudged[0, 5] != out[0, 5]
    stats = realistic.row_stats(packed, 8, weighted=False)
    everything = torch.ones(1, dtype=torch.bool)
    assert not realistic.confirm_bags(nudged, packed, stats, idx, lengths, None, everything)[0].any()
    nudged[0, 5] = float(reference[0, 5]) + 2 * float(bound[0, 5])
    assert realistic.confirm_bags(nudged, packed, stats, idx, lengths, None, everything)[0].all()


def test_a_flip_in_a_near_constant_row_is_below_the_arithmetic() -> None:
    """A row of one value with noise 1e-6 gets a quantization step of ~1e-8 of its value, so even its top
    q bit moves the element by less than the rounding of a bag it sits in: not caught, by design. A row
    of exactly one value gets scale 0, and its q bits change nothing at all."""
    g = torch.Generator().manual_seed(9)
    floats = torch.randn(32, 16, generator=g) * 0.1
    floats[:2] = tables.constant_rows(2, 16, g)  # row 0 exact, row 1 noisy
    packed = tables.quantize(floats, 8)
    assert packing.split_packed(packed, 8)[1][0] == 0.0
    stats = realistic.row_stats(packed, 8, weighted=False)
    lengths = torch.tensor([60])
    idx = torch.randint(2, 32, (60,), generator=g)
    for row in (0, 1):
        idx[30] = row
        table, fetched = _load_path_flip(packed, 8, idx, 30, 3, 7)
        out = _bag(table, fetched, lengths, None)
        assert not realistic.realistic_check(out, packed, stats, idx, lengths, None).bad.any()
        if row == 0:
            assert torch.equal(out, _bag(packed, idx, lengths, None))
