"""The sums every int8 check of a block of outputs starts from, by torch ops or by one fused kernel.

A block of C_ext (rows, n_ext) int32 is checked from five sums (sdcscan/checks/int8.py says what each
check makes of them):
    rows: (rows,) int64 Σ_{j<n} C[i, j], exactly;
    weighted: (rows,) int64 Σ_{j<n} (j + 1)·C[i, j], exactly;
    columns: (n,) int64 Σ_i C[i, j], exactly;
    pad_nonzero: (rows,) bool, a column at or beyond `pad_start` not zero;
    fingerprint: () int64, `digest.fingerprint_words` of the whole block (its keyed sum mod 2^64).

`reference` computes them by torch ops on any device: one fp64 conversion of the data columns, a GEMM
and a GEMV, a keyed product of the block's 64-bit words with a key vector as long as the block, and a
comparison of the padding. On a GPU that reads each int32 word about 11 times (issue 42: 59% of an
8192³ GEMM's time on an H200, by the cost model). The fused kernel (`int8_triton.py`) reads each word
once and gives the same integers. Every sum is exact in int64: |C| <= 2^31, fewer than 2^22 rows, and
the weighted row sum at most n(n + 1)/2 · 2^31 < 2^63 for n up to MAX_N_WEIGHTED. The fingerprint's
keys K_i = splitmix64(i + 1) | 1 are computed where the word is read, not read from memory.

The fused kernel is a Triton kernel, registered as the operator `sdcscan::int8_block_partials` so that
the cost model counts it as the one kernel it is (its meta implementation gives the shapes). It runs
where `triton_kernels.choose` takes it for gemm_int8's `check_kernel`: by default on a GPU, where an
H200 matched it bit for bit against `reference` (scripts/check_fused.py, run by scripts/gpu_check.sh).
On a CPU it runs in Triton's interpreter (TRITON_INTERPRET=1), which is how the tests hold it to
`reference` here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sdcscan.checks.digest import fingerprint_words
from sdcscan.checks.limits import CHUNK_ROWS, FP64_EXACT, WORD

# Tile of the fused kernel: ROWS rows × WORDS 64-bit words (2·WORDS int32 columns), ROW_TILES tiles down
# a column strip per program of NUM_WARPS warps. Each program writes one partial per row per strip and
# one per column per ROWS·ROW_TILES rows: at 8192 x 8224 that is 2.3 MB of row partials and 2.1 MB of
# column partials beside the block's 269 MB. On an H200 the first tile, 16 rows by 4 warps, ran at 745
# GB/s: compiled for sm_90 it holds 255 registers a thread and spills 248 bytes, so an SM keeps 8 warps.
# 8 rows by 8 warps (8 words a thread) compile to 120 registers and no spill (cuobjdump
# --dump-resource-usage), twice the warps an SM keeps; the rows a program covers are the same 256.
# Not yet timed on a GPU (scripts/check_fused.py prints both paths).
ROWS = 8
WORDS = 256
ROW_TILES = 32
NUM_WARPS = 8


@dataclass(frozen=True, slots=True)
class BlockSums:
    """The five sums of one block of int8 outputs (module docstring)."""

    rows: torch.Tensor
    weighted: torch.Tensor
    columns: torch.Tensor
    pad_nonzero: torch.Tensor
    fingerprint: torch.Tensor


def reference(
    block: torch.Tensor, n: int, pad_start: int, coefficients: torch.Tensor | None = None
) -> BlockSums:
    """The sums by torch ops (the path every device takes unless the fused kernel is asked for).

    Args:
        block: (rows, n_ext) int32, fewer than CHUNK_ROWS rows.
        n: data columns.
        pad_start: first padding column.
        coefficients: `row_sum_coefficients(n)` on the block's device, built once by a caller that
            sums many blocks; built here otherwise.
    """
    if coefficients is None:
        coefficients = row_sum_coefficients(n, block.device)
    data = block[:, :n].double()  # (rows, n) exact: int32 words are doubles
    sums = (data @ coefficients).to(torch.int64)  # (rows, 1 + chunks), exact integers
    return BlockSums(
        rows=sums[:, 0],
        weighted=sums[:, 1:].sum(1),
        columns=column_sums(data),
        pad_nonzero=(block[:, pad_start:] != 0).any(1),
        fingerprint=fingerprint_words(block),
    )


def agrees_on_a_small_block(device: torch.device) -> bool:
    """The fused kernel against `reference` on a few rows of every kind of word (data at the int32
    extremes, checksum columns, non-zero padding), on `device`: what a workload runs once at start-up."""
    n, pad_start, n_ext = 40, 44, 64
    g = torch.Generator().manual_seed(42)
    block = torch.randint(-(2**31), 2**31, (ROWS + 3, n_ext), generator=g, dtype=torch.int64).to(torch.int32)
    block[:, pad_start:] = 0
    block[1, n_ext - 1] = 7  # a padding word
    block[2, :n] = torch.iinfo(torch.int32).min
    block = block.to(device)
    got, want = fused(block, n, pad_start), reference(block, n, pad_start)
    return all(torch.equal(getattr(got, f), getattr(want, f)) for f in BlockSums.__dataclass_fields__)


def position_weights(n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(n,) int64 weights 1..n of the weighted row check: distinct (swaps show), non-zero (all columns do)."""
    return torch.arange(1, n + 1, dtype=torch.int64, device=device)


def row_sum_coefficients(n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(n, 1 + chunks) fp64: a column of ones, then the position weights j + 1 of each chunk of columns
    (zero elsewhere), so that one GEMM of a block's data columns gives its exact row sums and the
    partial sums of its weighted row sums (`check_rows`).

    Chunks are fewer than 2^22/n columns wide, so Σ_chunk (j + 1)·|word| < 2^53: every partial sum of a
    column of the product is an integer a double holds, in any summation order (zeros add nothing).
    """
    width = max(1, (FP64_EXACT - 1) // (n * WORD))  # Σ_{chunk} (j + 1)·|word| <= width·n·2^31
    chunks = -(-n // width)
    weights = position_weights(n, device).double()
    coefficients = torch.zeros((n, 1 + chunks), dtype=torch.float64, device=device)
    coefficients[:, 0] = 1.0
    rows = torch.arange(n, device=device)
    coefficients[rows, 1 + rows // width] = weights
    return coefficients


def column_sums(data: torch.Tensor) -> torch.Tensor:
    """(n,) int64 Σ_i data[i, j] of fewer than CHUNK_ROWS int32 words per column held as fp64, exactly."""
    if data.shape[0] >= CHUNK_ROWS:
        raise ValueError(f"int8 ABFT: at most {CHUNK_ROWS - 1} rows per block for exact fp64 sums")
    ones = torch.ones(data.shape[0], dtype=torch.float64, device=data.device)
    return (ones @ data).to(torch.int64)  # |partial sums| < 2^22·2^31 = 2^53; GEMV: 2× faster than sum(0)


def fused(block: torch.Tensor, n: int, pad_start: int) -> BlockSums:
    """The sums by the fused kernel's partials, reduced by torch (a few small kernels).

    Raises:
        ValueError: a block that is not contiguous or has an odd width (its rows must be whole 64-bit
            words, as the fingerprint reads them).
    """
    if not block.is_contiguous() or block.shape[1] % 2 or block.dtype != torch.int32:
        raise ValueError("int8 block sums: a contiguous int32 block of even width is needed")
    row, weighted, pad, columns, prints = torch.ops.sdcscan.int8_block_partials(block, n, pad_start)
    return BlockSums(
        rows=row.sum(0),
        weighted=weighted.sum(0),
        columns=columns[:, :n].sum(0),
        pad_nonzero=pad.amax(0) != 0,
        fingerprint=prints.sum(),  # int64 sums wrap mod 2^64 on every device, as the keyed sum does
    )


def partial_shapes(rows: int, n_ext: int) -> tuple[int, int]:
    """(column strips, row groups) of the fused kernel's grid for a (rows, n_ext) block."""
    strips = -(-(n_ext // 2) // WORDS)
    groups = -(-rows // (ROWS * ROW_TILES))
    return strips, groups


@torch.library.custom_op("sdcscan::int8_block_partials", mutates_args=())
def _partials(
    block: torch.Tensor, n: int, pad_start: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused kernel: per strip, each row's partial sums and padding flag; per row group, each
    column's partial sum; per (group, strip), the keyed sum of its words. Reduced by `fused`."""
    from sdcscan.checks import int8_triton  # imports Triton: only where the kernel runs

    return int8_triton.partials(block, n, pad_start, ROWS, WORDS, ROW_TILES, NUM_WARPS)


@_partials.register_fake
def _(block: torch.Tensor, n: int, pad_start: int) -> tuple[torch.Tensor, ...]:
    rows, n_ext = block.shape
    strips, groups = partial_shapes(rows, n_ext)
    per_row = block.new_empty((strips, rows), dtype=torch.int64)
    return (
        per_row,
        torch.empty_like(per_row),
        block.new_empty((strips, rows), dtype=torch.int32),
        block.new_empty((groups, n_ext), dtype=torch.int64),
        block.new_empty((groups, strips), dtype=torch.int64),
    )
