"""Exact data for the `collective` workload: inputs whose collective results are known bit for bit.

Every rank checks every element of a collective's result bit for bit (issue 13, item 3). That needs data
whose correct result does not depend on the backend's algorithm, the ring or tree it picks, or the order
in which it adds. nccl-tests reached the same place when it dropped its tolerances: fill buffers with
integer-valued data small enough that no addition ever rounds. Two kinds of data live here:

- **Reductions** (all_reduce and reduce_scatter with SUM): `contribution` is one rank's input and
  `expected_sum` the exact result, computed apart from any float addition. See `SumBound` for the maths.
- **Copies** (all_gather, broadcast, the send/recv ring): `block` is seeded by its source rank, so a
  receiver regenerates what every source should have sent and says whose block arrived wrong.

`bitwise_equal` and `wrong_elements` compare through same-width integer views, never float `==`
(which calls -0.0 equal to +0.0 and a NaN unequal to itself).

Determinism and cost: everything is drawn on the CPU from `torch.Generator`s seeded by a hash of
(purpose, case seed, rank), then moved with `.to(device)`, so the bits are the same on every device (for
one torch version: torch does not promise its CPU random streams across versions, which is one more
reason the torch version belongs in the cohort). Drawing is single-threaded and holds a few int64
temporaries: measured on one busy core, about 80 ns per element for `contribution`, 20 for `block`
and 12 more per rank for `expected_sum`, with ~40 bytes of host memory per element at the peak. A
256 MB fp32 buffer (64 M elements) therefore takes seconds and ~2.5 GB, and its `expected_sum` over
64 ranks nearly a minute: build them once per (size, seed) in `prepare` and reuse them across repeats.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from sdcscan.errors import UsageError

SUPPORTED_DTYPES: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32, torch.int32)
INT32_CAPACITY = 2**31 - 1  # no partial sum of int32 contributions may pass this (see `sum_bound`)


@dataclass(frozen=True, slots=True)
class _Format:
    """Bit layout of one supported dtype (IEEE-style for the floats)."""

    bits: torch.dtype  # the same-width integer dtype whose view holds the raw bits
    width: int  # bits per element
    fraction_bits: int  # stored significand bits (precision p = fraction_bits + 1); 0 for int32
    emin: int  # exponent of the smallest normal power of two (floats)
    emax: int  # exponent of the largest finite power of two (floats)


_FORMATS: dict[torch.dtype, _Format] = {
    torch.bfloat16: _Format(torch.int16, 16, 7, -126, 127),
    torch.float16: _Format(torch.int16, 16, 10, -14, 15),
    torch.float32: _Format(torch.int32, 32, 23, -126, 127),
    torch.int32: _Format(torch.int32, 32, 0, 0, 0),
}
_INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True, slots=True)
class SumBound:
    """How `contribution`s over `world` ranks keep every partial sum exact.

    Element e has one scale 2^s (s in [min_scale, max_scale], drawn per element, shared by all ranks) and
    on rank r an integer mantissa m with |m| <= magnitude; the contribution is m * 2^s. Any partial sum
    over any subset of ranks, in any order or tree, is (sum of those m) * 2^s with
    |sum of m| <= ranks_per_element * magnitude <= capacity. Every integer of magnitude <= 2^p is
    representable with a p-bit significand (bf16 p=8, fp16 11, fp32 24), so capacity = 2^p and no
    addition ever rounds. s >= emin keeps every nonzero partial sum normal (>= 2^emin: nothing for a
    flush-to-zero mode to flush) and s <= emax - p keeps capacity * 2^s finite. Zero is always +0.0:
    no input is -0.0 and x + (-x) is +0.0 under round-to-nearest.

    int32 has no scale and capacity 2^31 - 1, so no partial sum overflows. We chose that over relying on
    wrap-around (which would also be order-independent, addition being associative mod 2^32) because
    signed overflow is undefined behaviour in the C/C++ of NCCL's and gloo's kernels, and because the
    expected result is then the plain integer sum. The sign and high bits are still exercised.

    With world > capacity (bf16 beyond 256 ranks, fp16 beyond 2048) element e only gets nonzero
    contributions from ranks r with r = e (mod stride), at most ranks_per_element <= capacity of them.
    """

    stride: int  # 1 unless world > capacity
    ranks_per_element: int  # K: most ranks with a nonzero contribution to one element
    magnitude: int  # M: largest |integer mantissa| of one contribution; K * M <= capacity
    capacity: int  # 2^p for floats, 2^31 - 1 for int32
    min_scale: int  # smallest power-of-two exponent of an element's scale (0 for int32)
    max_scale: int  # largest (0 for int32)


def sum_bound(world: int, dtype: torch.dtype) -> SumBound:
    """The bound that keeps a SUM of `world` ranks' contributions exact (see `SumBound`).

    Raises:
        UsageError: world < 1 or an unsupported dtype.
    """
    _check_int("world", world, 1)
    fmt = _format(dtype)
    if dtype.is_floating_point:
        capacity = 2 ** (fmt.fraction_bits + 1)
        scales = (fmt.emin, fmt.emax - fmt.fraction_bits - 1)
    else:
        capacity, scales = INT32_CAPACITY, (0, 0)
    stride = -(-world // capacity)  # ceil: world / stride <= capacity
    ranks = -(-world // stride)
    return SumBound(stride, ranks, capacity // ranks, capacity, *scales)


def contribution(
    rank: int, world: int, numel: int, dtype: torch.dtype, seed: int, *, device: torch.device | str
) -> torch.Tensor:
    """Rank `rank`'s input to a SUM all_reduce or reduce_scatter whose result is exact in any order.

    Args:
        rank: This rank, 0 <= rank < world.
        world: Number of ranks taking part.
        numel: Elements in the (1-D) buffer.
        dtype: One of SUPPORTED_DTYPES.
        seed: The case's seed; every rank of a case must pass the same one.
        device: Where the tensor goes (drawn on the CPU first, so the bits do not depend on it).

    Returns:
        (numel,) tensor of `dtype` on `device`: integer multiples of a per-element power of two.

    Raises:
        UsageError: a bad rank, world, numel, seed or dtype.
    """
    _check_sum_args(rank, world, numel, dtype, seed)
    bound = sum_bound(world, dtype)
    shared = _element_draws(numel, bound, seed)
    return _assemble(_mantissas(rank, numel, bound, shared, seed), shared.scale, dtype).to(device)


def expected_sum(
    world: int, numel: int, dtype: torch.dtype, seed: int, *, device: torch.device | str
) -> torch.Tensor:
    """The exact elementwise sum of all `world` ranks' `contribution`s.

    Computed without any float addition: the integer mantissas are summed in int64, scaled in float64
    (exact: an integer below 2^31 times a power of two) and cast to `dtype`, and the cast is checked to be exact.

    Args:
        world, numel, dtype, seed, device: As for `contribution`.

    Returns:
        (numel,) tensor of `dtype` on `device`.

    Raises:
        UsageError: a bad world, numel, seed or dtype.
        AssertionError: the result is not exact in `dtype` (a bug in this module, never a hardware fault).
    """
    _check_sum_args(0, world, numel, dtype, seed)
    bound = sum_bound(world, dtype)
    shared = _element_draws(numel, bound, seed)
    total = torch.zeros(numel, dtype=torch.int64)
    for rank in range(world):
        total += _mantissas(rank, numel, bound, shared, seed)
    if numel and int(total.abs().max()) > bound.capacity:
        raise AssertionError(f"exact_data: a {dtype} sum over {world} ranks passed {bound.capacity}")
    result = _assemble(total, shared.scale, dtype)
    if dtype.is_floating_point and not bitwise_equal(
        result.to(torch.float64), total.to(torch.float64) * _powers_of_two(shared.scale)
    ):
        raise AssertionError(f"exact_data: the {dtype} sum over {world} ranks is not exact")
    return result.to(device)


def block(
    source_rank: int, numel: int, dtype: torch.dtype, seed: int, *, device: torch.device | str
) -> torch.Tensor:
    """The block that `source_rank` sends in an all_gather, broadcast or send/recv of one case.

    Floats are random normal numbers: random sign, every exponent from the smallest normal to the
    largest finite one, random fraction bits. Zero, -0.0, subnormals, Inf and NaN are left out on
    purpose: each of them can change when a backend moves data through float arithmetic (some
    implement a gather as a sum with zeros; -0.0 + 0.0 is +0.0, flush-to-zero turns a subnormal into
    0, arithmetic may make a NaN payload canonical), while every value here survives `x + 0.0`
    unchanged in any floating-point mode, so no legitimate data path explains a bitwise difference. int32
    blocks are uniformly random 32-bit patterns.

    Args:
        source_rank: The sending rank (>= 0); each source gets its own stream.
        numel, dtype, seed, device: As for `contribution`.

    Returns:
        (numel,) tensor of `dtype` on `device`.

    Raises:
        UsageError: a bad source rank, numel, seed or dtype.
    """
    _check_int("source_rank", source_rank, 0)
    _check_int("numel", numel, 0)
    _check_int("seed", seed, None)
    fmt = _format(dtype)
    gen = _generator("block", seed, source_rank, str(dtype))
    if not dtype.is_floating_point:
        return torch.randint(-(2**31), 2**31, (numel,), generator=gen).to(torch.int32).to(device)
    exponent_bits = fmt.width - 1 - fmt.fraction_bits
    # Biased exponent field 1 .. 2^E - 2: 0 is zero or subnormal, all ones is Inf or NaN.
    exponent = torch.randint(1, 2**exponent_bits - 1, (numel,), generator=gen)
    sign_and_fraction = torch.randint(0, 2 ** (fmt.fraction_bits + 1), (numel,), generator=gen)
    sign = sign_and_fraction >> fmt.fraction_bits
    fraction = sign_and_fraction & (2**fmt.fraction_bits - 1)
    pattern = (sign << (fmt.width - 1)) | (exponent << fmt.fraction_bits) | fraction  # int64, [0, 2^width)
    return _as_dtype(pattern, fmt, dtype).to(device)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether `a` and `b` hold the same bits (-0.0 differs from +0.0; NaNs are equal only bit for bit).

    Raises:
        UsageError: different shapes or dtypes (a programming error, not a corruption).
    """
    bits_a, bits_b = _bit_views(a, b)
    return torch.equal(bits_a, bits_b)


def wrong_elements(actual: torch.Tensor, expected: torch.Tensor) -> int:
    """How many elements of `actual` differ in any bit from `expected`.

    Raises:
        UsageError: different shapes or dtypes (a programming error, not a corruption).
    """
    bits_a, bits_e = _bit_views(actual, expected)
    return int((bits_a != bits_e).sum().item())


@dataclass(frozen=True, slots=True)
class _Shared:
    """Per-element draws every rank shares (all (numel,) int64)."""

    scale: torch.Tensor  # exponent s of the element's scale 2^s
    aligned: torch.Tensor  # 1 where all ranks take the element's sign, 0 where each rank draws its own
    sign: torch.Tensor  # +1 or -1


def _element_draws(numel: int, bound: SumBound, seed: int) -> _Shared:
    """Scales and signs of a case's elements; they depend on the seed only, never on the rank."""
    gen = _generator("sum-element", seed)
    scales = bound.max_scale - bound.min_scale + 1
    # One draw per element, split into fields (cheaper than three): bit 0 aligned, bit 1 sign, rest scale.
    draw = torch.randint(0, 4 * scales, (numel,), generator=gen)
    return _Shared(scale=(draw >> 2) + bound.min_scale, aligned=draw & 1, sign=((draw >> 1) & 1) * 2 - 1)


def _mantissas(rank: int, numel: int, bound: SumBound, shared: _Shared, seed: int) -> torch.Tensor:
    """One rank's integer mantissas, (numel,) int64 with |m| <= bound.magnitude."""
    gen = _generator("sum-rank", seed, rank)
    m = torch.randint(-bound.magnitude, bound.magnitude + 1, (numel,), generator=gen)
    # Aligned elements: all ranks share a sign, so sums climb towards capacity and use the top
    # significand bits; the others cancel and go negative.
    m = torch.where(shared.aligned.bool(), m.abs() * shared.sign, m)
    if bound.stride > 1:
        m = m * ((torch.arange(numel) - rank) % bound.stride == 0)
    return m


def _assemble(mantissas: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """m * 2^s in `dtype` (exact by construction; `expected_sum` checks it)."""
    if not dtype.is_floating_point:
        return mantissas.to(dtype)
    return (mantissas.to(torch.float64) * _powers_of_two(scale)).to(dtype)


def _powers_of_two(exponents: torch.Tensor) -> torch.Tensor:
    """2^s as float64, built from its bits (exact; libm's pow need not be) for -1022 <= s <= 1023."""
    return ((exponents + 1023) << 52).view(torch.float64)


def _as_dtype(pattern: torch.Tensor, fmt: _Format, dtype: torch.dtype) -> torch.Tensor:
    """Reinterpret unsigned `fmt.width`-bit patterns held in int64 as `dtype`, without integer wrap."""
    half = 2 ** (fmt.width - 1)
    signed = torch.where(pattern >= half, pattern - 2 * half, pattern)  # the two's complement value
    return signed.to(fmt.bits).view(dtype)


def _bit_views(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Same-width integer views of `a` and `b`, on `a`'s device."""
    if a.dtype != b.dtype or a.shape != b.shape:
        raise UsageError(f"cannot compare {a.dtype} {tuple(a.shape)} with {b.dtype} {tuple(b.shape)}")
    size = a.element_size()
    if size not in _INT_OF_SIZE:
        raise UsageError(f"cannot compare {a.dtype} bit for bit: {size}-byte elements")
    return a.view(_INT_OF_SIZE[size]), b.to(a.device).view(_INT_OF_SIZE[size])


def _generator(*key: object) -> torch.Generator:
    """A CPU generator seeded by a stable hash of `key` (ints and strings), independent of other keys."""
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int.from_bytes(digest, "little") >> 1)  # 63 bits: a non-negative int64
    return gen


def _format(dtype: torch.dtype) -> _Format:
    """The layout of a supported dtype."""
    if dtype not in _FORMATS:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise UsageError(f"exact data supports {names}, not {dtype}")
    return _FORMATS[dtype]


def _check_sum_args(rank: int, world: int, numel: int, dtype: torch.dtype, seed: int) -> None:
    """Raise UsageError for arguments `contribution` and `expected_sum` cannot honour."""
    _check_int("world", world, 1)
    _check_int("rank", rank, 0)
    if rank >= world:
        raise UsageError(f"rank {rank} is outside a world of {world}")
    _check_int("numel", numel, 0)
    _check_int("seed", seed, None)
    _format(dtype)


def _check_int(name: str, value: object, minimum: int | None) -> None:
    """Raise UsageError unless `value` is an int (not a bool) of at least `minimum`."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise UsageError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise UsageError(f"{name} must be >= {minimum}, got {value}")
