"""A counter-based generator: splitmix64 of an index, the same 64 bits on every device and thread count.

Each value is a pure function of (stream, index), computed with wrapping int64 multiplies, XORs and
shifts, which every device does bit for bit alike. So a GPU draws its own inputs and keys with a few
elementwise kernels instead of waiting for a host thread, and a CPU unit draws the same bits.
(splitmix64: Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014; the
constants are those of Vigna's public-domain reference.)
"""

from __future__ import annotations

import torch

MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _signed(value: int) -> int:
    """A 64-bit word as the int64 that holds its bits."""
    value &= MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def _shr(z: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 words (torch's >> is arithmetic: it copies the sign bit)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def splitmix64(counters: torch.Tensor) -> torch.Tensor:
    """splitmix64's output for each int64 counter x: mix(x · golden), as int64 words (wrapping).

    In place on one scratch tensor: on a CPU the hashing of a large pool is bound by memory traffic."""
    z = counters * _signed(_GOLDEN)
    shifted = torch.empty_like(z)
    for bits, factor in ((30, _MIX1), (27, _MIX2), (31, None)):
        torch.bitwise_right_shift(z, bits, out=shifted)
        shifted &= (1 << (64 - bits)) - 1  # a logical shift: torch's >> copies the sign bit
        z ^= shifted
        if factor is not None:
            z *= _signed(factor)
    return z


def stream_base(seed: int) -> int:
    """Where a seed's counters start: a stream of 2^64 counters per seed, spread by one mix."""
    return _signed(splitmix64_int(seed) << 1)


def words(seed: int, count: int, device: torch.device | str) -> torch.Tensor:
    """(count,) int64: the seed's stream at counters 0 .. count - 1."""
    base = stream_base(seed)
    return splitmix64(torch.arange(count, dtype=torch.int64, device=device) + base)


def below(seed: int, count: int, bound: int, device: torch.device | str) -> torch.Tensor:
    """(count,) int64 in [0, bound): the top 63 bits of each word modulo `bound` (a bias below
    bound / 2^63, nothing a test input cares about)."""
    return _shr(words(seed, count, device), 1) % bound


def fill_below(
    seed: int, count: int, bound: int, dtype: torch.dtype, device: torch.device | str, *, chunk: int = 1 << 24
) -> torch.Tensor:
    """(count,) values in [0, bound) as `dtype` from the seed's stream, drawn `chunk` words at a time (a
    pool of 2^28 values would otherwise need 2 GB of int64 words at once).

    A word gives as many values as it holds: eight bytes where `bound` is a power of two up to 256 (a
    byte masked to the bound, exactly uniform), two 32-bit halves scaled to the bound (Lemire's multiply-
    shift, a bias below bound / 2^32) where it is below 2^31, else one value (`below`). Hashing is the
    cost on a CPU, so a byte pool takes an eighth of the work of one word per value."""
    per_word = 8 if bound <= 256 and bound & (bound - 1) == 0 else 2 if bound < 1 << 31 else 1
    out = torch.empty(count, dtype=dtype, device=device)
    base = stream_base(seed)
    step = chunk * per_word
    for start in range(0, count, step):
        size = min(step, count - start)
        first = start // per_word
        z = splitmix64(
            torch.arange(first, first + -(-size // per_word), dtype=torch.int64, device=device) + base
        )
        if per_word == 8:
            values = z.view(torch.uint8)[:size] & (bound - 1)  # little-endian bytes on CPUs and GPUs alike
        elif per_word == 2:
            halves = torch.stack([z & 0xFFFFFFFF, _shr(z, 32)], dim=1).flatten()[:size]
            values = (halves * bound) >> 32
        else:
            values = _shr(z, 1) % bound
        out[start : start + size] = values
    return out


def permutation(seed: int, size: int, device: torch.device | str) -> torch.Tensor:
    """(size,) int64, a permutation of 0 .. size - 1: the order that sorts the seed's words (a stable
    sort, so ties, if any, break by index: one answer on every device)."""
    return torch.sort(words(seed, size, device), stable=True).indices


def splitmix64_int(x: int) -> int:
    """splitmix64 of one counter, in Python integers (for a few draws the host needs as numbers)."""
    z = (x * _GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & MASK64
    return z ^ (z >> 31)


def host_below(seed: int, index: int, bound: int) -> int:
    """`below(seed, ...)[index]` as a Python integer, computed on the host without torch."""
    base = stream_base(seed) & MASK64
    return (splitmix64_int((base + index) & MASK64) >> 1) % bound
