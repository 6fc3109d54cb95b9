"""Exact-mode bag checksums for ids read from a fixed pool: two reads per bag instead of a gather per
lookup.

The exact check compares each bag's output sum with S_exp(b) = Σ_{i in b} w_i·R[id_i], where R holds
the table's row sums in units of 2^-7 (exact.exact_row_sums). Gathering R at every intended id costs
one random read per lookup, 8–10% of the lookups themselves on an AVX-512 core at dim 128 (issue 10).
When a batch's ids (and weights) are a contiguous view pool[start : start + L] of a pool fixed for the
worker's life, the prefix sums P[i] = Σ_{j<i} w_j·R[pool_j] are taken once, and a bag covering pool
positions [lo, hi) has S_exp = P[hi] − P[lo]. The intended rows are still the pool's: a wrong-row fetch,
a corrupted table row or output, and even a pool id corrupted in memory after the prefix was taken all
change the output sum and not P.

Sums are kept modulo 2^32 as signed int32: differences mod 2^32 are exact for every clean bag, whose
sum is below 2^31 in magnitude (exact_bad_bags compares its wrapping int32 output sums the same way).
"""

from __future__ import annotations

import torch

PREFIX_CHUNK = 1 << 22  # ids summed at a time: bounds the int64 scratch (32 MB) whatever the pool
_WRAP = 1 << 32
_HALF = 1 << 31


def pool_prefix(row_sums: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """(P + 1,) int32 on the pool's device: entry i is Σ_{j<i} w_j·row_sums[ids_j] mod 2^32.

    Args:
        row_sums: (N,) integer row sums from exact.exact_row_sums.
        ids: (P,) row ids of the pool, int32 or int64.
        weights: (P,) integer-valued per-sample weights of the pool, or None for weight 1.
    """
    prefix = torch.zeros(ids.numel() + 1, dtype=torch.int32, device=ids.device)
    carry = torch.zeros((), dtype=torch.int64, device=ids.device)  # the sum so far, mod 2^32
    for lo in range(0, ids.numel(), PREFIX_CHUNK):
        hi = min(lo + PREFIX_CHUNK, ids.numel())
        vals = row_sums.index_select(0, ids[lo:hi].long()).long()
        if weights is not None:
            vals *= weights[lo:hi].long()
        run = torch.cumsum(vals, 0) + carry  # int64: exact for a chunk (< 2^22 · 2^17 · 3)
        carry = run[-1] % _WRAP
        prefix[lo + 1 : hi + 1] = wrap32(run)
    return prefix


def expected_at(prefix: torch.Tensor, start: int, bounds: torch.Tensor) -> torch.Tensor:
    """(B,) int32 S_exp per bag of a batch whose ids are pool[start : start + bounds[-1]].

    Args:
        prefix: from pool_prefix.
        start: the batch's first pool position.
        bounds: (B + 1,) int64 on the prefix's device: 0, then the running sum of the bag lengths.
    """
    ends = prefix.index_select(0, bounds + start).long()
    return wrap32(ends[1:] - ends[:-1])


def wrap32(values: torch.Tensor) -> torch.Tensor:
    """int64 → int32 modulo 2^32, into the signed range by arithmetic (no overflowing conversion)."""
    # `& (2^32 - 1)` is the floored remainder by 2^32 of any two's-complement int64, negatives included,
    # as `% 2^32` is, without an integer division (a third of a GPU batch's S_exp kernels' time).
    return (((values + _HALF) & (_WRAP - 1)) - _HALF).to(torch.int32)
