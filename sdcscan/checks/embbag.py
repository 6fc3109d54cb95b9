"""Checksums for 8-bit rowwise-quantized EmbeddingBag (FBGEMM `embedding_bag_byte_rowwise_offsets`).

A packed row is D bytes q, then fp32 scale and fp32 bias; an element is scale·q + bias. FBGEMM sums a
bag in fp32 as buf_j = fma(w·scale, q_j, buf_j + w·bias) (its EmbeddingSpMDM_ref; docs/abft.md §2.1).
With row sums C_T[r] = Σ_j q_rj precomputed from the intended table, the bag checksum identity
(Li et al. §V-B, eq. 5; docs/abft.md §2.2) is

    S_out(b) = Σ_j out[b, j]  =  S_exp(b) = Σ_{i in b} w_i (scale_i·C_T[i] + D·bias_i)

where S_exp gathers the row sums of the INTENDED indices, so a fetch of the wrong row is seen too.

Two tolerance models:
    exact: scale = 2^-7 and bias = k·2^-7 (k integer) are written into the table and weights are small
        integers, so every fp32 step is exact; the identity is checked for equality in integers
        (units of 2^-7), plus an integrality check on every output element (docs/abft.md §2.4).
    realistic: any FBGEMM-quantized table; |S_out − S_exp| <= T, a rigorous bound (docs/abft.md §2.3) built
        from γ_n = n·u/(1 − n·u) and A(b) = Σ|w_i|(scale_i·C_T[i] + D·|bias_i|).
"""

from __future__ import annotations

import torch

UNIT = 2**-7  # exact mode: every value is an integer multiple of this
UNIT_INV = 2**7
U32 = 2.0**-24  # unit roundoff of fp32 and fp64
U64 = 2.0**-53


def dyadic_pack(q: torch.Tensor, bias_units: torch.Tensor) -> torch.Tensor:
    """Build an exact-mode packed table by hand.

    Args:
        q: (N, D) uint8 quantized values.
        bias_units: (N,) integers k in [-255, 0]; bias = k·2^-7, scale = 2^-7.
    Returns:
        (N, D + 8) uint8: q, then the fp32 scale and bias bytes (the layout FBGEMM's prepack writes).
    """
    scale = torch.full((q.shape[0],), UNIT, dtype=torch.float32, device=q.device)
    meta = torch.stack([scale, bias_units.to(torch.float32) * UNIT], 1)  # (N, 2) fp32, exact
    return torch.cat([q, meta.view(torch.uint8)], 1).contiguous()


def split_packed(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(N, D + 8) uint8 → q (N, D) uint8 view, scale (N,) fp32, bias (N,) fp32."""
    meta = packed[:, -8:].contiguous().view(torch.float32)  # (N, 2)
    return packed[:, :-8], meta[:, 0], meta[:, 1]


def exact_row_sums(packed: torch.Tensor) -> torch.Tensor:
    """Per-row sums in units of 2^-7: C_T + D·k, exact integers, int16 when they fit (a cheaper gather).

    Raises:
        ValueError: the table is not dyadic (scale ≠ 2^-7 or bias not a multiple of 2^-7).
    """
    q, scale, bias = split_packed(packed)
    dim = q.shape[1]
    k = bias * UNIT_INV
    if not bool((scale == UNIT).all()) or not torch.equal(k, k.round()):
        raise ValueError("exact_row_sums needs a dyadic table: scale 2^-7 and bias a multiple of 2^-7")
    sums = q.sum(1, dtype=torch.int32) + dim * k.to(torch.int32)  # |sums| <= 255·D
    return sums.to(torch.int16) if 255 * dim < 2**15 else sums


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
    if weights is not None:
        vals = vals.to(torch.int32) * weights.to(torch.int32)
    return _segment_sums(vals, lengths)


def exact_bad_bags(out: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """(B,) bool: bags whose sum differs from S_exp, or with an element that is not a multiple of 2^-7.

    Args:
        out: (B, D) fp32 EmbeddingBag output of a dyadic table.
        expected: (B,) int32 from exact_expected.
    Elements are compared in units of 2^-7 as int32 (a cheap conversion; clean values are below 2^17).
    The integrality check (int32 → fp32 round trip) catches what a sum would absorb, such as a 0.0
    flipped to a denormal, and NaN/Inf/out-of-range values. Once every element is an integer, the
    int32 row sum (wrapping) differs from S_exp unless the element changed by a multiple of 2^32,
    which an int32 cannot.
    """
    scaled = out * UNIT_INV  # (B, D) fp32, exact: a power of two
    units = scaled.to(torch.int32)  # truncates; garbage for NaN/Inf, which the round trip rejects
    bad = units.sum(1, dtype=torch.int32) != expected  # wraps mod 2^32 like the expected side
    back = units.to(torch.float32)
    if not torch.equal(back, scaled):
        bad |= (back != scaled).any(1)
    return bad


def realistic_row_sums(packed: torch.Tensor) -> torch.Tensor:
    """(N, 2) fp32: [scale·C_T + D·bias (rounded), scale·C_T + D·|bias| (rounded up)] per row.

    fp32 halves the gather of the check; the rounding of column 0 (<= u·column 1) is in the bound, and
    column 1 is rounded up so that the bound stays an upper bound.
    """
    q, scale, bias = split_packed(packed)
    c_t = q.sum(1, dtype=torch.int32).to(torch.float64)  # exact
    dim = q.shape[1]
    s = scale.double() * c_t + dim * bias.double()  # (N,) fp64, error <= 2·U64·a
    a = (scale.double() * c_t + dim * bias.double().abs()) * (1 + 4 * U64)
    a32 = a.float()
    a32 = torch.where(a32.double() < a, torch.nextafter(a32, torch.tensor(float("inf"))), a32)
    return torch.stack([s.float(), a32], 1)


def realistic_expected(
    row_sums: torch.Tensor, indices: torch.Tensor, lengths: torch.Tensor, weights: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """S_exp(b) and A(b) = Σ|w_i|·a_i per bag, fp64 (B,) each, from realistic_row_sums (N, 2)."""
    # Gather both fp32 columns as one int64 word: a 1-D gather is ~10× faster than a (N, 2) one.
    pairs = row_sums.contiguous().view(torch.int64).view(-1).index_select(0, indices)
    vals = pairs.view(torch.float32).view(-1, 2).to(torch.float64)  # (L_total, 2); w·v exact in fp64
    if weights is not None:
        vals = vals * torch.stack([weights, weights.abs()], 1).to(torch.float64)
    sums = torch.segment_reduce(vals, "sum", lengths=lengths, axis=0)  # (B, 2)
    return sums[:, 0], sums[:, 1]


def gamma(n: torch.Tensor | float, u: float) -> torch.Tensor | float:
    """γ_n = n·u / (1 − n·u): the classic bound on n compounded roundings (Higham)."""
    return n * u / (1 - n * u)


def realistic_threshold(abs_sums: torch.Tensor, lengths: torch.Tensor, dim: int) -> torch.Tensor:
    """Rigorous |S_out − S_exp| bound per bag, fp64 (B,).

    FBGEMM rounds 2 times per member (add, fma) and psw adds one more (w·scale, w·bias): γ_{2L+2} in
    fp32. The fp32 row sum adds u. The fp64 sides (row sums, S_exp over L terms, S_out over D
    elements) add γ_{L+D+8} in fp64. A final 2^-20 covers the rounding of this formula itself.
    """
    n32 = 2 * lengths.to(torch.float64) + 2
    n64 = lengths.to(torch.float64) + dim + 8
    return (gamma(n32, U32) + U32 + gamma(n64, U64)) * abs_sums * (1 + 2**-20)


def realistic_bad_bags(out: torch.Tensor, expected: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """(B,) bool: bags with |Σ_j out[b, j] − S_exp(b)| beyond the bound; NaN-safe (NaN is bad)."""
    diff = (out.sum(1, dtype=torch.float64) - expected).abs()
    return ~(diff <= threshold)


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
