"""The counter-based generator (sdcscan/checks/counter_rng.py) and the one-read helper
(sdcscan/workloads/readout.py): the same bits however and wherever they are computed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sdcscan.checks import counter_rng
from sdcscan.checks.keyed_sums import fingerprint_keys
from sdcscan.workloads.readout import float_of, read_once


def _numpy_splitmix64(counters: np.ndarray) -> np.ndarray:
    """splitmix64's mix of counter·golden, written independently in numpy's unsigned arithmetic."""
    z = counters.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def test_splitmix64_matches_an_unsigned_reference_bit_for_bit() -> None:
    """Signed int64 torch arithmetic with logical shifts gives the unsigned algorithm's words."""
    counters = np.array([0, 1, 2, 3, 2**31, 2**32 + 7, 2**62, 2**63 - 1], dtype=np.uint64)
    want = _numpy_splitmix64(counters).view(np.int64)
    got = counter_rng.splitmix64(torch.from_numpy(counters.view(np.int64)))
    assert got.tolist() == want.tolist()
    assert [counter_rng.splitmix64_int(int(c)) for c in counters] == _numpy_splitmix64(counters).tolist()


def test_fingerprint_keys_are_the_numpy_keys_they_replace() -> None:
    """Keys built by torch on the unit's device are the keys the host built before (digests unchanged)."""
    size = 1 << 12
    want = (_numpy_splitmix64(np.arange(1, size + 1, dtype=np.uint64)) | np.uint64(1)).view(np.int64)
    assert torch.equal(fingerprint_keys(size, torch.device("cpu")), torch.from_numpy(want))


@pytest.mark.parametrize("bound", [1, 2, 7, 255, 1000, 2**40])
def test_host_and_tensor_draws_agree_and_stay_in_range(bound: int) -> None:
    """A draw the host computes as a number is the same draw the device computes in a tensor."""
    drawn = counter_rng.below(12345, 200, bound, "cpu")
    assert [counter_rng.host_below(12345, i, bound) for i in range(200)] == drawn.tolist()
    assert int(drawn.min()) >= 0 and int(drawn.max()) < bound


@pytest.mark.parametrize(
    ("bound", "dtype"), [(256, torch.uint8), (16, torch.uint8), (1000, torch.int32), (2**40, torch.int64)]
)
def test_chunked_fills_and_thread_counts_change_nothing(bound: int, dtype: torch.dtype) -> None:
    """A pool drawn in chunks, or on more threads, holds the same bits as one drawn whole on one thread,
    whichever number of values a word gives (8 bytes, two halves, one), and stays in range."""
    own = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        whole = counter_rng.fill_below(7, 5003, bound, dtype, "cpu")
        chunked = counter_rng.fill_below(7, 5003, bound, dtype, "cpu", chunk=37)
        torch.set_num_threads(max(2, own))
        threaded = counter_rng.fill_below(7, 5003, bound, dtype, "cpu")
    finally:
        torch.set_num_threads(own)
    assert torch.equal(whole, chunked) and torch.equal(whole, threaded)
    assert int(whole.min()) >= 0 and int(whole.max()) < bound and int(whole.max()) > bound // 2


def test_a_byte_pool_is_the_streams_words_read_as_bytes() -> None:
    """Eight values a word, in the words' little-endian byte order: what a GPU reads from the same words."""
    words = counter_rng.words(9, 4, "cpu")
    assert torch.equal(counter_rng.fill_below(9, 32, 256, torch.uint8, "cpu"), words.view(torch.uint8))


def test_permutations_are_permutations_and_differ_by_seed() -> None:
    """Every seed gives a permutation of range(size); different seeds give different ones."""
    first, second = counter_rng.permutation(1, 1000, "cpu"), counter_rng.permutation(2, 1000, "cpu")
    assert sorted(first.tolist()) == list(range(1000)) == sorted(second.tolist())
    assert not torch.equal(first, second) and first.tolist() != list(range(1000))


def test_one_read_returns_each_part_exactly() -> None:
    """Integers (64-bit), booleans and floats (NaN and -0.0 included) come back as they were."""
    ints = torch.tensor([2**63 - 1, -(2**63), 0, 12345])
    flags = torch.tensor([True, False])
    floats = torch.tensor([1.5, float("nan"), -0.0, 1e-300], dtype=torch.float64)
    got_ints, got_flags, got_floats, empty = read_once([ints, flags, floats, torch.zeros(0)])
    assert got_ints == ints.tolist() and got_flags == [1, 0] and empty == []
    values = [float_of(w) for w in got_floats]
    assert values[0] == 1.5 and values[1] != values[1] and str(values[2]) == "-0.0" and values[3] == 1e-300
