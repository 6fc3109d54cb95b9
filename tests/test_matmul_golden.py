"""`matmul_golden`: exact references, bitwise mismatch records with XOR masks."""

from __future__ import annotations

import torch

from sdcscan.workloads.matmul_golden import bitwise_mismatches, golden_reference


def test_golden_reference_matches_hand_worked_product():
    a = torch.tensor([[1, 2], [3, 4]])
    b = torch.tensor([[5, 6], [7, 8]])
    assert golden_reference(a, b).tolist() == [[19, 22], [43, 50]]


def test_low_precision_products_of_small_integers_are_exact_in_every_dtype():
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-8, 9, (32, 512), generator=g)
    b = torch.randint(-8, 9, (512, 24), generator=g)
    ref = golden_reference(a, b).to(torch.float32)
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        assert torch.equal(a.to(dtype) @ b.to(dtype), ref.to(dtype)), dtype


def test_bitwise_mismatches_record_index_values_and_xor_mask():
    expected = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float32)
    out = expected.clone()
    out[1, 0] = -3.0  # sign bit
    found, count = bitwise_mismatches(out, expected, "float32", repeat=2)
    assert count == 1
    (m,) = found
    assert m.where == "float32 out[1, 0] (repeat 2)"
    assert (m.expected, m.actual, m.mask) == ("3.0", "-3.0", "0x80000000")


def test_bitwise_mismatches_count_every_bad_element_but_record_a_few():
    expected = torch.zeros(64, 64, dtype=torch.float16)
    out = torch.ones(64, 64, dtype=torch.float16)
    found, count = bitwise_mismatches(out, expected, "float16", repeat=0)
    assert count == 64 * 64 and len(found) == 8
    assert found[0].mask == "0x3c00"
