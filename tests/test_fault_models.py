"""The fault models of the self-test and `--inject` (sdcscan.faults.MATRIX_KINDS, sdcscan.faults.hardware) do what they say."""

from __future__ import annotations

import itertools

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


# Fault models of how hardware fails (sdcscan/faults/hardware.py): each changes exactly the elements and
# the bit it says, on float and integer tensors.

WORD = {
    torch.float32: torch.int32,
    torch.int32: torch.int32,
    torch.float64: torch.int64,
    torch.bfloat16: torch.int16,
}


def _data(dtype, shape=(40, 70)):
    """Non-zero values (a flip of any bit of a non-zero float changes its value), both signs."""
    g = torch.Generator().manual_seed(1)
    values = torch.randint(1, 1000, shape, generator=g) * (torch.randint(0, 2, shape, generator=g) * 2 - 1)
    return values.to(dtype)


def _struck(info, shape, columns=None):
    """The (rows, columns) bool mask of the region a BIT_KINDS model reports."""
    mask = torch.zeros(shape, dtype=torch.bool)
    (r0, r1, rs), (c0, c1, cs) = info["rows"], info["columns"]
    mask[r0:r1:rs, c0:c1:cs] = True
    assert columns is None or not mask[:, columns:].any()
    return mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("kind", ["run32", "stride32", "tile8", "tile16"])
def test_flip_models_flip_one_bit_in_exactly_the_region_they_name(kind, dtype):
    for seed in range(12):
        m = _data(dtype)
        before = m.clone()
        info = corrupt_(m, from_label(kind, "output", seed), columns=64)
        region = _struck(info, m.shape, columns=64)
        assert torch.equal(m != before, region), (kind, seed, info)
        xor = m.view(WORD[dtype]) ^ before.view(WORD[dtype])
        bit = torch.tensor(1, dtype=WORD[dtype]) << info["bit"]
        assert bool((xor[region] == bit).all()) and info["changed"] == info["elements"] == int(region.sum())


def test_the_regions_are_laid_out_as_a_gpu_kernel_lays_out_its_work():
    """A run is one row's warp-aligned 32 columns; a stride every 32nd element of a row or a column;
    tiles aligned to their size; a stuck bit every row of an aligned 32-column block."""
    axes = set()
    for seed in range(40):
        run = corrupt_(_data(torch.int32), from_label("run32", "output", seed))
        assert run["rows"][1] - run["rows"][0] == 1 and run["columns"][0] % 32 == 0
        assert run["columns"][1] - run["columns"][0] == 32
        stride = corrupt_(_data(torch.int32), from_label("stride32", "output", seed))
        along_row = stride["rows"][1] - stride["rows"][0] == 1
        axes.add(along_row)
        assert (stride["columns"] if along_row else stride["rows"])[2] == 32
        for t in (8, 16):
            tile = corrupt_(_data(torch.int32), from_label(f"tile{t}", "output", seed))
            assert tile["rows"][0] % t == 0 and tile["columns"][0] % t == 0
        stuck = corrupt_(_data(torch.int32), from_label("stuck1", "output", seed))
        assert stuck["rows"] == [0, 40, 1] and stuck["columns"][0] % 32 == 0
    assert axes == {True, False}
    short = corrupt_(_data(torch.int32, (4, 20)), from_label("run32", "output", 0))
    assert short["columns"] == [0, 20, 1]  # a row shorter than a warp is struck whole


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bfloat16])
@pytest.mark.parametrize("forced", [0, 1])
def test_a_stuck_bit_changes_only_the_elements_whose_bit_differs_and_counts_them(dtype, forced):
    bits = 16 if dtype == torch.bfloat16 else 32
    for bit in (0, 3, bits - 2, bits - 1):
        m = _data(dtype)
        before = m.clone()
        info = corrupt_(m, from_label(f"stuck{forced}:{bit}", "output", bit), columns=50)
        region = _struck(info, m.shape, columns=50)
        was = (before.view(WORD[dtype]) >> bit) & 1
        expected = region & (was != forced)
        assert torch.equal(m != before, expected), (bit, info)
        assert info["changed"] == int(expected.sum()) and info["elements"] == int(region.sum())
        assert bool((((m.view(WORD[dtype]) >> bit) & 1)[region] == forced).all())


def test_a_stuck_bit_that_already_holds_its_value_changes_nothing_and_says_so():
    m = torch.full((8, 64), 4, dtype=torch.int32)  # bit 2 set everywhere, bit 3 nowhere
    info = corrupt_(m, from_label("stuck1:2", "output", 0))
    assert info["changed"] == 0 and info["value_changed"] is False and info["elements"] == 8 * 32
    assert corrupt_(m, from_label("stuck0:3", "output", 0))["value_changed"] is False
    assert torch.equal(m, torch.full((8, 64), 4, dtype=torch.int32))
    z = torch.zeros(8, 64)  # +0.0 -> -0.0 changes bits, not values
    assert corrupt_(z, from_label("stuck1:31", "output", 0))["changed"] == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.uint8, torch.bfloat16])
def test_a_burst_flips_adjacent_bits_of_one_word(dtype):
    word = {torch.uint8: torch.uint8, **WORD}[dtype]
    widths = set()
    for seed in range(30):
        m = _data(dtype).abs() if dtype == torch.uint8 else _data(dtype)
        before = m.clone()
        info = corrupt_(m, from_label("burst", "output", seed))
        low, high = info["bits"]
        widths.add(high - low)
        changed = (m != before).view(-1)
        assert changed.nonzero().flatten().tolist() == [info["element"]] and info["value_changed"]
        xor = int((m.view(word) ^ before.view(word)).view(-1)[info["element"]]) & (
            (1 << (8 * m.element_size())) - 1
        )
        assert xor == ((1 << (high - low)) - 1) << low
    assert widths <= set(range(2, 9)) and len(widths) > 3
    low, high = corrupt_(_data(torch.int32), from_label("burst:5", "output", 1))["bits"]
    assert high - low == 5
    info = corrupt_(torch.ones(4, dtype=torch.uint8), from_label("burst:8", "table", 2))
    assert info["bits"] == [0, 8]
    with pytest.raises(ValueError, match="width 9"):
        corrupt_(torch.ones(4, dtype=torch.uint8), from_label("burst:9", "table", 2))


def test_wrong_rows_fetches_a_wrong_row_for_several_spaced_lookups():
    ids = torch.arange(4096, dtype=torch.int64)[
        torch.randperm(4096, generator=torch.Generator().manual_seed(0))
    ][:240]
    before = ids.clone()
    info = corrupt_(ids, from_label("wrong_rows", "fetch", 5))
    positions = info["elements"]
    assert len(positions) == 4 and {b - a for a, b in itertools.pairwise(positions)} == {60}
    assert (ids != before).nonzero().flatten().tolist() == positions
    assert torch.equal(ids[positions] ^ before[positions], torch.full((4,), 1 << info["bit"]))
    assert int(ids.max()) < 4096  # the address bit stays inside the table's index range
    assert len(corrupt_(before.clone(), from_label("wrong_rows:8", "fetch", 5))["elements"]) == 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_wrong_rows_on_a_matrix_copies_other_rows_into_the_data_columns(dtype):
    m = _data(dtype)
    before = m.clone()
    info = corrupt_(m, from_label("wrong_rows", "output", 3), columns=64)
    rows, sources = info["rows"], info["sources"]
    assert all(r != s for r, s in zip(rows, sources, strict=True)) and len(rows) == 4
    assert torch.equal(m[rows, :64], before[sources, :64]) and torch.equal(m[:, 64:], before[:, 64:])
    untouched = [i for i in range(40) if i not in rows]
    assert torch.equal(m[untouched], before[untouched])
    with pytest.raises(ValueError, match="at least 2 rows"):
        corrupt_(torch.ones(5), from_label("wrong_rows", "output", 3))


def test_hardware_labels():
    assert from_label("tile8:30", "output", 1) == FaultSpec("tile8", "output", 1, bit=30)
    assert from_label("stuck0", "output", 1) == FaultSpec("stuck0", "output", 1)
    assert from_label("burst:4", "output", 1).param == 4.0
    assert from_label("wrong_rows:8", "fetch", 1).param == 8.0
    info = corrupt_(_data(torch.int32), from_label("run32:-1", "output", 1))
    assert info["bit"] == 31  # negative bits count from the top, as for a bit flip


@pytest.mark.parametrize("width", range(2, 9))
def test_which_bursts_a_mod_127_checksum_word_cannot_see(width):
    """The arithmetic behind gemm_int8's mod 127 burst floors: a burst flips every bit of its window,
    changing the word by Σ ±2^b; modulo 127 (2^7 ≡ 1) that is 0 for no window of 2-6 bits, for a 7-bit
    window only when all seven bits flip the same way (±127·2^s), and for some 8-bit patterns."""
    signs = itertools.product((-1, 1), repeat=width)
    vanish = [s for s in signs if sum(e << b for b, e in enumerate(s)) % 127 == 0]
    if width < 7:
        assert vanish == []
    elif width == 7:
        assert sorted(vanish) == [(-1,) * 7, (1,) * 7]
    else:
        assert vanish and all(s[0] == s[7] for s in vanish)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_row_swap_exchanges_two_whole_rows_checksum_columns_and_all(dtype):
    """A row written to another row's address moves whole: `columns` (the data) does not confine it."""
    m = _data(dtype)
    before = m.clone()
    info = corrupt_(m, from_label("row_swap", "output", 7), columns=64)
    first, second = info["rows"]
    assert first != second and info["changed"] == 2 and info["value_changed"]
    assert torch.equal(m[first], before[second]) and torch.equal(m[second], before[first])
    untouched = [i for i in range(40) if i not in (first, second)]
    assert torch.equal(m[untouched], before[untouched])


@pytest.mark.parametrize("bit", [0, 3, 5, -1])
def test_a_stuck_row_address_bit_moves_every_row_to_its_partner(bit):
    """Row i holds row i XOR 2^b wherever that row exists (40 rows: bit 5 pairs rows 0-7 with 32-39 and
    leaves 8-31 where they were); -1 is the highest address bit."""
    m = _data(torch.int32)
    before = m.clone()
    info = corrupt_(m, from_label(f"row_address_bit:{bit}", "output", 1), columns=64)
    b = info["bit"]
    assert b == (bit if bit >= 0 else 5)
    order = [i ^ (1 << b) if i ^ (1 << b) < 40 else i for i in range(40)]
    assert torch.equal(m, before[order])
    assert info["rows_moved"] == sum(1 for i, j in enumerate(order) if i != j) == info["changed"]
    with pytest.raises(ValueError, match="does not address"):
        corrupt_(before.clone(), from_label("row_address_bit:6", "output", 1))
    with pytest.raises(ValueError, match="at least 2 rows"):
        corrupt_(torch.ones(5), from_label("row_swap", "output", 3))
