"""The fingerprint's keys inside a Triton kernel: K_i = splitmix64(i + 1) | 1 for word i, as
`keyed_sums.fingerprint_keys` builds them in torch (sdcscan/checks/counter_rng.py's splitmix64), computed
where a fused check kernel reads each word instead of read from a key vector as long as the output.
It also holds the fingerprint's own kernel (`partials`), which reads a tensor's words once where torch's
products and sum read them, the keys and a temporary as long as both (sdcscan/checks/keyed_sums.py).
Imported only where a kernel runs: it imports Triton."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# splitmix64's constants, as the uint64 literals Triton takes them for; a kernel reads a global only as
# a tl.constexpr (the interpreter takes a plain int, the compiler refuses it)
_GOLDEN = tl.constexpr(0x9E3779B97F4A7C15)
_MIX1 = tl.constexpr(0xBF58476D1CE4E5B9)
_MIX2 = tl.constexpr(0x94D049BB133111EB)


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]
def keyed(words: tl.tensor, index: tl.tensor) -> tl.tensor:
    """Each 64-bit word times its key (int64 `words`, int64 flat word `index`), as uint64: their sum
    mod 2^64 is the fingerprint's keyed sum."""
    z = (index + 1).to(tl.uint64, bitcast=True) * _GOLDEN
    z = (z ^ (z >> 30)) * _MIX1
    z = (z ^ (z >> 27)) * _MIX2
    return words.to(tl.uint64, bitcast=True) * ((z ^ (z >> 31)) | 1)


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]
def _kernel(
    words_ptr: tl.tensor,
    sums_ptr: tl.tensor,
    width: tl.tensor,
    chunks: tl.tensor,
    BLOCK: tl.constexpr,
    TILES: tl.constexpr,
) -> None:
    """Program (chunk, row): the keyed sum of words [chunk·TILES·BLOCK, (chunk + 1)·TILES·BLOCK) of one
    row of a (rows, width) int64 matrix, each keyed by its index within the row."""
    chunk = tl.program_id(0).to(tl.int64)
    row = tl.program_id(1).to(tl.int64)
    sums = tl.zeros((BLOCK,), dtype=tl.uint64)
    for tile in range(TILES):
        p = (chunk * TILES + tile) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
        w = tl.load(words_ptr + row * width + p, mask=p < width, other=0)
        sums += keyed(w, p)  # a word outside the row is 0 and adds nothing
    tl.store(sums_ptr + row * chunks + chunk, tl.sum(sums, axis=0).to(tl.int64, bitcast=True))


def partials(words: torch.Tensor, block: int, tiles: int, warps: int) -> torch.Tensor:
    """(rows, chunks) int64: each row's keyed sum in chunks of block·tiles words, for a contiguous
    (rows, width) int64 `words`; the sum of a row's chunks mod 2^64 is its keyed sum."""
    rows, width = words.shape
    chunks = max(1, -(-width // (block * tiles)))
    sums = words.new_empty((rows, chunks))
    _kernel[(chunks, rows)](words, sums, width, chunks, BLOCK=block, TILES=tiles, num_warps=warps)
    return sums
