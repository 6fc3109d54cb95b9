"""Exact-mode checksums read off prefix sums over a fixed id pool (sdcscan/checks/embbag/id_pool.py):
equal to bag sums taken directly, through sums that wrap past 2^31, chunk boundaries, empty bags and
weights; and the check's reused buffers carry nothing from one batch to the next."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from sdcscan.checks.embbag import exact, id_pool


def _direct(
    row_sums: np.ndarray, ids: np.ndarray, w: np.ndarray | None, start: int, lengths: list[int]
) -> list[int]:
    """Each bag's Σ w·row_sums[id] over pool[start:], in Python integers, as a signed 32-bit value."""
    found, at = [], start
    for length in lengths:
        span = slice(at, at + length)
        total = int((row_sums[ids[span]].astype(object) * (1 if w is None else w[span].astype(object))).sum())
        found.append((total + 2**31) % 2**32 - 2**31)
        at += length
    return found


@pytest.mark.parametrize("chunk", [7, 1000, 1 << 22])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.int16, torch.int32])
def test_prefix_differences_are_the_bag_sums(
    monkeypatch: pytest.MonkeyPatch, chunk: int, weighted: bool, dtype: torch.dtype
) -> None:
    """Heavy-tailed row sums (numpy's generator, not the workload's), a pool whose running sum passes
    2^31 several times, bags of 0 to 40 lookups at random starts, the pool's last position included."""
    monkeypatch.setattr(id_pool, "PREFIX_CHUNK", chunk)
    rng = np.random.default_rng(11)
    limit = 2**15 - 1 if dtype == torch.int16 else 2**20
    row_sums = np.clip(rng.standard_t(2, 5000) * limit / 8, -limit, limit).astype(np.int64)
    row_sums[:50] = limit  # rows the pool reads often below: the running sum wraps
    ids = np.concatenate([rng.integers(0, 50, 20_000), rng.integers(0, 5000, 20_000)])
    w = rng.integers(1, 4, ids.size) if weighted else None
    prefix = id_pool.pool_prefix(
        torch.from_numpy(row_sums).to(dtype),
        torch.from_numpy(ids).to(torch.int32),
        None if w is None else torch.from_numpy(w).float(),
    )
    assert prefix.dtype == torch.int32 and prefix.numel() == ids.size + 1
    for start, lengths in [
        (0, rng.integers(0, 41, 200).tolist()),
        (int(rng.integers(1, 30_000)), rng.integers(0, 41, 200).tolist()),
        (ids.size - 45, [0, 5, 40, 0]),
    ]:
        ends = torch.tensor(np.cumsum(lengths), dtype=torch.int64)
        bounds = torch.cat([ends.new_zeros(1), ends])
        got = id_pool.expected_at(prefix, start, bounds)
        assert got.dtype == torch.int32
        assert got.tolist() == _direct(row_sums, ids, w, start, lengths)


def test_a_changed_pool_changes_the_prefix_from_that_position_on() -> None:
    """Prefix sums of another pool (one id changed) differ exactly from the position after it."""
    row_sums = torch.tensor([3, -8, 100], dtype=torch.int16)
    ids = torch.tensor([0, 1, 2, 2, 1], dtype=torch.int32)
    prefix = id_pool.pool_prefix(row_sums, ids, None)
    assert prefix.tolist() == [0, 3, -5, 95, 195, 187]
    changed = ids.clone()
    changed[2] = 0
    other = id_pool.pool_prefix(row_sums, changed, None)
    assert (other != prefix).nonzero().flatten().tolist() == [3, 4, 5]


def test_wrap32_is_modular_into_the_signed_range() -> None:
    values = torch.tensor([0, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32 + 5, -(2**40) + 3])
    assert id_pool.wrap32(values).tolist() == [((v + 2**31) % 2**32) - 2**31 for v in values.tolist()]


@given(st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=64))
def test_wrap32_agrees_with_pythons_remainder_on_any_int64(values: list[int]) -> None:
    """The bitwise form is the floored remainder for negatives too (hypothesis draws across the range)."""
    got = id_pool.wrap32(torch.tensor(values, dtype=torch.int64)).tolist()
    assert got == [((v + 2**31) % 2**32) - 2**31 for v in values]


@pytest.mark.parametrize("block_bytes", [None, 16 * 4 * 3, 16 * 4, 1 << 20])
def test_reused_buffers_keep_nothing_from_a_bad_batch_and_follow_the_shape(block_bytes: int | None) -> None:
    """One Scratch across batches, whole or in blocks of 3 bags (the last one shorter), of 1, or of more
    than a batch: a clean batch after a NaN and an off-grid one passes, a batch of another shape gets
    buffers of its own, and every verdict equals that of fresh buffers over the whole batch."""
    scratch = exact.Scratch(block_bytes)
    clean = torch.arange(-64, 64, dtype=torch.float32).reshape(8, 16) / 128
    expected = (clean * 128).sum(1).to(torch.int32)
    nan = clean.clone()
    nan[2, 3] = float("nan")
    off = clean.clone()
    off[7, 0] += 2**-9  # in the last, shorter block of 3
    wrong = expected.clone()
    wrong[6] += 1
    wide = torch.ones(3, 32) / 128
    batches = [
        (clean, expected),
        (nan, expected),
        (off, expected),
        (clean, wrong),
        (clean, expected),
        (wide, torch.full((3,), 32, dtype=torch.int32)),
    ]
    verdicts = [exact.exact_bad_bags(out, exp, scratch).nonzero().flatten().tolist() for out, exp in batches]
    assert verdicts == [[], [2], [7], [6], [], []]
    assert verdicts == [exact.exact_bad_bags(out, exp).nonzero().flatten().tolist() for out, exp in batches]
