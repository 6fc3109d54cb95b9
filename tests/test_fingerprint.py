"""The device-side fingerprint digest: equal bits give equal digests, any changed word a different one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sdcscan.checks.digest import Digest, Fingerprint, RepeatDigest, fingerprint_words


def _digest(*tensors: torch.Tensor) -> str:
    f = Fingerprint()
    for t in tensors:
        f.tensor(t)
    return f.hexdigest()


def test_the_sum_is_the_modular_dot_product_of_the_words_with_splitmix_keys():
    """An independent computation in numpy uint64 (defined wrap-around) gives the same sum."""
    words = np.random.default_rng(3).integers(0, 2**64, size=5000, dtype=np.uint64)
    i = np.arange(1, 5001, dtype=np.uint64)
    z = i * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    keys = (z ^ (z >> np.uint64(31))) | np.uint64(1)
    expected = int((words * keys).sum(dtype=np.uint64))
    got = int(fingerprint_words(torch.from_numpy(words.view(np.int64)))) & (2**64 - 1)
    assert got == expected


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32, torch.bfloat16, torch.float64, torch.uint8])
def test_every_bit_of_every_word_changes_the_digest(dtype: torch.dtype):
    gen = torch.Generator().manual_seed(7)
    x = (torch.randn(37, 11, generator=gen) * 100).to(dtype)  # 407 elements: bytes not a multiple of 8
    base = _digest(x)
    assert _digest(x.clone()) == base
    raw = x.view(torch.uint8).reshape(-1)
    for byte in (0, 1, raw.numel() // 2, raw.numel() - 1):
        for bit in range(8):
            y = x.clone()
            y.view(torch.uint8).reshape(-1)[byte] ^= 1 << bit
            assert _digest(y) != base, (byte, bit)


def test_order_dtype_shape_and_sequence_count():
    x = torch.arange(64, dtype=torch.int32)
    swapped = x.clone()
    swapped[[3, 40]] = swapped[[40, 3]]
    assert _digest(swapped) != _digest(x)
    assert _digest(x.view(8, 8)) != _digest(x)  # shape
    assert _digest(x.view(torch.float32)) != _digest(x)  # dtype
    assert _digest(x[:32], x[32:]) != _digest(x[32:], x[:32])
    assert Fingerprint().tensor(x).bytes(b"a").hexdigest() != Fingerprint().tensor(x).bytes(b"b").hexdigest()


def test_non_contiguous_and_empty_tensors():
    x = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    assert _digest(x.t()) == _digest(x.t().contiguous())
    assert _digest(torch.empty(0)) == _digest(torch.empty(0))
    assert _digest(torch.empty(0)) != _digest(torch.zeros(1))


def test_compensating_changes_in_many_words_are_seen():
    """+d in one word and -d in another: a plain sum would not change; keyed sums do."""
    x = torch.zeros(1 << 12, dtype=torch.int64)
    base = _digest(x)
    for a, b in ((0, 1), (5, 4000), (100, 2048)):
        y = x.clone()
        y[a], y[b] = 1 << 40, -(1 << 40)
        assert _digest(y) != base


def test_a_fingerprint_differs_from_a_byte_digest():
    """Both digest the same bits, but with different functions: the workloads that switched raised
    their data version (profile hashes), so old goldens can never be compared with new digests."""
    x = torch.arange(16, dtype=torch.int32)
    assert Fingerprint().tensor(x).hexdigest() != Digest().tensor(x).hexdigest()


def test_repeat_digest_is_the_fingerprint_of_one_output_for_a_correct_unit():
    """A unit whose repeats agree has the digest of one output; a change in any repeat changes it."""
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(1))
    repeats = RepeatDigest()
    for _ in range(4):
        repeats.add(x.clone())
    assert repeats.hexdigest() == Fingerprint().tensor(x).hexdigest()
    for struck in range(4):
        changed = RepeatDigest()
        for r in range(4):
            y = x.clone()
            if r == struck:
                y[4, 6] = torch.nextafter(y[4, 6], torch.tensor(10.0))
            changed.add(y)
        assert changed.hexdigest() != repeats.hexdigest(), struck
