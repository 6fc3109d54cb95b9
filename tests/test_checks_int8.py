"""Pure int8 ABFT maths: checksum encoding, the row, weighted-row and column checks, limits, CUDA shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sdcscan.checks import int8
from sdcscan.faults import corrupt_matrix_, flip_bit_, from_label
from sdcscan.workloads.gemm_int8.workload import MIN_K


def _product(a: torch.Tensor, w_ext: torch.Tensor) -> torch.Tensor:
    return torch._int_mm(a, w_ext.t())


def _rows_bad(c: torch.Tensor, lay: int8.Layout) -> bool:
    return bool(int8.check_rows(c, lay).bad.any())


def _columns(a: torch.Tensor, w_ext: torch.Tensor, c: torch.Tensor, n: int) -> int8.ColumnCheck:
    """The column check of product c against the A it was made from, as gemm_int8 does it."""
    digits = int8.activation_digits(int8.activation_sums(a), a.shape[0] * 255)
    expected = int8.expected_column_sums(_product(digits, w_ext), n)
    return int8.check_columns(int8.check_rows(c, int8.layout(n, "mod127")).column_sums, expected)


def _case(seed: int, m: int, k: int, n: int, scheme: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random A (m, k), W_ext and C = A @ W_ext.T."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(0, 256, (m, k), generator=g, dtype=torch.uint8)
    w_ext = int8.encode_weight(torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8), scheme)
    return a, w_ext, _product(a, w_ext)


def _verdicts(a: torch.Tensor, w_ext: torch.Tensor, c: torch.Tensor, n: int, scheme: str) -> dict[str, bool]:
    """Which of the three checks fire on c."""
    rows = int8.check_rows(c, int8.layout(n, scheme))
    return {
        "row": bool(rows.row.bad.any()),
        "weighted": bool(rows.weighted_bad.any()),
        "column": bool(_columns(a, w_ext, c, n).bad.any()),
    }


@st.composite
def operands(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor]:
    """Small u8 A (m, k) and s8 W (n, k); fills include the extremes 0/255 and -128/127."""
    # k >= 2: torch's CPU _int_mm is wrong for k = 1 on some CPUs, and gemm_int8 refuses such shapes.
    m, k, n = draw(st.integers(1, 6)), draw(st.integers(MIN_K, 24)), draw(st.integers(1, 20))
    seed = draw(st.integers(0, 2**31))
    fill_a = draw(st.sampled_from([None, 0, 255]))
    fill_w = draw(st.sampled_from([None, -128, 127, 0]))
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(0, 256, (m, k), generator=g, dtype=torch.uint8)
    w = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    if fill_a is not None:
        a.fill_(fill_a)
    if fill_w is not None:
        w.fill_(fill_w)
    return a, w


def test_balanced_digits_hand_worked() -> None:
    """128 = -127 + 1·255; -128 = 127 - 1·255; digits stay in [-127, 127]."""
    digits = int8.balanced_digits(torch.tensor([0, 128, -128, 127, 255**2]))
    assert digits.t().tolist() == [[0, 0, 0], [-127, 1, 0], [127, -1, 0], [127, 0, 0], [0, 0, 1]]


def test_encode_weight_hand_worked() -> None:
    """Column sums r = [4, -2], weighted u = 1·[1, 2] + 2·[3, -4] = [7, -6]; mod127 row (−r) mod 127."""
    w = torch.tensor([[1, 2], [3, -4]], dtype=torch.int8)
    ext = int8.encode_weight(w, "mod2_32")
    assert ext.shape == (8, 2) and ext[:2].tolist() == w.tolist()
    assert ext[2:5].tolist() == [[4, -2], [0, 0], [0, 0]]  # row checksum digits
    assert ext[5:7].tolist() == [[7, -6], [0, 0]] and not ext[7:].any()  # weighted digits, padding
    ext127 = int8.encode_weight(w, "mod127")
    assert ext127.shape == (8, 2) and ext127[2].tolist() == [123, 2]
    assert ext127[3:5].tolist() == [[7, -6], [0, 0]] and not ext127[5:].any()


def test_verify_hand_worked_row() -> None:
    """A = [1, 1]: C = [3, -1 | 2, 0, 0 | 1, 0 | pad]; weighted 1·3 + 2·(−1) = 1 = A·u; changes show."""
    w = torch.tensor([[1, 2], [3, -4]], dtype=torch.int8)
    a = torch.tensor([[1, 1]], dtype=torch.uint8)
    lay = int8.layout(2, "mod2_32")
    c = _product(a, int8.encode_weight(w, "mod2_32"))
    assert c[0, :7].tolist() == [3, -1, 2, 0, 0, 1, 0]
    check = int8.check_rows(c, lay)
    assert not check.bad.any() and check.row.data_sum.tolist() == [2] and check.row.checksum.tolist() == [2]
    assert check.weighted_sum.tolist() == [1] == check.weighted_checksum.tolist()
    assert check.column_sums.tolist() == [3, -1]
    c[0, 1] += 5
    assert int8.verify(c, 2, "mod2_32").bad.tolist() == [True] and _rows_bad(c, lay)


def test_extended_rows_pads_to_multiple_of_eight() -> None:
    """n + row checksum rows + weighted rows (2 digits up to n = 22) rounds up to a multiple of 8."""
    assert int8.extended_rows(3, "mod2_32") == 8 and int8.extended_rows(4, "mod2_32") == 16
    assert int8.extended_rows(5, "mod127") == 8 and int8.extended_rows(6, "mod127") == 16
    assert int8.extended_rows(1024, "mod2_32") == 1032  # 3 + 4 digits fit the padding n already had


def test_a_gpu_product_is_padded_to_a_multiple_of_32_columns_and_checked_as_it_was() -> None:
    """On a GPU (and the meta device the cost model counts a GPU on) the tagged activation rows and W_ext
    are padded to multiples of 32: an H200's `_int_mm` ran three times slower with a dimension 8 more than
    a multiple of 16, and the GPU profiles' inner dimension was 8,200. The wider padding is zeros, and a
    non-zero word in it is still caught; a CPU keeps 8."""
    assert int8.row_multiple(torch.device("cpu")) == 8
    assert int8.row_multiple(torch.device("meta")) == int8.row_multiple(torch.device("cuda")) == 32
    assert int8.tagged_width(8192, 2) == 8200 and int8.tagged_width(8192, 2, 32) == 8224
    assert (
        int8.extended_rows(8192, "mod2_32", 2) == 8208 and int8.extended_rows(8192, "mod2_32", 2, 32) == 8224
    )
    with pytest.raises(ValueError, match="multiple of 8"):
        int8.layout(64, "mod2_32", multiple=12)
    g = torch.Generator().manual_seed(5)
    a = torch.randint(0, 256, (6, 24), generator=g, dtype=torch.uint8)
    w = torch.randint(-128, 128, (40, 24), generator=g, dtype=torch.int8)
    w_ext = int8.encode_weight(w, "mod2_32", multiple=32)
    lay = int8.layout(40, "mod2_32", multiple=32)
    assert w_ext.shape[0] == lay.n_ext == 64 and not w_ext[lay.pad_start :].any()
    c = _product(a, w_ext)
    assert torch.equal(c[:, :40], _product(a, int8.encode_weight(w, "mod2_32"))[:, :40])
    assert not _rows_bad(c, lay)
    c[3, lay.n_ext - 1] = 1  # the last padding column: only the 32-multiple has it
    assert bool(int8.check_rows(c, lay).row.pad_nonzero[3]) and _rows_bad(c, lay)


def test_weighted_digits_follow_the_largest_weighted_sum() -> None:
    """|u| <= 128·n(n+1)/2 must fit the balanced digits; one more row than MAX_N_WEIGHTED needs a sixth."""
    assert int8.digits_needed(127) == 1 and int8.digits_needed(128) == 2
    assert int8.digits_needed(127 + 255 * 127) == 2 and int8.digits_needed(127 + 255 * 127 + 1) == 3
    assert [int8.layout(n, "mod2_32").weighted_digits for n in (1, 40, 1024, 64770)] == [2, 3, 4, 5]
    assert int8.layout(int8.MAX_N_WEIGHTED, "mod127").weighted_digits == int8.MAX_WEIGHTED_DIGITS
    with pytest.raises(ValueError, match="weighted checksum"):
        int8.layout(int8.MAX_N_WEIGHTED + 1, "mod127")


def test_weighted_checksum_is_exact_at_the_extremes() -> None:
    """All −128 weights at n = MAX_N_WEIGHTED: the 5 digits hold u = −128·n(n+1)/2 exactly."""
    n = int8.MAX_N_WEIGHTED
    w = torch.full((n, 1), -128, dtype=torch.int8)
    lay = int8.layout(n, "mod127")
    digits = int8.encode_weight(w, "mod127")[lay.weighted_start : lay.pad_start, 0].long().tolist()
    assert sum(d * 255**t for t, d in enumerate(digits)) == -int8.weighted_magnitude(n)


def test_unknown_scheme_is_rejected() -> None:
    """A typo in the scheme name fails loudly."""
    with pytest.raises(ValueError, match="unknown int8 ABFT scheme"):
        int8.checksum_rows("mod2_64")


def test_max_exact_k_is_the_int32_boundary() -> None:
    """u8×s8: 65,793 terms of 255·(−128) fit int32, 65,794 do not; s8 magnitudes alone give 131,072."""
    k = int8.max_exact_k()
    assert k == 65793
    assert k * 255 * -128 >= -(2**31) > (k + 1) * 255 * -128
    assert int8.max_exact_k(a_max=128) == 2**31 // (128 * 128)


def test_mod2_32_digits_cover_largest_n_and_reject_more() -> None:
    """All −128 weights: n = MAX_N_MOD2_32 encodes exactly, one more row does not fit 3 digits."""
    n = int8.MAX_N_MOD2_32
    w = torch.full((n, 1), -128, dtype=torch.int8)
    ext = int8.encode_weight(w, "mod2_32")
    digits = ext[n : n + 3, 0].long()
    assert int(digits[0] + 255 * digits[1] + 255**2 * digits[2]) == -128 * n
    with pytest.raises(ValueError, match="too large"):
        int8.encode_weight(torch.full((n + 1, 1), -128, dtype=torch.int8), "mod2_32")


def test_mod2_32_holds_beyond_the_int32_limit_where_mod127_breaks() -> None:
    """k past 65,793 with A = 255, W = −128 wraps C; the mod 2^32 identity survives, mod 127 need not."""
    k = int8.max_exact_k() + 4000
    a = torch.full((1, k), 255, dtype=torch.uint8)
    w = torch.full((5, k), -128, dtype=torch.int8)
    c = _product(a, int8.encode_weight(w, "mod2_32"))
    assert int(c[0, 0]) == (255 * -128 * k + 2**31) % 2**32 - 2**31  # C itself wrapped
    assert not int8.verify(c, 5, "mod2_32").bad.any()


@settings(max_examples=60, deadline=None)
@given(operands(), st.sampled_from(int8.SCHEMES))
def test_clean_products_always_verify(ops: tuple[torch.Tensor, torch.Tensor], scheme: str) -> None:
    """Every identity holds for every A and W, extremes and m = 1 included: no false positive is possible."""
    a, w = ops
    w_ext = int8.encode_weight(w, scheme)
    c = _product(a, w_ext)
    assert _verdicts(a, w_ext, c, w.shape[0], scheme) == {"row": False, "weighted": False, "column": False}


@settings(max_examples=60, deadline=None)
@given(operands(), st.sampled_from(int8.SCHEMES), st.data())
def test_any_single_bit_flip_in_c_is_caught(
    ops: tuple[torch.Tensor, torch.Tensor], scheme: str, data: st.DataObject
) -> None:
    """Data, checksum, weighted and padding columns: every bit of every int32 word, both schemes; a data
    word fails its row in both row checks and its column in the column check."""
    a, w = ops
    n, lay = w.shape[0], int8.layout(w.shape[0], scheme)
    w_ext = int8.encode_weight(w, scheme)
    c = _product(a, w_ext)
    element = data.draw(st.integers(0, c.numel() - 1))
    flip_bit_(c, element, data.draw(st.integers(0, 31)))
    row, column = divmod(element, c.shape[1])
    assert int8.check_rows(c, lay).bad[row]
    if column < n:
        rows = int8.check_rows(c, lay)
        assert rows.row.bad[row] and rows.weighted_bad[row] and _columns(a, w_ext, c, n).bad[column]


@settings(max_examples=80, deadline=None)
@given(
    operands(),
    st.sampled_from(int8.SCHEMES),
    st.sampled_from(
        [
            "swap_in_row",
            "swap_columns",
            "pair_in_row",
            "double_flip:0",
            "double_flip:31",
            "row_offset:536870912",
            "row_offset:127",
            "column_offset",
            "column_offset:127",
        ]
    ),
    st.integers(0, 2**31),
)
def test_every_matrix_fault_model_is_caught(
    ops: tuple[torch.Tensor, torch.Tensor], scheme: str, label: str, seed: int
) -> None:
    """Each model of faults.MATRIX_KINDS, on the data columns: some check fires once a value changed."""
    a, w = ops
    n = w.shape[0]
    assume(n >= 2)
    w_ext = int8.encode_weight(w, scheme)
    c = _product(a, w_ext)
    if corrupt_matrix_(c, from_label(label, "output", seed), columns=n)["value_changed"]:
        assert any(_verdicts(a, w_ext, c, n, scheme).values())


@pytest.mark.parametrize("scheme", int8.SCHEMES)
@pytest.mark.parametrize("label", ["swap_in_row", "pair_in_row", "double_flip:0"])
def test_row_neutral_faults_need_the_column_check(scheme: str, label: str) -> None:
    """Faults within one row that leave its sum unchanged (or, for two flips of bit 0, cancel half the
    time): over many seeds the row check alone misses some, the exact column check misses none."""
    missed_by_row = 0
    for seed in range(60):
        a, w_ext, c = _case(seed, 8, 64, 40, scheme)
        assert corrupt_matrix_(c, from_label(label, "output", seed), columns=40)["value_changed"]
        found = _verdicts(a, w_ext, c, 40, scheme)
        missed_by_row += not found["row"]
        assert found["column"] and found["weighted"], seed
    assert missed_by_row >= 10


@pytest.mark.parametrize(
    ("scheme", "label"),
    [
        ("mod2_32", "double_flip:31"),  # ±2^31 ± 2^31 ∈ {0, ±2^32}: 0 mod 2^32
        ("mod2_32", "row_offset:536870912"),  # 40·2^29 = 5·2^32
        ("mod127", "row_offset:127"),  # 40·127
        ("mod127", "column_offset:127"),  # 127 in every row
    ],
)
def test_faults_that_vanish_modulo_the_row_scheme_are_caught_exactly(scheme: str, label: str) -> None:
    """The modular row check never sees these; the exact column and weighted checks always do."""
    for seed in range(20):
        a, w_ext, c = _case(seed, 8, 64, 40, scheme)
        assert corrupt_matrix_(c, from_label(label, "output", seed), columns=40)["value_changed"]
        found = _verdicts(a, w_ext, c, 40, scheme)
        assert not found["row"] and found["column"] and found["weighted"], seed


def test_swapped_columns_are_caught_by_the_weighted_check_in_every_row() -> None:
    """Row sums do not move; row i's weighted sum moves by (j1 − j2)·(C[i, j2] − C[i, j1])."""
    *_, c = _case(11, 8, 64, 40, "mod2_32")
    before = c.clone()
    c[:, [3, 17]] = before[:, [17, 3]]
    rows = int8.check_rows(c, int8.layout(40, "mod2_32"))
    assert not rows.row.bad.any()
    assert rows.weighted_bad.tolist() == (before[:, 3] != before[:, 17]).tolist()
    difference = (rows.weighted_sum - rows.weighted_checksum).tolist()
    assert difference == ((3 - 17) * (before[:, 17] - before[:, 3]).long()).tolist()


def test_a_rectangle_defeats_row_and_column_sums_but_not_the_weighted_check() -> None:
    """+δ at (1, 2) and (4, 9), −δ at (1, 9) and (4, 2): every row and column sum stays the same."""
    for scheme in int8.SCHEMES:
        a, w_ext, c = _case(12, 8, 64, 40, scheme)
        for i, j, sign in [(1, 2, 1), (4, 9, 1), (1, 9, -1), (4, 2, -1)]:
            c[i, j] += sign * 1000
        assert _verdicts(a, w_ext, c, 40, scheme) == {"row": False, "weighted": True, "column": False}


def test_blind_spot_by_design_two_rows_of_second_differences() -> None:
    """What all three checks miss: (+δ, −2δ, +δ) at equally spaced columns of one row and its negation in
    another (6 coordinated errors). Sums, weighted sums and column sums are all unchanged."""
    for scheme in int8.SCHEMES:
        a, w_ext, c = _case(13, 8, 64, 40, scheme)
        for j, e in [(5, 1), (9, -2), (13, 1)]:
            c[2, j] += e * 1000
            c[6, j] -= e * 1000
        assert _verdicts(a, w_ext, c, 40, scheme) == {"row": False, "weighted": False, "column": False}


def test_every_checksum_column_bit_is_visible_mod2_32() -> None:
    """Odd digit weights (base 255): high bits of digit columns move the identity (base 256 would not)."""
    w = torch.randint(-128, 128, (9, 16), generator=torch.Generator().manual_seed(3), dtype=torch.int8)
    a = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(4), dtype=torch.uint8)
    lay = int8.layout(9, "mod2_32")
    clean = _product(a, int8.encode_weight(w, "mod2_32"))
    for col in range(9, lay.pad_start):
        for bit in range(32):
            c = clean.clone()
            flip_bit_(c, col, bit)
            rows = int8.check_rows(c, lay)
            assert (rows.row.bad if col < lay.weighted_start else rows.weighted_bad).item(), (col, bit)


@settings(max_examples=60, deadline=None)
@given(operands(), st.sampled_from(int8.SCHEMES), st.data())
def test_weight_flip_after_encoding_is_caught(
    ops: tuple[torch.Tensor, torch.Tensor], scheme: str, data: st.DataObject
) -> None:
    """A flipped W_ext bit at (j, l) changes C[:, j] by ±2^b·A[:, l]: seen unless column l of A is zero
    (mod127's row checksum row: unless every A[:, l] is 0, 127 or 254)."""
    a, w = ops
    lay = int8.layout(w.shape[0], scheme)
    w_ext = int8.encode_weight(w, scheme)
    element = data.draw(st.integers(0, w_ext.numel() - 1))
    flip_bit_(w_ext, element, data.draw(st.integers(0, 7)))
    row, column = divmod(element, w.shape[1])
    visible = a[:, column] % 127 != 0 if scheme == "mod127" and row == w.shape[0] else a[:, column] != 0
    assert _rows_bad(_product(a, w_ext), lay) == bool(visible.any())


def test_activation_corruption_is_invisible_to_every_check() -> None:
    """Negative control: corrupting A before the GEMM leaves the product self-consistent, the column
    check included when its sums come from the A that was multiplied."""
    g = torch.Generator().manual_seed(5)
    a = torch.randint(0, 256, (4, 32), generator=g, dtype=torch.uint8)
    w_ext = int8.encode_weight(torch.randint(-128, 128, (12, 32), generator=g, dtype=torch.int8), "mod2_32")
    for element in range(0, a.numel(), 7):
        corrupted = a.clone()
        flip_bit_(corrupted, element, element % 8)
        found = _verdicts(corrupted, w_ext, _product(corrupted, w_ext), 12, "mod2_32")
        assert found == {"row": False, "weighted": False, "column": False}


def test_column_check_hand_worked() -> None:
    """A = [[1, 1], [2, 0]], W = [[1, 2], [3, -4]]: C = [[3, -1], [2, 6]], column sums [5, 5] = W·[3, 1]."""
    w = torch.tensor([[1, 2], [3, -4]], dtype=torch.int8)
    a = torch.tensor([[1, 1], [2, 0]], dtype=torch.uint8)
    w_ext = int8.encode_weight(w, "mod2_32")
    c = _product(a, w_ext)
    assert int8.activation_sums(a).tolist() == [3, 1]
    check = _columns(a, w_ext, c, 2)
    assert check.data_sum.tolist() == [5, 5] == check.expected.tolist() and not check.bad.any()
    c[1, 0] += 1
    assert _columns(a, w_ext, c, 2).bad.tolist() == [True, False]


def test_exact_sums_at_the_int32_extremes() -> None:
    """Every word at −2^31 or 2^31 − 1: column sums and weighted sums equal Python's exact integers, also
    where the weighted sum is split into column chunks (n > 2,048)."""
    g = torch.Generator().manual_seed(6)
    c = torch.where(torch.rand(3, 4000, generator=g) < 0.5, -(2**31), 2**31 - 1).to(torch.int32)
    rows = c.tolist()
    data = c.double()
    assert int8.column_sums(data).tolist() == [sum(col) for col in zip(*rows, strict=True)]
    assert int8.weighted_row_sums(data).tolist() == [sum((j + 1) * x for j, x in enumerate(r)) for r in rows]
    with pytest.raises(ValueError, match="rows per block"):
        int8.column_sums(torch.zeros(1, 1, dtype=torch.float64).expand(int8.CHUNK_ROWS, 1))


def test_activation_sums_and_digits_are_exact() -> None:
    """300 rows of 255 (two int16 chunks and a remainder) sum to 76,500; base-128 digits rebuild it."""
    a = torch.full((3, 100, 5), 255, dtype=torch.uint8)
    s = int8.activation_sums(a)
    assert s.tolist() == [76_500] * 5
    digits = int8.activation_digits(s, 300 * 255)
    assert digits.dtype == torch.uint8 and int(digits.max()) <= 127 and digits.shape == (3, 5)
    assert (sum(digits[t].long() * 128**t for t in range(3))).tolist() == s.tolist()


@pytest.mark.parametrize("k", [1, 7, 64, 300])
def test_view_sums_read_off_the_row_prefix_equal_summing_the_views(k: int) -> None:
    """Views of m whole rows from any first row (numpy's generator), the first and the last included:
    two reads of the prefix give their column sums exactly, summed over several views at once."""
    rng = np.random.default_rng(k)
    rows = torch.from_numpy(rng.integers(0, 256, (257, k)).astype(np.uint8))
    prefix = int8.row_prefix(rows)
    assert prefix.dtype == torch.int32 and prefix.shape == (258, k)
    for m in (1, 2, 257):
        starts = torch.tensor(sorted({0, int(rng.integers(0, 258 - m)), 257 - m}), dtype=torch.int64)
        direct = sum(rows[int(s) : int(s) + m].long().sum(0) for s in starts)
        assert torch.equal(int8.activation_sums_of_row_views(prefix, starts, m), direct), m


def test_rows_too_many_for_an_int32_prefix_are_refused() -> None:
    """255 · R must stay below 2^31."""
    with pytest.raises(ValueError, match="too many"):
        int8.row_prefix(torch.zeros((2**23 + 2**16, 1), dtype=torch.uint8))


@pytest.mark.parametrize("rows", [1, 2, 128, 129, 16384, 16385, 2**21 + 1])
def test_row_tags_spell_each_row_index_in_valid_activations(rows: int) -> None:
    """Enough base-128 digits for every index below `rows`, each in [0, 127], read back exactly."""
    tags = int8.tags_needed(rows)
    assert 128 ** (tags - 1) <= max(rows - 1, 1) < 128**tags or tags == 1
    index = torch.tensor([0, rows // 2, rows - 1], dtype=torch.int64)
    digits = int8.row_tags(index, tags)
    assert digits.dtype == torch.uint8 and int(digits.max()) <= 127
    assert torch.equal(digits.double() @ int8.tag_places(tags), index.double())
    signed = (digits.int() - 128).double() @ int8.tag_places(tags)  # the s8 x s8 route's words
    assert torch.equal(signed + int8.signed_tag_shift(tags), index.double())


@pytest.mark.parametrize("scheme", int8.SCHEMES)
def test_tagged_rows_carry_their_tags_through_the_product_and_a_moved_row_is_caught(scheme: str) -> None:
    """A (m, k) with its row indices as tag columns, W encoded with tag readers: C's tag columns are the
    indices, every other identity holds; two rows exchanged, or a stuck row-address bit, fail exactly
    the rows that moved and no other check (their checksums moved with them)."""
    g = torch.Generator().manual_seed(4)
    m, k, n, tags = 20, 24, 12, 2
    a = torch.zeros((m, int8.tagged_width(k, tags)), dtype=torch.uint8)
    a[:, :k] = torch.randint(0, 256, (m, k), generator=g, dtype=torch.uint8)
    index = torch.arange(100, 100 + m)  # the rows' indices in a larger block
    a[:, k : k + tags] = int8.row_tags(index, tags)
    w_ext = int8.encode_weight(torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8), scheme, tags)
    lay = int8.layout(n, scheme, tags)
    assert w_ext.shape == (lay.n_ext, a.shape[1]) and lay.n_ext % int8.ROW_MULTIPLE == 0
    c = torch._int_mm(a, w_ext.t())
    expected = index.double()
    clean = int8.check_rows(c, lay, expected_tags=expected)
    assert not bool(clean.bad.any()) and torch.equal(clean.tags, expected)
    for order in ([1, 0, *range(2, m)], [i ^ 4 if i ^ 4 < m else i for i in range(m)]):
        moved = int8.check_rows(c[order], lay, expected_tags=expected)
        assert moved.tag_bad.tolist() == [i != j for i, j in enumerate(order)]
        assert not bool((moved.row.bad | moved.weighted_bad).any())  # blind without the tags
        assert torch.equal(moved.column_sums, clean.column_sums)
    with pytest.raises(ValueError, match="expected tags"):
        int8.check_rows(c, lay)


def test_plan_cuda_pads_m_and_k() -> None:
    """m ≤ 16 becomes 32, m > 16 stays; k rounds up to a multiple of 8."""
    assert int8.plan_cuda(1, 60, 48) == int8.CudaPlan(32, 64, 48)
    assert int8.plan_cuda(16, 64, 8) == int8.CudaPlan(32, 64, 8)
    assert int8.plan_cuda(17, 3200, 808) == int8.CudaPlan(17, 3200, 808)


@pytest.mark.parametrize(("m", "k", "n_ext"), [(0, 8, 8), (4, 8, 12), (4, -1, 8)])
def test_plan_cuda_rejects_bad_shapes(m: int, k: int, n_ext: int) -> None:
    """Empty dimensions and an unpadded n_ext are errors, not silent cuBLAS failures."""
    with pytest.raises(ValueError):
        int8.plan_cuda(m, k, n_ext)


@settings(max_examples=40, deadline=None)
@given(operands(), st.sampled_from(int8.SCHEMES))
def test_the_signed_product_keeps_every_row_identity_and_its_columns_shift_by_a_constant(
    ops: tuple[torch.Tensor, torch.Tensor], scheme: str
) -> None:
    """The s8 x s8 route (A xor 0x80 = A - 128) passes the row checks as it is, and its column sums are
    the u8 product's less rows x signed_column_shift."""
    a, w = ops
    w_ext = int8.encode_weight(w, scheme)
    a_s8 = int8.signed_activations(a)
    assert a_s8.dtype == torch.int8 and torch.equal(a_s8.long(), a.long() - 128)
    c_s = (a_s8.double() @ w_ext.double().t()).to(torch.int32)  # exact
    lay = int8.layout(w.shape[0], scheme)
    rows = int8.check_rows(c_s, lay)
    assert not bool(rows.bad.any())
    shift = int8.signed_column_shift(w_ext)
    assert torch.equal(
        rows.column_sums, int8.check_rows(_product(a, w_ext), lay).column_sums - a.shape[0] * shift[: lay.n]
    )
