"""The exact EmbeddingBag check as one Triton kernel: one read of each output word (exact_fused.py).

A program takes BAGS bags of a (B, D) fp32 output, D even, read as 64-bit words (the form the
fingerprint hashes): word p of a bag holds elements 2p (low half) and 2p + 1 (high half). For each
element it takes the count of 2^-7 units as `exact._exact_bad_block` does (x·128 truncated to int32) and
whether the count, back in fp32, is the element (on the grid); for each bag, the plain and the
column-weighted sums of the counts, compared with their S_exp modulo 2^32 (taken in int64 here: the same
residues as the torch path's wrapping int32 sums); and the keyed sum of its words,
K = splitmix64(flat word index + 1) | 1, as `keyed_sums.fingerprint_keys` has them. Imported only where the
kernel runs: it imports Triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdcscan.checks.fingerprint_triton import keyed


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]
def _kernel(
    words_ptr: tl.tensor,
    expected_ptr: tl.tensor,
    weighted_ptr: tl.tensor,
    weights_ptr: tl.tensor,
    bad_ptr: tl.tensor,
    print_ptr: tl.tensor,
    bags: tl.tensor,
    half: tl.tensor,
    BAGS: tl.constexpr,
    HALF: tl.constexpr,
) -> None:
    block = tl.program_id(0)
    r = (block * BAGS + tl.arange(0, BAGS)).to(tl.int64)  # (BAGS,)
    p = tl.arange(0, HALF).to(tl.int64)  # (HALF,) word within a bag, HALF >= half
    in_bag = p < half
    inside = (r[:, None] < bags) & in_bag[None, :]
    index = r[:, None] * half + p[None, :]
    w = tl.load(words_ptr + index, mask=inside, other=0)  # int64
    low = (w & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    high = (w >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    low_weight = tl.load(weights_ptr + 2 * p, mask=in_bag, other=0).to(tl.int64)
    high_weight = tl.load(weights_ptr + 2 * p + 1, mask=in_bag, other=0).to(tl.int64)
    low_scaled = low * 128.0  # exact: a power of two
    high_scaled = high * 128.0
    low_units = low_scaled.to(tl.int32)  # truncates, as the torch path's copy into int32 does
    high_units = high_scaled.to(tl.int32)
    off = (low_units.to(tl.float32) != low_scaled) | (high_units.to(tl.float32) != high_scaled)
    units = low_units.to(tl.int64) + high_units.to(tl.int64)
    weighted = low_units.to(tl.int64) * low_weight[None, :] + high_units.to(tl.int64) * high_weight[None, :]
    row = r < bags
    expected = tl.load(expected_ptr + r, mask=row, other=0).to(tl.int64)
    expected_weighted = tl.load(weighted_ptr + r, mask=row, other=0).to(tl.int64)
    plain_bad = ((tl.sum(units, axis=1) - expected) & 0xFFFFFFFF) != 0
    weighted_bad = ((tl.sum(weighted, axis=1) - expected_weighted) & 0xFFFFFFFF) != 0
    off_bag = tl.max(tl.where(inside, off, False).to(tl.int32), axis=1) != 0
    tl.store(bad_ptr + r, (plain_bad | weighted_bad | off_bag).to(tl.int8), mask=row)
    total = tl.sum(tl.sum(keyed(w, index), axis=1), axis=0)  # w is 0 outside the output: adds nothing
    tl.store(print_ptr + block, total.to(tl.int64, bitcast=True))


def partials(
    out: torch.Tensor,
    expected: torch.Tensor,
    weights: torch.Tensor,
    expected_weighted: torch.Tensor,
    bags_per_program: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the kernel over a contiguous (B, D) fp32 output, D even: (B,) int8 bad flags and one keyed
    sum per program."""
    bags, dim = out.shape
    half = dim // 2
    programs = max(1, -(-bags // bags_per_program))
    bad = out.new_empty(bags, dtype=torch.int8)
    prints = out.new_empty(programs, dtype=torch.int64)
    _kernel[(programs,)](
        out.view(torch.int64),
        expected,
        expected_weighted,
        weights,
        bad,
        prints,
        bags,
        half,
        BAGS=bags_per_program,
        HALF=triton.next_power_of_2(max(1, half)),
    )
    return bad, prints
