"""sdcscan/checks/masks.py: counting a comparison's True flags exactly, without widening the whole mask."""

from __future__ import annotations

import pytest
import torch

from sdcscan.checks.masks import GROUP, count_true


@pytest.mark.parametrize("shape", [(5, 1), (3, 127), (3, 128), (2, 4, 300), (7, 1024), (2, 3, 0), (1, 8200)])
@pytest.mark.parametrize("fill", [None, True, False])
def test_count_true_is_the_sum_of_the_flags(shape: tuple[int, ...], fill: bool | None) -> None:
    """Every shape around the group size, all-True (a group of 128 must not wrap in uint8), all-False and
    random flags: the same counts as mask.sum(-1), in int64."""
    g = torch.Generator().manual_seed(sum(shape))
    mask = torch.rand(shape, generator=g) < 0.3 if fill is None else torch.full(shape, fill)
    counted = count_true(mask)
    assert counted.dtype == torch.int64 and torch.equal(counted, mask.sum(-1))


def test_count_true_writes_into_a_slice_of_a_tally() -> None:
    """`out` a slice of a larger int64 tally (matmul_golden's rows of repeats): only that slice changes."""
    tally = torch.full((4, 6), -1, dtype=torch.int64)
    mask = torch.ones((2, 6, 2 * GROUP + 5), dtype=torch.bool)
    mask[1, 2, 7] = False
    count_true(mask, out=tally[1:3])
    assert torch.equal(tally[1:3], mask.sum(-1)) and (tally[0] == -1).all() and (tally[3] == -1).all()
