"""gemm_fp's block check as one Triton kernel: each output read once for its row tiles, its column tiles,
their verdicts and its fingerprint (sdcscan/checks/tile_verdicts.py says what it computes and why the
order of its sums does not matter). Imported only where a kernel runs: it imports Triton."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdcscan.checks.fingerprint_triton import keyed

# Triton's types of an output's bits and values, by the output's dtype: its bits are loaded as the
# integer of its width (the words the fingerprint keys) and reinterpreted as its float format.
BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}
_TYPES = {
    torch.bfloat16: (tl.bfloat16, tl.uint16),
    torch.float16: (tl.float16, tl.uint16),
    torch.float32: (tl.float32, tl.uint32),
}
_ACC = {torch.float32: tl.float32, torch.float64: tl.float64}
_INF = tl.constexpr(float("inf"))
_TINY = tl.constexpr(1e-300)  # the floor of a threshold a ratio divides by, as CheckResult.ratio_tensor's
_LARGEST = tl.constexpr(1.7976931348623157e308)  # an infinite ratio of a finite residual reads as this there


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]
def _judge(sums: tl.tensor, expected: tl.tensor, t: tl.tensor, ok: tl.tensor) -> tuple[tl.tensor, tl.tensor]:
    """(failing, |d|/t) of each checksum where `ok`, as vabft.judged and CheckResult.ratio_tensor give
    them: NaN-safe, a residual fails unless it is provably within its threshold; a NaN residual's ratio is
    inf, and an infinite one the largest float64."""
    magnitude = tl.abs(sums - expected).to(tl.float64)
    bad = (~(magnitude <= t)) & ok
    ratio = tl.where(magnitude == magnitude, tl.minimum(magnitude / tl.maximum(t, _TINY), _LARGEST), _INF)
    return bad, tl.where(ok, ratio, 0.0)


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]
def _kernel(
    bits_ptr: tl.tensor,
    rows_ptr: tl.tensor,
    row_t_ptr: tl.tensor,
    cols_ptr: tl.tensor,
    col_t_ptr: tl.tensor,
    row_part_ptr: tl.tensor,
    col_part_ptr: tl.tensor,
    row_flag_ptr: tl.tensor,
    col_flag_ptr: tl.tensor,
    ratio_ptr: tl.tensor,
    print_ptr: tl.tensor,
    repeats: tl.tensor,
    m: tl.tensor,
    n: tl.tensor,
    row_sums: tl.tensor,
    col_sums: tl.tensor,
    FLOAT: tl.constexpr,
    UINT: tl.constexpr,
    ACC: tl.constexpr,
    PER_WORD: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    TILE: tl.constexpr,
) -> None:
    """Program (row block, column block) of a stack of `repeats` (m, n) outputs, for each repeat r: the
    sum of each row tile (TILE columns) and column tile (TILE rows) it holds, judged against the expected
    sums and thresholds; its share of each row's and column's total; a flag per row and column it failed
    in; its largest |d|/t; and the keyed sum of its 64-bit words."""
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    mb = tl.num_programs(0)
    nb = tl.num_programs(1)
    i = pm * BM + tl.arange(0, BM)
    j = pn * BN + tl.arange(0, BN)
    in_rows = i < m
    in_cols = j < n
    row_tile = pn * (BN // TILE) + tl.arange(0, BN // TILE)  # along a row, the tiles of TILE columns
    col_tile = pm * (BM // TILE) + tl.arange(0, BM // TILE)  # along a column, the tiles of TILE rows
    row_ok = in_rows[:, None] & (row_tile < n // TILE)[None, :]  # (BM, BN // TILE)
    col_ok = (col_tile < m // TILE)[:, None] & in_cols[None, :]  # (BM // TILE, BN)
    at_row = i[:, None].to(tl.int64) * row_sums + row_tile[None, :]
    at_col = j[None, :].to(tl.int64) * col_sums + col_tile[:, None]
    element = i[:, None].to(tl.int64) * n + j[None, :]
    inside = in_rows[:, None] & in_cols[None, :]
    # the index of each of this program's words within its output (a word never straddles two rows: n is
    # a multiple of TILE, and TILE of PER_WORD)
    word = (i[:, None].to(tl.int64) * n + pn * BN) // PER_WORD + tl.arange(0, BN // PER_WORD)[None, :]
    lanes = tl.arange(0, PER_WORD).to(tl.uint64)
    shifts = tl.full((PER_WORD,), 1, tl.uint64) << (lanes * (64 // PER_WORD))
    for r in range(repeats):
        bits = tl.load(bits_ptr + r * m.to(tl.int64) * n + element, mask=inside, other=0)
        c = bits.to(FLOAT, bitcast=True).to(ACC)
        row_sum = tl.sum(tl.reshape(c, (BM, BN // TILE, TILE)), axis=2)
        col_sum = tl.sum(tl.reshape(c, (BM // TILE, TILE, BN)), axis=1)
        expect_rows = tl.load(rows_ptr + at_row, mask=row_ok, other=0.0)
        t_rows = tl.load(row_t_ptr + at_row, mask=row_ok, other=1.0)
        row_bad, row_ratio = _judge(row_sum, expect_rows, t_rows, row_ok)
        expect_cols = tl.load(cols_ptr + at_col, mask=col_ok, other=0.0)
        t_cols = tl.load(col_t_ptr + at_col, mask=col_ok, other=1.0)
        col_bad, col_ratio = _judge(col_sum, expect_cols, t_cols, col_ok)
        at = r * m.to(tl.int64) + i
        tl.store(row_part_ptr + at * nb + pn, tl.sum(tl.where(row_ok, row_sum, 0.0), axis=1), mask=in_rows)
        tl.store(row_flag_ptr + at * nb + pn, tl.max(row_bad.to(tl.int8), axis=1), mask=in_rows)
        at = r * n.to(tl.int64) + j
        tl.store(col_part_ptr + at * mb + pm, tl.sum(tl.where(col_ok, col_sum, 0.0), axis=0), mask=in_cols)
        tl.store(col_flag_ptr + at * mb + pm, tl.max(col_bad.to(tl.int8), axis=0), mask=in_cols)
        program = (r * mb + pm) * nb + pn
        tl.store(
            ratio_ptr + program, tl.maximum(tl.max(tl.max(row_ratio, 1), 0), tl.max(tl.max(col_ratio, 1), 0))
        )
        lanes_bits = tl.reshape(bits.to(UINT, bitcast=True).to(tl.uint64), (BM, BN // PER_WORD, PER_WORD))
        words = tl.sum(lanes_bits * shifts[None, None, :], axis=2)  # disjoint bit fields: a sum is an or
        keyed_sums = keyed(words.to(tl.int64, bitcast=True), word)  # a word outside is 0 and adds nothing
        tl.store(print_ptr + program, tl.sum(tl.sum(keyed_sums, axis=1), axis=0).to(tl.int64, bitcast=True))


def partials(
    outs: torch.Tensor,
    expected: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    block: tuple[int, int],
    tile: int,
    warps: int,
) -> tuple[torch.Tensor, ...]:
    """The kernel's partials for a contiguous (R, m, n) stack `outs` and `expected` = (rows, row
    thresholds, columns, column thresholds) as `vabft.Expected` holds them: (row shares (R, m, nb), column
    shares (R, n, mb), row flags (R, m, nb) int8, column flags (R, n, mb) int8, ratios (R, mb, nb) float64,
    keyed sums (R, mb, nb) int64), mb and nb the programs along m and n."""
    rows, row_t, cols, col_t = expected
    repeats, m, n = outs.shape
    bm, bn = block
    mb, nb = -(-m // bm), -(-n // bn)
    acc = rows.dtype
    float_type, uint_type = _TYPES[outs.dtype]
    made = (
        outs.new_empty((repeats, m, nb), dtype=acc),
        outs.new_empty((repeats, n, mb), dtype=acc),
        outs.new_empty((repeats, m, nb), dtype=torch.int8),
        outs.new_empty((repeats, n, mb), dtype=torch.int8),
        outs.new_empty((repeats, mb, nb), dtype=torch.float64),
        outs.new_empty((repeats, mb, nb), dtype=torch.int64),
    )
    _kernel[(mb, nb)](
        outs.view(BITS[outs.dtype]),
        rows,
        row_t,
        cols,
        col_t,
        *made,
        repeats,
        m,
        n,
        rows.shape[1],
        cols.shape[1],
        FLOAT=float_type,
        UINT=uint_type,
        ACC=_ACC[acc],
        PER_WORD=8 // outs.element_size(),
        BM=bm,
        BN=bn,
        TILE=tile,
        num_warps=warps,
    )
    return made
