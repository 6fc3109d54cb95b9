"""The exact EmbeddingBag check (docs/abft.md §2.4): on a dyadic table (scale 2^-7, bias k·2^-7) with
small integer weights every fp32 step is exact, so each bag's checksum is compared for equality in
integers (units of 2^-7) with S_exp, gathered from the row sums of the INTENDED indices (a fetch of the
wrong row is seen too), and every output element is checked to be an integer multiple of 2^-7.

A second checksum weighs each column by its own odd weight (`column_weights`): changes that cancel in a
bag's plain sum (the same bit flipped up in some elements and down in others of a table row or of the
output, two elements exchanged, both nibbles of a 4-bit byte moving by opposite amounts) move the
weighted sum unless their weighted total is a multiple of 2^32 (issue 44: 7 of 40 same-bit runs across
a table row went unseen by the plain sum).
"""

from __future__ import annotations

import torch

from sdcscan.checks.embbag.id_pool import wrap32
from sdcscan.checks.embbag.packing import UNIT, UNIT_INV, layout, split_packed

# Odd column weights below 2^14: a clean element is below 2^17 units, so each weighted element fits int32
# and only the bag's int32 sum wraps (mod 2^32, as the plain sum does).
COLUMN_WEIGHT_LIMIT = 2**14
WEIGHTED_ROWS_AT_A_TIME = 1 << 16  # rows weighed per fp64 product: bounds the scratch (64 MB at dim 128)


def column_weights(dim: int, seed: int, device: torch.device) -> torch.Tensor:
    """(dim,) int32 distinct odd weights below COLUMN_WEIGHT_LIMIT, drawn from `seed` on the host (the same
    on every device). Distinct, so two columns exchanged always move the weighted sum."""
    g = torch.Generator().manual_seed(seed)
    odd = 2 * torch.randperm(COLUMN_WEIGHT_LIMIT // 2, generator=g)[:dim] + 1
    return odd.to(torch.int32).to(device)


def weighted_row_sums(packed: torch.Tensor, bits: int, weights: torch.Tensor) -> torch.Tensor:
    """(N,) int32 Σ_j weights_j·(q_rj + k_r) per row, in units of 2^-7, modulo 2^32.

    Each row's products are exact in fp64 (below 2^8 · 2^14 · 2^9 per row at dim 512), then taken mod 2^32.
    """
    q, _, bias = split_packed(packed, bits)
    k = (bias * UNIT_INV).round().long()
    total = int(weights.long().sum())
    w = weights.to(torch.float64)
    sums = torch.empty(q.shape[0], dtype=torch.int32, device=q.device)
    for lo in range(0, q.shape[0], WEIGHTED_ROWS_AT_A_TIME):
        hi = min(lo + WEIGHTED_ROWS_AT_A_TIME, q.shape[0])
        weighted = (q[lo:hi].to(torch.float64) @ w).long() + k[lo:hi] * total
        sums[lo:hi] = wrap32(weighted)
    return sums


def exact_row_sums(packed: torch.Tensor, bits: int = 8) -> torch.Tensor:
    """Per-row sums in units of 2^-7: C_T + D·k, exact integers, int16 when they fit (a cheaper gather).

    Raises:
        ValueError: the table is not dyadic (scale ≠ 2^-7 or bias not a multiple of 2^-7).
    """
    q, scale, bias = split_packed(packed, bits)
    dim = q.shape[1]
    k = bias * UNIT_INV
    if not bool((scale == UNIT).all()) or not torch.equal(k, k.round()):
        raise ValueError("exact_row_sums needs a dyadic table: scale 2^-7 and bias a multiple of 2^-7")
    sums = q.sum(1, dtype=torch.int32) + dim * k.to(torch.int32)  # |sums| <= q_max·D
    return sums.to(torch.int16) if layout(bits).q_max * dim < 2**15 else sums


def exact_expected(
    row_sums: torch.Tensor, indices: torch.Tensor, lengths: torch.Tensor, weights: torch.Tensor | None
) -> torch.Tensor:
    """S_exp per bag in units of 2^-7, (B,) int32: exact, as a clean bag sum is below 2^31 in magnitude.

    Args:
        row_sums: (N,) integer row sums from exact_row_sums.
        indices: (L_total,) int64 intended row per lookup, bags laid out consecutively.
        lengths: (B,) int64 pooling size per bag (zero allowed).
        weights: (L_total,) integer-valued per-sample weights, or None for weight 1.
    """
    vals = row_sums.index_select(0, indices)  # (L_total,) int16 or int32
    if weights is not None:  # in int64: a weighted row sum times a weight may pass 2^31, then mod 2^32
        vals = wrap32(vals.long() * weights.long())
    return _segment_sums(vals, lengths)


def fp32_sums_exact(largest_row_sum: int, max_pooling: int, max_weight: int) -> bool:
    """Whether every bag sum of row sums (|each| <= largest_row_sum, integers in units of 2^-7) times
    integer weights up to max_weight, over at most max_pooling lookups, is exact in fp32: every partial
    sum is then an integer below 2^24, whatever the order of summation."""
    return largest_row_sum * max_weight * max_pooling < 2**24


def exact_expected_fp32(
    row_sum_table: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor | None
) -> torch.Tensor:
    """S_exp per bag in units of 2^-7, (B,) int32, through one fp32 EmbeddingBag over the row sums.

    Exact only where `fp32_sums_exact` holds for the table and the case; a third of the cost of
    gathering and prefix-summing the row sums as integers (exact_expected) on an AVX-512 core.

    Args:
        row_sum_table: (N, 1) fp32 row sums from exact_row_sums.
        indices: (L_total,) intended row per lookup; offsets: (B,) first lookup of each bag, same dtype.
        weights: (L_total,) fp32 integer-valued per-sample weights, or None for weight 1.
    """
    sums = torch.nn.functional.embedding_bag(
        indices, row_sum_table, offsets, mode="sum", per_sample_weights=weights
    )
    return sums.squeeze(1).to(torch.int32)


def exact_bad_bags(
    out: torch.Tensor,
    expected: torch.Tensor,
    scratch: Scratch | None = None,
    weighted: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """(B,) bool: bags whose sum differs from S_exp, or with an element that is not a multiple of 2^-7,
    or (given `weighted`) whose column-weighted sum differs from its own S_exp.

    Args:
        out: (B, D) fp32 EmbeddingBag output of a dyadic table.
        expected: (B,) int32 from exact_expected (or id_pool.expected_at).
        scratch: buffers reused from batch to batch, and the block of bags checked at a time (one block,
            in fresh buffers, when None).
        weighted: the (D,) column weights and the (B,) int32 S_exp of the weighted row sums
            (`weighted_row_sums`), or None for the plain sum alone.
    Elements are compared in units of 2^-7 as int32 (a cheap conversion; clean values are below 2^17).
    The integrality check (int32 → fp32 round trip) catches what a sum would absorb, such as a 0.0
    flipped to a denormal, and NaN/Inf/out-of-range values. Once every element is an integer, the
    int32 row sum (wrapping) differs from S_exp unless the element changed by a multiple of 2^32,
    which an int32 cannot. On a CPU, one read per block: whether an element failed the round trip; on a GPU no read at all.
    """
    scratch = scratch or Scratch()
    step = scratch.block_bags(out)
    if step >= out.shape[0]:
        return _exact_bad_block(out, expected, scratch, weighted)
    blocks = range(0, out.shape[0], step)
    return torch.cat(
        [
            _exact_bad_block(
                out[lo : lo + step],
                expected[lo : lo + step],
                scratch,
                None if weighted is None else (weighted[0], weighted[1][lo : lo + step]),
            )
            for lo in blocks
        ]
    )


def _exact_bad_block(
    out: torch.Tensor,
    expected: torch.Tensor,
    scratch: Scratch,
    weighted: tuple[torch.Tensor, torch.Tensor] | None,
) -> torch.Tensor:
    """exact_bad_bags over one block of bags."""
    scaled, units, products = scratch.buffers(out)
    torch.mul(out, UNIT_INV, out=scaled)  # exact: a power of two
    units.copy_(scaled)  # truncates; garbage for NaN/Inf, which the round trip rejects
    bad = units.sum(1, dtype=torch.int32) != expected  # wraps mod 2^32 like the expected side
    if weighted is not None:
        column_weights, expected_weighted = weighted
        torch.mul(units, column_weights, out=products)  # each below 2^31 for a clean element
        bad |= products.sum(1, dtype=torch.int32) != expected_weighted
    # An element is on the grid where its integer, back in fp32, is itself (compared in fp32: exact for
    # every int32 a clean element can be; NaN, Inf and values beyond int32's range never compare equal).
    off_grid = units != scaled
    # A CPU answers at once whether any element is off, and looks closer only then; a GPU would answer
    # only after a wait for the device, so it looks at every bag.
    if out.device.type != "cpu" or bool(off_grid.any()):
        bad |= off_grid.any(1)
    return bad


class Scratch:
    """exact_bad_bags's three buffers of one block of bags, kept for every block and batch.

    On a CPU, fresh output-sized tensors are page-faulted in at every allocation, which cost four times
    the check's arithmetic (27.9 vs 7.5 ms a batch of 32768 × 128 on an AVX-512 core), and blocks that
    stay in L2 take 3.7–3.9 ms against 6.2 ms for the whole batch at once (issue 10).

    Args:
        block_bytes: the bytes of output checked at a time (None: the whole batch, one device read).
    """

    def __init__(self, block_bytes: int | None = None) -> None:
        self.block_bytes = block_bytes
        self._held: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def block_bags(self, out: torch.Tensor) -> int:
        """Bags of `out` checked at a time: at least one."""
        if self.block_bytes is None or out.numel() == 0:
            return max(1, out.shape[0])
        return max(1, self.block_bytes // (out[0].numel() * out.element_size()))

    def buffers(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """fp32, int32 and int32 tensors of `out`'s shape on its device (the scaled output, its counts of
        2^-7, and the weighted checksum's products): views of the held ones where those have room (a
        batch's last, shorter block), new ones otherwise."""
        held = self._held
        fits = held is not None and held[0].device == out.device and held[0].shape[1:] == out.shape[1:]
        if held is None or not fits or held[0].shape[0] < out.shape[0]:
            held = self._held = (
                torch.empty(out.shape, dtype=torch.float32, device=out.device),
                torch.empty(out.shape, dtype=torch.int32, device=out.device),
                torch.empty(out.shape, dtype=torch.int32, device=out.device),
            )
        rows = out.shape[0]
        return held[0][:rows], held[1][:rows], held[2][:rows]


def _segment_sums(vals: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Per-bag sums of consecutive integer segments via a wrapping int32 prefix sum.

    Differences of prefix sums taken mod 2^32 are the bag sums mod 2^32, hence exact for bags whose
    sum fits int32. int32 rather than int64 halves the scratch memory, whose page faults dominate.
    """
    prefix = torch.cumsum(vals, 0, dtype=torch.int32)  # (L_total,), wraps
    ends = torch.cumsum(lengths, 0)  # (B,) one past each bag's last lookup
    return _prefix_at(prefix, ends) - _prefix_at(prefix, ends - lengths)


def _prefix_at(prefix: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Sum of the first `count` values: prefix[count - 1], or 0 where count is 0."""
    if prefix.numel() == 0:  # every bag is empty
        return torch.zeros(count.shape, dtype=prefix.dtype, device=prefix.device)
    return torch.where(count > 0, prefix[(count - 1).clamp(min=0)], 0)
