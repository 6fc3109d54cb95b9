"""Exact data for collectives: sums exact in any order, per-source blocks, bit-for-bit comparison."""

from __future__ import annotations

import functools
import operator
import random
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sdcscan.collectives.exact_data import (
    INT32_CAPACITY,
    SUPPORTED_DTYPES,
    bitwise_equal,
    block,
    contribution,
    expected_sum,
    sum_bound,
    wrong_elements,
)
from sdcscan.errors import UsageError

WORLDS = (1, 2, 3, 4, 7, 8, 64)
FLOATS = (torch.bfloat16, torch.float16, torch.float32)
PRECISION = {torch.bfloat16: 8, torch.float16: 11, torch.float32: 24}  # significand bits p
INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}
CPU = "cpu"


def _tree_sum(parts: list[torch.Tensor], rng: random.Random) -> torch.Tensor:
    """Sum in the parts' dtype by a random pairwise tree: add two random partial sums until one is left."""
    items = list(parts)
    while len(items) > 1:
        i, j = sorted(rng.sample(range(len(items)), 2))
        total = items.pop(j) + items.pop(i)
        items.insert(rng.randrange(len(items) + 1), total)
    return items[0]


def _ordered_sum(parts: list[torch.Tensor], rng: random.Random) -> torch.Tensor:
    """Sum in the parts' dtype left to right, in a random permutation of the ranks."""
    order = list(parts)
    rng.shuffle(order)
    return functools.reduce(operator.add, order)


def _all_contributions(world: int, numel: int, dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    """Every rank's contribution of one case, on the CPU."""
    return [contribution(r, world, numel, dtype, seed, device=CPU) for r in range(world)]


def _flip(t: torch.Tensor, index: int, bit: int) -> torch.Tensor:
    """A copy of `t` with bit `bit` of element `index` flipped (through an integer view)."""
    bits = t.clone().view({2: torch.int16, 4: torch.int32}[t.element_size()])
    width = 8 * t.element_size()
    mask = 1 << bit
    bits[index] ^= mask - (2**width if mask >= 2 ** (width - 1) else 0)  # the sign bit as a signed value
    return bits.view(t.dtype)


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
@pytest.mark.parametrize("world", WORLDS)
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(-(2**40), 2**40), numel=st.integers(1, 40), rng=st.randoms(use_true_random=False))
def test_sum_of_contributions_is_exact_in_any_order_and_tree(
    dtype: torch.dtype, world: int, seed: int, numel: int, rng: random.Random
) -> None:
    """Summed in the dtype in any permutation or pairwise tree, contributions equal expected_sum bit for bit."""
    parts = _all_contributions(world, numel, dtype, seed)
    expected = expected_sum(world, numel, dtype, seed, device=CPU)
    assert bitwise_equal(_ordered_sum(parts, rng), expected)
    assert bitwise_equal(_tree_sum(parts, rng), expected)


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
@pytest.mark.parametrize("world", WORLDS)
def test_contributions_at_the_bound_sum_exactly_at_both_extreme_scales(
    dtype: torch.dtype, world: int
) -> None:
    """The worst case the bound allows (every rank at +M or -M, smallest and largest scale) never rounds."""
    bound = sum_bound(world, dtype)
    rng = random.Random(world)
    for sign in (1, -1):
        for scale in {bound.min_scale, bound.max_scale}:
            value = sign * bound.magnitude * 2.0**scale
            parts = [
                torch.tensor([value], dtype=torch.float64).to(dtype) for _ in range(bound.ranks_per_element)
            ]
            exact = torch.tensor([value * bound.ranks_per_element], dtype=torch.float64)
            assert bitwise_equal(_tree_sum(parts, rng).to(torch.float64), exact)


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
@pytest.mark.parametrize("world", WORLDS)
def test_twice_the_bound_rounds_or_overflows_in_some_order(dtype: torch.dtype, world: int) -> None:
    """With magnitudes up to 2M the sum checker above fires: the bound is tight within a factor of 2."""
    bound = sum_bound(world, dtype)
    ints = [2 * bound.magnitude] * bound.ranks_per_element
    ints[-1] -= 1  # an odd total above capacity: more significant bits than the dtype has (or int32 wraps)
    parts = [torch.tensor([v], dtype=torch.int64).to(dtype) for v in ints]
    exact = torch.tensor([sum(ints)], dtype=torch.int64)
    assert sum(ints) > bound.capacity
    assert not bitwise_equal(functools.reduce(operator.add, parts).to(torch.int64), exact)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_scale_range_is_the_widest_that_stays_normal_and_finite(dtype: torch.dtype) -> None:
    """One scale step beyond either end gives a subnormal smallest value or an infinite largest sum."""
    bound = sum_bound(1, dtype)
    info = torch.finfo(dtype)
    assert 2.0**bound.min_scale == info.tiny
    assert 2.0 ** (bound.min_scale - 1) < info.tiny
    assert torch.isfinite(torch.tensor(bound.capacity * 2.0**bound.max_scale).to(dtype))
    assert torch.isinf(torch.tensor(bound.capacity * 2.0 ** (bound.max_scale + 1)).to(dtype))
    assert bound.capacity == 2 ** PRECISION[dtype] == round(2 / info.eps)


@pytest.mark.parametrize("world", [1, 2, 7, 64, 1000])
def test_int32_sums_never_overflow_and_twice_the_bound_would_wrap(world: int) -> None:
    """int32 contributions stay below 2^31 in every partial sum (no reliance on wrap-around); 2M wraps."""
    bound = sum_bound(world, torch.int32)
    assert bound.stride == 1
    assert world * bound.magnitude <= INT32_CAPACITY < world * (bound.magnitude + 1)
    for sign in (1, -1):
        full = torch.full((world,), sign * bound.magnitude, dtype=torch.int32)
        assert int(full.sum(dtype=torch.int32)) == sign * world * bound.magnitude
    doubled = torch.full((world,), 2 * bound.magnitude, dtype=torch.int64).to(torch.int32)
    assert int(functools.reduce(operator.add, doubled)) != 2 * world * bound.magnitude


@pytest.mark.parametrize(
    ("dtype", "world"), [(torch.bfloat16, 300), (torch.bfloat16, 1000), (torch.float16, 2049)]
)
def test_worlds_beyond_the_significand_spread_ranks_over_elements_and_stay_exact(
    dtype: torch.dtype, world: int
) -> None:
    """Beyond 2^p ranks each element takes nonzero contributions from at most 2^p ranks; sums stay exact."""
    bound = sum_bound(world, dtype)
    parts = _all_contributions(world, 16, dtype, seed=9)
    nonzero = (torch.stack(parts).to(torch.float64) != 0).sum(dim=0)
    assert bound.stride > 1
    assert bound.magnitude >= 1
    assert int(nonzero.max()) <= bound.ranks_per_element <= bound.capacity
    expected = expected_sum(world, 16, dtype, seed=9, device=CPU)
    assert bitwise_equal(_tree_sum(parts, random.Random(1)), expected)
    assert bool((expected.to(torch.float64) != 0).any())


def _exponent_fields(t: torch.Tensor) -> set[int]:
    """Distinct biased exponent fields among the nonzero elements of a float tensor."""
    fraction_bits = PRECISION[t.dtype] - 1
    width = 8 * t.element_size()
    bits = t.view(INT_VIEW[t.dtype]).to(torch.int64) & (2**width - 1)
    exponent = (bits >> fraction_bits) & (2 ** (width - 1 - fraction_bits) - 1)
    return set(exponent[t.to(torch.float64) != 0].tolist())


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_contributions_spread_over_the_whole_exponent_range(dtype: torch.dtype) -> None:
    """Per-element power-of-two scales exercise exponent bits: the scales seen cover most of the range."""
    bound = sum_bound(8, dtype)
    fields = _exponent_fields(contribution(3, 8, 4096, dtype, seed=2, device=CPU))
    assert len(fields) >= 0.9 * (bound.max_scale - bound.min_scale + 1)


def _significant_bits(t: torch.Tensor) -> int:
    """The most significand bits (implicit bit included, trailing zeros not) used by a nonzero element."""
    fraction_bits = PRECISION[t.dtype] - 1
    bits = t.view(INT_VIEW[t.dtype]).to(torch.int64)[t.to(torch.float64) != 0]
    significand = (bits & (2**fraction_bits - 1)) | 2**fraction_bits
    trailing_zeros = torch.log2((significand & -significand).to(torch.float64)).round().to(torch.int64)
    return int((fraction_bits + 1 - trailing_zeros).max())


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
@pytest.mark.parametrize("world", WORLDS)
def test_sums_reach_the_top_significand_bit(dtype: torch.dtype, world: int) -> None:
    """Aligned signs push some sums past half the capacity: the result uses every significand bit."""
    expected = expected_sum(world, 256, dtype, seed=4, device=CPU)
    if dtype == torch.int32:
        assert int(expected.to(torch.int64).abs().max()) >= 2**30
    else:
        assert _significant_bits(expected) == PRECISION[dtype]


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
def test_contributions_are_reproducible_and_differ_across_ranks_and_seeds(dtype: torch.dtype) -> None:
    """Same arguments give the same bits; another rank or another seed gives mostly different elements."""
    first = contribution(1, 4, 512, dtype, seed=7, device=CPU)
    assert bitwise_equal(first, contribution(1, 4, 512, dtype, seed=7, device=torch.device("cpu")))
    assert wrong_elements(first, contribution(2, 4, 512, dtype, seed=7, device=CPU)) > 400
    assert wrong_elements(first, contribution(1, 4, 512, dtype, seed=8, device=CPU)) > 400


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
def test_blocks_are_reproducible_and_differ_across_sources_and_seeds(dtype: torch.dtype) -> None:
    """A receiver regenerates each source's block exactly; other sources and seeds give other blocks."""
    first = block(3, 1024, dtype, seed=11, device=CPU)
    assert first.shape == (1024,)
    assert first.dtype == dtype
    assert bitwise_equal(first, block(3, 1024, dtype, seed=11, device=CPU))
    for other in (block(4, 1024, dtype, seed=11, device=CPU), block(3, 1024, dtype, seed=12, device=CPU)):
        assert wrong_elements(first, other) > 1000


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_blocks_are_normal_finite_and_survive_adding_zero(dtype: torch.dtype) -> None:
    """No zero, -0.0, subnormal, Inf or NaN: every value is unchanged by `x + 0.0`."""
    values = block(0, 4096, dtype, seed=5, device=CPU)
    assert bool(torch.isfinite(values).all())
    assert bool((values.abs() >= torch.finfo(dtype).tiny).all())
    assert bitwise_equal(values + 0.0, values)


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
def test_every_bit_position_of_a_block_takes_both_values(dtype: torch.dtype) -> None:
    """Sign, every exponent bit and every fraction bit are both set and clear somewhere in a block."""
    values = block(1, 4096, dtype, seed=6, device=CPU)
    width = 8 * values.element_size()
    bits = values.view({16: torch.int16, 32: torch.int32}[width]).to(torch.int64) & (2**width - 1)
    for position in range(width):
        column = (bits >> position) & 1
        assert 0 < int(column.sum()) < len(values), position


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
def test_a_single_flipped_bit_in_any_position_is_one_wrong_element(dtype: torch.dtype) -> None:
    """wrong_elements counts one element for a flip of any bit, sign and exponent included; clean is 0."""
    expected = block(2, 8, dtype, seed=1, device=CPU)
    assert wrong_elements(expected.clone(), expected) == 0
    assert bitwise_equal(expected.clone(), expected)
    for bit in range(8 * expected.element_size()):
        actual = _flip(expected, 5, bit)
        assert wrong_elements(actual, expected) == 1, bit
        assert not bitwise_equal(actual, expected), bit


@pytest.mark.parametrize(
    ("actual", "expected", "wrong"),
    [
        ([-0.0, 1.0], [0.0, 1.0], 1),  # == would call these equal
        ([float("nan"), 1.0], [float("nan"), 1.0], 0),  # == would call these different
        ([float("inf"), -2.5], [float("inf"), -2.5], 0),
        ([1.0, 2.0], [1.0, 2.0000002384185791], 1),  # one ulp in fp32
    ],
)
def test_comparison_is_bitwise_not_float_equality(
    actual: list[float], expected: list[float], wrong: int
) -> None:
    """-0.0 differs from +0.0, identical NaNs match, one ulp counts: the compare reads bits, not values."""
    a, e = torch.tensor(actual), torch.tensor(expected)
    assert wrong_elements(a, e) == wrong
    assert bitwise_equal(a, e) == (wrong == 0)


def test_nans_with_different_payloads_differ() -> None:
    """Two NaNs with different payloads are different bits."""
    quiet = torch.tensor([float("nan")])
    other = quiet.view(torch.int32) + 1  # still a NaN: exponent all ones, another fraction
    assert bool(torch.isnan(other.view(torch.float32)).all())
    assert wrong_elements(other.view(torch.float32), quiet) == 1


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (torch.zeros(4), torch.zeros(5)),
        (torch.zeros(4), torch.zeros(4, dtype=torch.int32)),
        (torch.zeros(4, dtype=torch.complex128), torch.zeros(4, dtype=torch.complex128)),
    ],
)
def test_comparing_different_shapes_or_dtypes_is_a_usage_error(a: torch.Tensor, b: torch.Tensor) -> None:
    """A shape or dtype mismatch is a programming error, never counted as corrupt elements."""
    with pytest.raises(UsageError):
        wrong_elements(a, b)
    with pytest.raises(UsageError):
        bitwise_equal(a, b)


@pytest.mark.parametrize(
    "call",
    [
        lambda: contribution(4, 4, 8, torch.float32, 0, device=CPU),
        lambda: contribution(-1, 4, 8, torch.float32, 0, device=CPU),
        lambda: contribution(0, 0, 8, torch.float32, 0, device=CPU),
        lambda: contribution(0, 4, -1, torch.float32, 0, device=CPU),
        lambda: contribution(0, 4, 8, torch.float64, 0, device=CPU),
        lambda: contribution(0, 4, 8, torch.float32, 1.5, device=CPU),
        lambda: contribution(True, 4, 8, torch.float32, 0, device=CPU),
        lambda: expected_sum(0, 8, torch.int32, 0, device=CPU),
        lambda: block(-1, 8, torch.float16, 0, device=CPU),
        lambda: block(0, 8, torch.int8, 0, device=CPU),
        lambda: sum_bound(4, torch.float64),
    ],
    ids=[
        "rank=world",
        "rank<0",
        "world=0",
        "numel<0",
        "float64",
        "float seed",
        "bool rank",
        "sum world=0",
        "source<0",
        "int8 block",
        "bound float64",
    ],
)
def test_bad_arguments_are_usage_errors(call: Callable[[], object]) -> None:
    """Arguments the generators cannot honour raise UsageError (exit 2), not a traceback deep in torch."""
    with pytest.raises(UsageError):
        call()


def test_empty_buffers_are_allowed() -> None:
    """numel 0 gives empty tensors (a size sweep may start at zero)."""
    assert contribution(0, 2, 0, torch.bfloat16, 0, device=CPU).shape == (0,)
    assert expected_sum(2, 0, torch.bfloat16, 0, device=CPU).shape == (0,)
    assert block(0, 0, torch.int32, 0, device=CPU).shape == (0,)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
def test_cuda_tensors_have_the_same_bits_as_cpu_ones(dtype: torch.dtype) -> None:
    """The device argument only moves data: CUDA gets the CPU's bits, and comparisons work across devices."""
    for make in (
        lambda device: contribution(1, 8, 1000, dtype, 3, device=device),
        lambda device: expected_sum(8, 1000, dtype, 3, device=device),
        lambda device: block(5, 1000, dtype, 3, device=device),
    ):
        on_gpu = make("cuda")
        assert on_gpu.device.type == "cuda"
        assert bitwise_equal(on_gpu.cpu(), make(CPU))
        assert wrong_elements(on_gpu, make(CPU)) == 0
