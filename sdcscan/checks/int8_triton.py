"""The fused int8 block check as a Triton kernel: one read of each output word (sdcscan/checks/int8_block.py).

The block is read as 64-bit words, the form the fingerprint hashes: word p of a row holds columns 2p
(low half) and 2p + 1 (high half), each a signed int32 recovered by arithmetic shifts. A program takes a
strip of WORDS words down ROW_TILES tiles of ROWS rows and writes
    for each row of each tile: Σ and Σ (j + 1)· of its data columns in the strip, and whether a padding
        column in the strip is non-zero;
    for each column of the strip: Σ over the program's rows;
    the keyed sum Σ w·K mod 2^64 of its words, K = splitmix64(flat word index + 1) | 1, as
        `keyed_sums.fingerprint_keys` has them.
All of it in int64 (uint64 for the keyed sum, which wraps by design), exact: the largest sum,
|Σ (j + 1)·C[i, j]| <= n(n + 1)/2 · 2^31, stays below 2^63 for every n the weighted checksum allows.
Imported only where the kernel runs: it imports Triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdcscan.checks.fingerprint_triton import keyed


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]
def _kernel(
    words_ptr: tl.tensor,
    row_ptr: tl.tensor,
    weighted_ptr: tl.tensor,
    pad_ptr: tl.tensor,
    column_ptr: tl.tensor,
    print_ptr: tl.tensor,
    rows: tl.tensor,
    words_per_row: tl.tensor,
    n: tl.tensor,
    pad_start: tl.tensor,
    strips: tl.tensor,
    ROWS: tl.constexpr,
    WORDS: tl.constexpr,
    ROW_TILES: tl.constexpr,
) -> None:
    strip = tl.program_id(0)
    group = tl.program_id(1)
    p = (strip * WORDS + tl.arange(0, WORDS)).to(tl.int64)  # (WORDS,) word index within a row
    low_col = 2 * p  # the int32 column of each word's low half; the high half is the next one
    high_col = low_col + 1
    in_row = p < words_per_row
    low_data = low_col < n
    high_data = high_col < n
    low_pad = low_col >= pad_start
    high_pad = high_col >= pad_start
    low_sum = tl.zeros((WORDS,), dtype=tl.int64)
    high_sum = tl.zeros((WORDS,), dtype=tl.int64)
    prints = tl.zeros((WORDS,), dtype=tl.uint64)
    for tile in range(ROW_TILES):
        r = ((group * ROW_TILES + tile) * ROWS + tl.arange(0, ROWS)).to(tl.int64)  # (ROWS,)
        inside = (r[:, None] < rows) & in_row[None, :]
        index = r[:, None] * words_per_row + p[None, :]  # flat word index of the block
        w = tl.load(words_ptr + index, mask=inside, other=0)  # int64
        low = (w << 32) >> 32  # arithmetic shifts: the signed int32 of each half
        high = w >> 32
        low_sum += tl.sum(low, axis=0)
        high_sum += tl.sum(high, axis=0)
        low_d = tl.where(low_data[None, :], low, 0)
        high_d = tl.where(high_data[None, :], high, 0)
        row_in = r < rows
        out = strip * rows + r
        tl.store(row_ptr + out, tl.sum(low_d + high_d, axis=1), mask=row_in)
        weights = low_d * (low_col + 1)[None, :] + high_d * (high_col + 1)[None, :]
        tl.store(weighted_ptr + out, tl.sum(weights, axis=1), mask=row_in)
        pads = ((low != 0) & low_pad[None, :]) | ((high != 0) & high_pad[None, :])
        tl.store(pad_ptr + out, tl.max(pads.to(tl.int32), axis=1), mask=row_in)
        prints += tl.sum(keyed(w, index), axis=0)  # w is 0 outside the block: adds nothing
    n_ext = 2 * words_per_row
    column_out = group * n_ext + low_col
    tl.store(column_ptr + column_out, low_sum, mask=in_row)
    tl.store(column_ptr + column_out + 1, high_sum, mask=in_row)
    total = tl.sum(prints, axis=0)
    tl.store(print_ptr + group * strips + strip, total.to(tl.int64, bitcast=True))


def partials(
    block: torch.Tensor, n: int, pad_start: int, rows_per_tile: int, words: int, row_tiles: int, warps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch the kernel over a contiguous (rows, n_ext) int32 block, n_ext even; the partials as
    `int8_block._partials` declares them."""
    rows, n_ext = block.shape
    words_per_row = n_ext // 2
    strips = -(-words_per_row // words)
    groups = -(-rows // (rows_per_tile * row_tiles))
    row = block.new_empty((strips, rows), dtype=torch.int64)
    weighted = torch.empty_like(row)
    pad = block.new_empty((strips, rows), dtype=torch.int32)
    columns = block.new_empty((groups, n_ext), dtype=torch.int64)
    prints = block.new_empty((groups, strips), dtype=torch.int64)
    _kernel[(strips, groups)](
        block.view(torch.int64),
        row,
        weighted,
        pad,
        columns,
        prints,
        rows,
        words_per_row,
        n,
        pad_start,
        strips,
        ROWS=rows_per_tile,
        WORDS=words,
        ROW_TILES=row_tiles,
        num_warps=warps,
    )
    return row, weighted, pad, columns, prints
