"""Pure int8 ABFT maths: checksum encoding, row verification, int32 limits and CUDA shape planning."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sdcscan.checks import int8
from sdcscan.faults import flip_bit_
from sdcscan.workloads.gemm_int8 import MIN_K


def _product(a: torch.Tensor, w_ext: torch.Tensor) -> torch.Tensor:
    return torch._int_mm(a, w_ext.t())


@st.composite
def operands(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor]:
    """Small u8 A (m, k) and s8 W (n, k); fills include the extremes 0/255 and -128/127."""
    # k >= 2: torch's CPU _int_mm is wrong for k = 1 on some CPUs, and gemm_int8 refuses such shapes.
    m, k, n = draw(st.integers(1, 6)), draw(st.integers(MIN_K, 24)), draw(st.integers(1, 20))
    seed = draw(st.integers(0, 2**31))
    fill_a = draw(st.sampled_from([None, 0, 255]))
    fill_w = draw(st.sampled_from([None, -128, 127, 0]))
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(0, 256, (m, k), generator=g, dtype=torch.uint8)
    w = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    if fill_a is not None:
        a.fill_(fill_a)
    if fill_w is not None:
        w.fill_(fill_w)
    return a, w


def test_balanced_digits_hand_worked() -> None:
    """128 = -127 + 1·255; -128 = 127 - 1·255; digits stay in [-127, 127]."""
    digits = int8.balanced_digits(torch.tensor([0, 128, -128, 127, 255**2]))
    assert digits.t().tolist() == [[0, 0, 0], [-127, 1, 0], [127, -1, 0], [127, 0, 0], [0, 0, 1]]


def test_encode_weight_hand_worked() -> None:
    """Column sums [4, -2]: digit rows [4, -2], 0, 0 (mod2_32); checksum (−r) mod 127 = [123, 2] (mod127)."""
    w = torch.tensor([[1, 2], [3, -4]], dtype=torch.int8)
    ext = int8.encode_weight(w, "mod2_32")
    assert ext.shape == (8, 2) and ext[:2].tolist() == w.tolist()
    assert ext[2:5].tolist() == [[4, -2], [0, 0], [0, 0]] and not ext[5:].any()
    ext127 = int8.encode_weight(w, "mod127")
    assert ext127.shape == (8, 2) and ext127[2].tolist() == [123, 2] and not ext127[3:].any()


def test_verify_hand_worked_row() -> None:
    """A = [1, 1] against the example weight: C = [3, -1 | 2, 0, 0, pad]; one changed word is caught."""
    w = torch.tensor([[1, 2], [3, -4]], dtype=torch.int8)
    a = torch.tensor([[1, 1]], dtype=torch.uint8)
    c = _product(a, int8.encode_weight(w, "mod2_32"))
    assert c[0, :5].tolist() == [3, -1, 2, 0, 0]
    check = int8.verify(c, 2, "mod2_32")
    assert not check.bad.any() and check.data_sum.tolist() == [2] and check.checksum.tolist() == [2]
    c[0, 1] += 5
    assert int8.verify(c, 2, "mod2_32").bad.tolist() == [True]


def test_extended_rows_pads_to_multiple_of_eight() -> None:
    """n + checksum rows rounds up to a multiple of 8."""
    assert int8.extended_rows(5, "mod2_32") == 8 and int8.extended_rows(6, "mod2_32") == 16
    assert int8.extended_rows(7, "mod127") == 8 and int8.extended_rows(8, "mod127") == 16


def test_unknown_scheme_is_rejected() -> None:
    """A typo in the scheme name fails loudly."""
    with pytest.raises(ValueError, match="unknown int8 ABFT scheme"):
        int8.checksum_rows("mod2_64")


def test_max_exact_k_is_the_int32_boundary() -> None:
    """u8×s8: 65,793 terms of 255·(−128) fit int32, 65,794 do not; s8 magnitudes alone give 131,072."""
    k = int8.max_exact_k()
    assert k == 65793
    assert k * 255 * -128 >= -(2**31) > (k + 1) * 255 * -128
    assert int8.max_exact_k(a_max=128) == 2**31 // (128 * 128)


def test_mod2_32_digits_cover_largest_n_and_reject_more() -> None:
    """All −128 weights: n = MAX_N_MOD2_32 encodes exactly, one more row does not fit 3 digits."""
    n = int8.MAX_N_MOD2_32
    w = torch.full((n, 1), -128, dtype=torch.int8)
    ext = int8.encode_weight(w, "mod2_32")
    digits = ext[n : n + 3, 0].long()
    assert int(digits[0] + 255 * digits[1] + 255**2 * digits[2]) == -128 * n
    with pytest.raises(ValueError, match="too large"):
        int8.encode_weight(torch.full((n + 1, 1), -128, dtype=torch.int8), "mod2_32")


def test_mod2_32_holds_beyond_the_int32_limit_where_mod127_breaks() -> None:
    """k past 65,793 with A = 255, W = −128 wraps C; the mod 2^32 identity survives, mod 127 need not."""
    k = int8.max_exact_k() + 4000
    a = torch.full((1, k), 255, dtype=torch.uint8)
    w = torch.full((5, k), -128, dtype=torch.int8)
    c = _product(a, int8.encode_weight(w, "mod2_32"))
    assert int(c[0, 0]) == (255 * -128 * k + 2**31) % 2**32 - 2**31  # C itself wrapped
    assert not int8.verify(c, 5, "mod2_32").bad.any()


@settings(max_examples=60, deadline=None)
@given(operands(), st.sampled_from(int8.SCHEMES))
def test_clean_products_always_verify(ops: tuple[torch.Tensor, torch.Tensor], scheme: str) -> None:
    """The identity holds for every A and W, extremes included: no false positive is possible."""
    a, w = ops
    check = int8.verify(_product(a, int8.encode_weight(w, scheme)), w.shape[0], scheme)
    assert not check.bad.any()


@settings(max_examples=60, deadline=None)
@given(operands(), st.sampled_from(int8.SCHEMES), st.data())
def test_any_single_bit_flip_in_c_is_caught(
    ops: tuple[torch.Tensor, torch.Tensor], scheme: str, data: st.DataObject
) -> None:
    """Data, checksum and padding columns: every bit of every int32 word, both schemes."""
    a, w = ops
    c = _product(a, int8.encode_weight(w, scheme))
    element = data.draw(st.integers(0, c.numel() - 1))
    bit = data.draw(st.integers(0, 31))
    flip_bit_(c, element, bit)
    assert int8.verify(c, w.shape[0], scheme).bad[element // c.shape[1]]


def test_every_checksum_column_bit_is_visible_mod2_32() -> None:
    """Odd digit weights (base 255): high bits of digit columns move the identity (base 256 would not)."""
    w = torch.randint(-128, 128, (9, 16), generator=torch.Generator().manual_seed(3), dtype=torch.int8)
    a = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(4), dtype=torch.uint8)
    clean = _product(a, int8.encode_weight(w, "mod2_32"))
    for col in (9, 10, 11):
        for bit in range(32):
            c = clean.clone()
            flip_bit_(c, col, bit)
            assert int8.verify(c, 9, "mod2_32").bad.item(), (col, bit)


@settings(max_examples=40, deadline=None)
@given(operands(), st.data())
def test_weight_flip_after_encoding_is_caught_mod2_32(
    ops: tuple[torch.Tensor, torch.Tensor], data: st.DataObject
) -> None:
    """A flipped W_ext bit changes C[:, j] by A[:, l]·2^b: seen unless column l of A is all zero."""
    a, w = ops
    w_ext = int8.encode_weight(w, "mod2_32")
    element = data.draw(st.integers(0, w_ext.numel() - 1))
    flip_bit_(w_ext, element, data.draw(st.integers(0, 7)))
    bad = int8.verify(_product(a, w_ext), w.shape[0], "mod2_32").bad
    assert bool(bad.any()) == bool(a[:, element % w.shape[1]].any())


def test_activation_corruption_is_invisible_to_a_row_check() -> None:
    """Negative control: corrupting A before the GEMM leaves the product self-consistent."""
    g = torch.Generator().manual_seed(5)
    a = torch.randint(0, 256, (4, 32), generator=g, dtype=torch.uint8)
    w_ext = int8.encode_weight(torch.randint(-128, 128, (12, 32), generator=g, dtype=torch.int8), "mod2_32")
    for element in range(0, a.numel(), 7):
        corrupted = a.clone()
        flip_bit_(corrupted, element, element % 8)
        assert not int8.verify(_product(corrupted, w_ext), 12, "mod2_32").bad.any()


def test_plan_cuda_pads_m_and_k() -> None:
    """m ≤ 16 becomes 32, m > 16 stays; k rounds up to a multiple of 8."""
    assert int8.plan_cuda(1, 60, 48) == int8.CudaPlan(32, 64, 48)
    assert int8.plan_cuda(16, 64, 8) == int8.CudaPlan(32, 64, 8)
    assert int8.plan_cuda(17, 3200, 808) == int8.CudaPlan(17, 3200, 808)


@pytest.mark.parametrize(("m", "k", "n_ext"), [(0, 8, 8), (4, 8, 12), (4, -1, 8)])
def test_plan_cuda_rejects_bad_shapes(m: int, k: int, n_ext: int) -> None:
    """Empty dimensions and an unpadded n_ext are errors, not silent cuBLAS failures."""
    with pytest.raises(ValueError):
        int8.plan_cuda(m, k, n_ext)


@settings(max_examples=40, deadline=None)
@given(operands(), st.sampled_from(int8.SCHEMES))
def test_signed_padded_path_equals_unsigned_product(
    ops: tuple[torch.Tensor, torch.Tensor], scheme: str
) -> None:
    """The CUDA route (xor 0x80, padding, +128·rowsum correction) gives the same int32 words, on CPU."""
    a, w = ops
    w_ext = int8.encode_weight(w, scheme)
    plan = int8.plan_cuda(a.shape[0], a.shape[1], w_ext.shape[0])
    a_s8, w_s8 = int8.signed_operands(a, w_ext, plan)
    assert a_s8.dtype == w_s8.dtype == torch.int8
    assert a_s8.shape == (plan.m_pad, plan.k_pad) and w_s8.shape == (plan.n_ext, plan.k_pad)
    c = torch._int_mm(a_s8, w_s8.t())[: a.shape[0]] + int8.unsigned_correction(w_ext)
    assert torch.equal(c, _product(a, w_ext))
