"""The matrix fault models of the self-test (sdcscan.faults.MATRIX_KINDS) do what they say."""

from __future__ import annotations

import pytest
import torch

from sdcscan.faults import MATRIX_KINDS, FaultSpec, corrupt_, from_label


def _matrix(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return (torch.rand(6, 10, generator=g) * 100).to(dtype) + 1


@pytest.mark.parametrize("kind", MATRIX_KINDS)
def test_each_model_changes_the_matrix_and_says_so(kind):
    m = _matrix()
    before = m.clone()
    info = corrupt_(m, FaultSpec(kind, "output", seed=4))
    assert info["value_changed"] and not torch.equal(before, m)


def test_swaps_and_pairs_keep_every_row_sum_and_the_columns_say_otherwise():
    for kind in ("swap_in_row", "swap_columns"):
        m = _matrix(torch.float64)
        before = m.clone()
        info = corrupt_(m, FaultSpec(kind, "output", seed=2))
        assert torch.equal(m.sum(1), before.sum(1)) or kind == "swap_in_row"
        assert not torch.equal(m.sum(0), before.sum(0)), info
    m = _matrix(torch.int32)
    before = m.clone()
    corrupt_(m, FaultSpec("pair_in_row", "output", seed=2))
    assert torch.equal(m.sum(1), before.sum(1)) and not torch.equal(m.sum(0), before.sum(0))


def test_double_flip_of_bit_31_cancels_in_a_row_sum_mod_2_32():
    m = _matrix(torch.int32)
    before = m.clone()
    info = corrupt_(m, from_label("double_flip:31", "output", seed=9))
    diff = (m.long() - before.long()).sum(1)
    assert info["value_changed"] and int(diff.remainder(2**32).abs().max()) == 0


def test_models_stay_inside_the_data_columns():
    m = torch.zeros(4, 12, dtype=torch.int32)
    for seed in range(30):
        corrupt_(m, FaultSpec("column_offset", "output", seed=seed, param=7.0), columns=5)
    assert torch.equal(m[:, 5:], torch.zeros(4, 7, dtype=torch.int32)) and bool((m[:, :5] != 0).any())


def test_a_swap_of_equal_values_changes_nothing_and_is_not_counted():
    m = torch.ones(3, 4)
    assert not corrupt_(m, FaultSpec("swap_in_row", "output", seed=1))["value_changed"]


def test_labels():
    assert from_label(14, "output", 1) == FaultSpec("bitflip", "output", 1, bit=14)
    assert from_label("relerr:0.001", "output", 1).param == 0.001
    with pytest.raises(ValueError, match="unknown fault model"):
        from_label("melt", "output", 1)
    with pytest.raises(ValueError, match="float tensor"):
        corrupt_(torch.ones(2, 3, dtype=torch.int32), FaultSpec("relerr", "output", 1))
