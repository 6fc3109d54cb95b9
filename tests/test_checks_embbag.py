"""Pure EmbeddingBag checksum maths: dyadic tables, exact and rigorous-bound bag checks."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sdcscan.checks import embbag
from sdcscan.faults import flip_bit_

EB = torch.ops.quantized.embedding_bag_byte_rowwise_offsets


def _bag(
    packed: torch.Tensor, idx: torch.Tensor, lengths: torch.Tensor, w: torch.Tensor | None
) -> torch.Tensor:
    offsets = torch.cumsum(lengths, 0) - lengths
    return EB(packed, idx, offsets, False, 0, False, None if w is None else w.float(), None, False)


def _dyadic(rows: int, dim: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 256, (rows, dim), generator=g, dtype=torch.uint8)
    return embbag.dyadic_pack(q, torch.randint(-255, 1, (rows,), generator=g))


@st.composite
def bags(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """A small dyadic table (extremes included), bags of 0..12 lookups, optional integer weights."""
    rows, dim = draw(st.integers(1, 40)), draw(st.sampled_from([4, 8, 12]))
    packed = _dyadic(rows, dim, draw(st.integers(0, 2**31)))
    extreme = draw(st.sampled_from([None, 0, 255]))
    if extreme is not None:
        packed[:, :dim] = extreme
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    lengths = torch.randint(0, 13, (draw(st.integers(1, 8)),), generator=g)
    idx = torch.randint(0, rows, (int(lengths.sum()),), generator=g)
    w = torch.randint(1, 4, idx.shape, generator=g).float() if draw(st.booleans()) else None
    return packed, idx, lengths, w


def test_dyadic_pack_matches_fbgemm_unpack() -> None:
    """The hand-written layout is what FBGEMM reads: q·2^-7 + k·2^-7 per element."""
    q = torch.tensor([[0, 1, 255, 7]], dtype=torch.uint8)
    packed = embbag.dyadic_pack(q, torch.tensor([-3]))
    assert packed.shape == (1, 12)
    unpacked = torch.ops.quantized.embedding_bag_byte_unpack(packed)
    assert unpacked.tolist() == [[(v - 3) / 128 for v in (0, 1, 255, 7)]]


def test_split_packed_reads_fbgemm_prepack() -> None:
    """scale and bias read back from a prepacked table reproduce FBGEMM's own dequantization."""
    w = torch.randn(5, 8, generator=torch.Generator().manual_seed(0))
    packed = torch.ops.quantized.embedding_bag_byte_prepack(w)
    q, scale, bias = embbag.split_packed(packed)
    manual = q.float() * scale[:, None] + bias[:, None]
    assert torch.allclose(manual, torch.ops.quantized.embedding_bag_byte_unpack(packed), atol=1e-6)


def test_exact_row_sums_hand_worked() -> None:
    """q = [1, 2, 3, 4], k = −3: C_T + D·k = 10 − 12 = −2 (units of 2^-7), stored as int16."""
    sums = embbag.exact_row_sums(
        embbag.dyadic_pack(torch.tensor([[1, 2, 3, 4]], dtype=torch.uint8), torch.tensor([-3]))
    )
    assert sums.dtype == torch.int16 and sums.tolist() == [-2]


def test_exact_row_sums_rejects_a_non_dyadic_table() -> None:
    """A table quantized by FBGEMM has arbitrary scales: exact mode must refuse it."""
    packed = torch.ops.quantized.embedding_bag_byte_prepack(torch.randn(3, 4))
    with pytest.raises(ValueError, match="dyadic"):
        embbag.exact_row_sums(packed)


def test_exact_expected_hand_worked() -> None:
    """Row sums [5, −7]; bags [0, 1], [], [0]: [−2, 0, 5]; with weights [1, 2, 3]: [−9, 0, 15]."""
    row_sums = torch.tensor([5, -7], dtype=torch.int16)
    idx, lengths = torch.tensor([0, 1, 0]), torch.tensor([2, 0, 1])
    assert embbag.exact_expected(row_sums, idx, lengths, None).tolist() == [-2, 0, 5]
    assert embbag.exact_expected(row_sums, idx, lengths, torch.tensor([1.0, 2.0, 3.0])).tolist() == [
        -9,
        0,
        15,
    ]


def test_gamma_hand_worked() -> None:
    """γ_2 with u = 2^-24 is 2u / (1 − 2u)."""
    assert embbag.gamma(2, 2**-24) == pytest.approx(2 * 2**-24 / (1 - 2 * 2**-24), rel=1e-15)


@settings(max_examples=60, deadline=None)
@given(bags())
def test_exact_mode_identity_holds_and_output_is_exact(case: tuple) -> None:
    """Clean bags never fire, and FBGEMM's fp32 output equals the fp64 reference bit for bit."""
    packed, idx, lengths, w = case
    out = _bag(packed, idx, lengths, w)
    expected = embbag.exact_expected(embbag.exact_row_sums(packed), idx, lengths, w)
    assert not embbag.exact_bad_bags(out, expected).any()
    table = torch.ops.quantized.embedding_bag_byte_unpack(packed).double()
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
    packed, idx, lengths, w = case
    out = _bag(packed, idx, lengths, w)
    expected = embbag.exact_expected(embbag.exact_row_sums(packed), idx, lengths, w)
    element = data.draw(st.integers(0, out.numel() - 1))
    before = float(out.view(-1)[element])
    flip_bit_(out, element, data.draw(st.integers(0, 31)))
    if before != float(out.view(-1)[element]):
        assert embbag.exact_bad_bags(out, expected)[element // out.shape[1]]


@settings(max_examples=60, deadline=None)
@given(bags(), st.data())
def test_exact_mode_catches_every_flip_of_a_pooled_element(case: tuple, data: st.DataObject) -> None:
    """A flipped q byte of a row that some bag reads changes that bag's sum by w·2^b·2^-7."""
    packed, idx, lengths, w = case
    if idx.numel() == 0:
        return
    expected = embbag.exact_expected(embbag.exact_row_sums(packed), idx, lengths, w)
    row = int(idx[data.draw(st.integers(0, idx.numel() - 1))])
    dim = packed.shape[1] - 8
    flip_bit_(
        packed, row * packed.shape[1] + data.draw(st.integers(0, dim - 1)), data.draw(st.integers(0, 7))
    )
    assert embbag.exact_bad_bags(_bag(packed, idx, lengths, w), expected).any()


def test_wrong_row_fetch_is_caught_by_intended_row_sums() -> None:
    """The checksum uses the intended indices, so reading another row (with another sum) fires."""
    packed = _dyadic(50, 8, 1)
    sums = embbag.exact_row_sums(packed)
    idx, lengths = torch.tensor([3, 7, 9, 11]), torch.tensor([2, 2])
    expected = embbag.exact_expected(sums, idx, lengths, None)
    other = next(r for r in range(50) if sums[r] != sums[7])
    fetched = idx.clone()
    fetched[1] = other
    assert embbag.exact_bad_bags(_bag(packed, fetched, lengths, None), expected).tolist() == [True, False]


def test_zero_flipped_to_denormal_is_caught_by_integrality() -> None:
    """A sum absorbs 1e-45; the 2^-7 grid check does not."""
    out = torch.zeros(1, 4)
    out[0, 0] = 300.0
    flip_bit_(out, 2, 0)  # 0.0 → the smallest denormal
    assert embbag.exact_bad_bags(out, torch.tensor([300 * 128], dtype=torch.int32)).tolist() == [True]


def _realistic(rows: int, dim: int, seed: int, spread: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, dim, generator=g) * spread + torch.randn(rows, 1, generator=g) * spread * 3
    return torch.ops.quantized.embedding_bag_byte_prepack(w)


@pytest.mark.parametrize("seed", range(6))
def test_realistic_bound_is_silent_on_clean_bags(seed: int) -> None:
    """Random tables, wide and narrow ranges, long bags, one row repeated 500 times, with and without psw."""
    g = torch.Generator().manual_seed(100 + seed)
    packed = _realistic(300, 16 if seed % 2 else 64, seed, 10.0 ** (seed % 3 - 1))
    sums = embbag.realistic_row_sums(packed)
    lengths = torch.tensor([500, 1, 0, 37, 200])
    idx = torch.randint(0, 300, (int(lengths.sum()),), generator=g)
    idx[:500] = 17  # correlated rounding: the same row added 500 times
    for w in (None, torch.rand(idx.shape, generator=g) * 2 - 0.5):
        out = _bag(packed, idx, lengths, w)
        s_exp, abs_sums = embbag.realistic_expected(sums, idx, lengths, w)
        threshold = embbag.realistic_threshold(abs_sums, lengths, packed.shape[1] - 8)
        assert not embbag.realistic_bad_bags(out, s_exp, threshold).any()
        assert (threshold[lengths > 0] > 0).all()


def test_realistic_bound_catches_large_errors_and_nan() -> None:
    """An exponent-bit flip and a NaN exceed any rounding bound."""
    packed = _realistic(100, 8, 0, 1.0)
    idx, lengths = torch.arange(40), torch.tensor([20, 20])
    out = _bag(packed, idx, lengths, None)
    s_exp, abs_sums = embbag.realistic_expected(embbag.realistic_row_sums(packed), idx, lengths, None)
    threshold = embbag.realistic_threshold(abs_sums, lengths, 8)
    flip_bit_(out, 3, 29)
    out[1, 0] = float("nan")
    assert embbag.realistic_bad_bags(out, s_exp, threshold).tolist() == [True, True]


def test_all_bags_empty() -> None:
    """No lookups at all: every expected sum is 0 and an all-zero output passes."""
    row_sums = torch.tensor([5, -7], dtype=torch.int16)
    expected = embbag.exact_expected(row_sums, torch.zeros(0, dtype=torch.int64), torch.tensor([0, 0]), None)
    assert expected.tolist() == [0, 0]
    assert not embbag.exact_bad_bags(torch.zeros(2, 4), expected).any()
