"""The realistic EmbeddingBag check, two levels (docs/abft.md §2.3), for any FBGEMM-quantized table.

A cheap per-bag trigger compares the residuals of two checksums, the plain one (Li et al. §V-B, eq. 5)
and a signed one (balanced ±1 weights, which cancel the rounding FBGEMM makes alike in every element),
with a variance model of the fp32 rounding noise; only the bags it flags are recomputed element by
element in fp64 from the intended rows (whose bytes are first checked against per-row fingerprints)
and compared with a rigorous running-error bound, so a confirmed mismatch is never rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sdcscan.checks.embbag.packing import split_packed

U32 = 2.0**-24  # unit roundoff of fp32 and fp64
U64 = 2.0**-53
TINY32 = 2.0**-126  # the smallest normal fp32: below it, rounding errors are absolute, not relative
# The trigger fires beyond these many modelled standard deviations of the plain and the signed checksum.
# Measured on clean bags of every table family (docs/abft.md §2.5): a firing costs only the recompute of
# that bag, a miss costs detection. The plain checksum's model is rougher (coherent roundings), so it
# sits further out; the signed one is the sensitive check.
PLAIN_SIGMAS = 5.0
SIGNED_SIGMAS = 4.0
CONFIRM_CHUNK_BAGS = 64  # flagged bags recomputed together: bounds the fp64 scratch memory
# The running-error bound below needs L·u small; pooling is at most 21,845 lookups (2·L·u < 0.003).
_MAX_CONFIRM_LENGTH = 21_845


@dataclass(frozen=True)
class RowStats:
    """What the realistic check keeps per row of the intended table, computed once per table.

    Attributes:
        sums: (N,) complex64, each element two fp32 values gathered together (one 8-byte gather per
            lookup costs about a third of a 16-byte one): the row sum s = scale·C_T + D·bias and the
            signed row sum s± = scale·Σ_j c_j·q_j over the balanced ±1 pattern c of `diff_pattern`.
        shares: (N,) complex64, the row's shares (per unit w²) of the variance models of the plain and
            the signed checksum (see `row_stats`).
        fingerprints: (N,) int64 Σ_k (2k + 1)·byte_k over every byte of the packed row: no single or
            double bit flip of a row leaves it unchanged, since (2k + 1)·2^b determines k and b.
        bits: the table's bit width.
        weighted: whether the shares include the rounding of w·scale and w·bias (per-sample weights).
    """

    sums: torch.Tensor
    shares: torch.Tensor
    fingerprints: torch.Tensor
    bits: int
    weighted: bool

    def to(self, device: torch.device) -> RowStats:
        """The same statistics on `device`."""
        return RowStats(
            self.sums.to(device),
            self.shares.to(device),
            self.fingerprints.to(device),
            self.bits,
            self.weighted,
        )


def diff_pattern(dim: int, device: torch.device | None = None) -> torch.Tensor:
    """(D,) fp64 weights of the signed checksum: ±1, as many of each (a 0 last when D is odd).

    The rounding of buf + bias errs identically in every element whose partial sum lies in one binade
    (the error depends only on the bias and the ulp), so it adds up coherently in a plain row sum;
    weights that sum to zero cancel it, and a change of one element still moves the signed sum by the
    full change. Drawn from a fixed seed, so every unit and device uses the same pattern.
    """
    signs = torch.ones(dim, dtype=torch.float64)
    signs[torch.randperm(dim, generator=torch.Generator().manual_seed(0x5DC))[: dim // 2]] = -1.0
    if dim % 2:
        signs[(signs > 0).nonzero()[-1]] = 0.0
    return signs.to(device) if device is not None else signs


def row_stats(packed: torch.Tensor, bits: int, *, weighted: bool, chunk_rows: int = 1 << 16) -> RowStats:
    """Per-row checksums, variance shares and fingerprints of a packed table, in chunks (bounded fp64
    scratch).

    The plain checksum's share is 2·D·bias² + s² [+ (scale·C_T)² + (D·bias)² with weights]: the rounding
    of buf + bias is up to u·|buf + bias| per element (|buf + bias|² <= 2|buf|² + 2·bias²); s is stored
    in fp32 (an error up to u·|s| per lookup); with weights, fl(w·scale) and fl(w·bias) err coherently
    across the D elements, by up to u·w·scale·C_T and u·w·D·bias in the bag sum. The signed checksum's
    share is s±² [× 2 with weights]: its fp32 storage and the rounding of w·scale (w·bias cancels).
    """
    sums, shares, prints = [], [], []
    pattern: torch.Tensor | None = None
    for start in range(0, packed.shape[0], chunk_rows):
        chunk = packed[start : start + chunk_rows]
        q, scale, bias = split_packed(chunk, bits)
        dim = q.shape[1]
        pattern = diff_pattern(dim, q.device) if pattern is None else pattern
        q64 = q.to(torch.float64)
        scaled, b = scale.double() * q64.sum(1), bias.double()  # the sum of q is exact in fp64
        s = scaled + dim * b
        signed = scale.double() * (q64 @ pattern)
        plain_share = 2 * dim * b.square() + s.square()
        signed_share = signed.square()
        if weighted:
            plain_share = plain_share + scaled.square() + (dim * b).square()
            signed_share = 2 * signed_share
        sums.append(torch.stack([s, signed], 1).float())
        shares.append(torch.stack([plain_share, signed_share], 1).float())
        prints.append(_fingerprints(chunk))
    return RowStats(
        torch.cat(sums).contiguous().view(torch.complex64).view(-1),
        torch.cat(shares).contiguous().view(torch.complex64).view(-1),
        torch.cat(prints),
        bits,
        weighted,
    )


def trigger_bags(
    out: torch.Tensor,
    stats: RowStats,
    indices: torch.Tensor,
    lengths: torch.Tensor,
    weights: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Level 1: (B,) bool of bags where either checksum's residual exceeds PLAIN_SIGMAS (SIGNED_SIGMAS)
    modelled deviations, and (B,) fp64 S_exp.

    Each residual (plain: Σ_j out_j − Σ_i w_i·s_i; signed: Σ_j c_j·out_j − Σ_i w_i·s±_i) sums the
    rounding errors of the D·L accumulation steps. Modelling each rounding as uniform within ±u·|value|
    (variance u²·value²/3), with the partial sums' energy Σ_t |S_t|² estimated as 1.5·L·|out|² (a random
    walk ends near Σ_t |x_t|², a drift at L²/3·|x|², so 1.5·L·|out|² covers both with room for the
    bias additions):

        var_plain(b)  = u²/3 · (1.5·L·|out_b|² + Σ_i w_i²·k_i)
        var_signed(b) = u²/3 · (1.5·L·|out_b|² + (1 + weighted)·Σ_i (w_i·s±_i)²)

    the last term being the fp32 storage of s± and, with weights, the rounding of w·scale. The signed
    checksum needs no bias term (see `diff_pattern`), so it is the sensitive one for a change of one
    element; the plain one sees a change common to every element (a wrong bias). It is a model, not a
    bound: correlated roundings (a row many times in a bag, rows of one constant value) exceed it, and
    then the bag is only recomputed. Non-finite residuals or models fire.
    """
    dim = out.shape[1]
    expected = stats.sums.index_select(0, indices).view(torch.float32).view(-1, 2).to(torch.float64)
    shares = stats.shares.index_select(0, indices).view(torch.float32).view(-1, 2)  # fp32 is enough
    if weights is not None:
        expected = expected * weights.to(torch.float64).unsqueeze(1)
        shares = shares * weights.to(torch.float32).square().unsqueeze(1)
    sums = _segment_float_sums(expected, lengths)  # (B, 2): S_exp, S±_exp
    spread = _segment_float_sums(shares, lengths).to(torch.float64)  # (B, 2)
    checks = torch.stack(
        [torch.ones(dim, dtype=torch.float64, device=out.device), diff_pattern(dim, out.device)], 1
    )
    got = out.double() @ checks  # (B, 2): an fp64 copy then a product, ~10× faster than sum(dtype=float64)
    energy = 1.5 * lengths.to(torch.float64) * torch.linalg.vector_norm(out, dim=1).double().square()
    var_plain = (U32 * U32 / 3) * (energy + spread[:, 0])
    var_signed = (U32 * U32 / 3) * (energy + spread[:, 1])
    fired = torch.zeros(out.shape[0], dtype=torch.bool, device=out.device)
    for resid, var, sigmas in (
        (got[:, 0] - sums[:, 0], var_plain, PLAIN_SIGMAS),
        (got[:, 1] - sums[:, 1], var_signed, SIGNED_SIGMAS),
    ):
        limit = sigmas * var.sqrt()
        fired |= ~(resid.abs() <= limit) | ~torch.isfinite(limit)
    return fired, sums[:, 0]


# ---------------------------------------------------------------------------------------------------
# Realistic mode: level 2, the rigorous recompute of flagged bags.


def confirm_bags(
    out: torch.Tensor,
    packed: torch.Tensor,
    stats: RowStats,
    indices: torch.Tensor,
    lengths: torch.Tensor,
    weights: torch.Tensor | None,
    flagged: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Level 2: recompute each flagged bag from its intended rows and bound its fp32 rounding rigorously.

    Args:
        out: (B, D) fp32 output of the op.
        packed: the table in memory; each intended row is first checked against its fingerprint.
        stats: RowStats of the intended table.
        indices, lengths, weights: the intended lookups, as for `trigger_bags`.
        flagged: (B,) bool from `trigger_bags`.
    Returns:
        (B,) bool confirmed bags (an element beyond its bound, or a row whose bytes changed), and (B,)
        bool bags confirmed because a row's bytes changed (a corrupted table in memory).
    Raises:
        ValueError: a bag longer than 21,845 lookups (the bound's premise 2·L·u < 0.003 fails).
    """
    confirmed = torch.zeros_like(flagged)
    corrupt = torch.zeros_like(flagged)
    bags = flagged.nonzero().flatten()
    if bags.numel() == 0:
        return confirmed, corrupt
    if int(lengths[bags].max()) > _MAX_CONFIRM_LENGTH:
        raise ValueError(f"confirm_bags: bags of more than {_MAX_CONFIRM_LENGTH} lookups are not supported")
    starts = torch.cumsum(lengths, 0) - lengths
    for chunk in bags.split(CONFIRM_CHUNK_BAGS):
        members, present = _members(starts[chunk], lengths[chunk])
        rows = indices[members] if indices.numel() else torch.zeros_like(members)  # (n, Lmax), padded
        w = None if weights is None else weights[members]
        fetched = packed[rows.flatten()]
        changed = (_fingerprints(fetched) != stats.fingerprints[rows.flatten()]).view(rows.shape)
        row_bad = (changed & present).any(1)
        reference, bound = bag_reference(fetched, stats.bits, present, w)
        elem_bad = (~((out[chunk].double() - reference).abs() <= bound)).any(1)  # NaN-safe
        confirmed[chunk] = row_bad | elem_bad
        corrupt[chunk] = row_bad
    return confirmed, corrupt


def running_bound(
    x: torch.Tensor, a: torch.Tensor, present: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp64 reference sums and rigorous bounds on |fp32 result − reference| for sequential bags.

    Args:
        x: (n, Lmax, D) fp64 member values w·(scale·q + bias), zero where absent.
        a: (n, Lmax, D) fp64 magnitudes |w|·(|scale|·q + |bias|), zero where absent.
        present: (n, Lmax) bool.
    Returns:
        (n, D) fp64 reference Ŝ_L and (n, D) fp64 bound T.

    Any kernel that adds a bag's members one at a time, in bag order, into an fp32 accumulator errs at
    member t by at most u(1 + 2u)·(|buf_t| + |buf_{t−1}| + 4·A_t), whatever its per-member formula
    (FBGEMM's fma(w·scale, q, buf + w·bias), torch CUDA's buf + w·fma(q, scale, bias), with or without
    fma). With S_t the exact partial sums, |buf_t| <= |S_t| + Ē, Ē = 6.1·L·u·M and M = Σ_t A_t
    (valid while 2·L·u < 0.003). The fp64 side: Ŝ_t differs from S_t by at most
    η = 1.1·(L + 2)·2^-53·M (member values and the prefix sums). Hence

        |out − Ŝ_L| <= u(1 + 2u)·(Σ_t (|Ŝ_t| + |Ŝ_{t−1}| + 4·A_t) + 2L·(η + Ē)) + η + 4L·2^-126,

    the last term for results below fp32's normal range (absolute errors, up to 2^-126 per operation
    where a kernel flushes them to zero), and a factor 1 + 2^-30 covers the rounding of this formula
    itself (docs/abft.md §2.3). The accumulator must be fp32 (u = 2^-24), as in every torch kernel.
    """
    length = present.sum(1, dtype=torch.int64).to(torch.float64)[:, None]  # (n, 1)
    partial = torch.cumsum(x, 1)  # Ŝ_t
    prev = torch.cat([torch.zeros_like(partial[:, :1]), partial[:, :-1]], 1)  # Ŝ_{t−1}
    mask = present.unsqueeze(2)
    path = torch.where(mask, partial.abs() + prev.abs() + 4 * a, 0.0).sum(1)  # (n, D)
    total = a.sum(1)  # M
    eta = 1.1 * (length + 2) * U64 * total
    e_bar = 6.1 * length * U32 * total
    bound = U32 * (1 + 2 * U32) * (path + 2 * length * (eta + e_bar)) + eta + 4 * length * TINY32
    return partial[:, -1], bound * (1 + 2.0**-30)


def bag_reference(
    fetched: torch.Tensor, bits: int, present: torch.Tensor, w: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp64 reference output and rigorous rounding bound of padded bags (see `running_bound`).

    Args:
        fetched: (n·Lmax, packed bytes) the members' packed rows, bag-major.
        bits: the table's bit width.
        present: (n, Lmax) bool, which members are real.
        w: (n, Lmax) per-sample weights, or None.
    Returns:
        (n, D) fp64 reference and (n, D) fp64 bound.
    """
    q, scale, bias = split_packed(fetched, bits)
    n, lmax = present.shape
    q64 = q.to(torch.float64).view(n, lmax, -1)
    s64, b64 = scale.double().view(n, lmax, 1), bias.double().view(n, lmax, 1)
    x = s64 * q64 + b64  # scale·q exact in fp64, one rounding for the bias
    a = s64.abs() * q64 + b64.abs()
    if w is not None:
        w64 = w.to(torch.float64).unsqueeze(2)
        x, a = x * w64, a * w64.abs()
    keep = present.unsqueeze(2)
    return running_bound(torch.where(keep, x, 0.0), torch.where(keep, a, 0.0), present)


def _members(starts: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, Lmax) positions of each bag's members in the index tensor (padded with the bag's start, or 0
    for an empty bag) and the (n, Lmax) mask of real members."""
    lmax = max(1, int(lengths.max()))
    steps = torch.arange(lmax, device=starts.device)
    present = steps.unsqueeze(0) < lengths.unsqueeze(1)
    positions = torch.where(present, starts.unsqueeze(1) + steps, 0)
    return positions, present


def _fingerprints(packed: torch.Tensor) -> torch.Tensor:
    """(N,) int64 Σ_k (2k + 1)·byte_k of each packed row (bytes below 2^8, so no overflow below 2^40)."""
    weights = torch.arange(1, 2 * packed.shape[1], 2, dtype=torch.int64, device=packed.device)
    return (packed.to(torch.int64) * weights).sum(1)  # no int64 matmul on CUDA


def _segment_float_sums(vals: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Per-bag sums of consecutive rows (zero for empty bags), accumulated in their own dtype."""
    if vals.shape[0] == 0:
        return torch.zeros((lengths.shape[0], *vals.shape[1:]), dtype=vals.dtype, device=vals.device)
    return torch.segment_reduce(vals, "sum", lengths=lengths, axis=0, unsafe=True)


@dataclass(frozen=True)
class RealisticVerdict:
    """The realistic check of one batch of bags.

    Attributes:
        bad: (B,) bool, confirmed bags (never rounding).
        expected: (B,) fp64 S_exp, for reporting.
        flagged: bags the trigger sent to the recompute (the check's cost on clean data).
        corrupt_rows: confirmed bags that read an intended row whose bytes changed in memory.
    """

    bad: torch.Tensor
    expected: torch.Tensor
    flagged: int
    corrupt_rows: int


def realistic_check(
    out: torch.Tensor,
    packed: torch.Tensor,
    stats: RowStats,
    indices: torch.Tensor,
    lengths: torch.Tensor,
    weights: torch.Tensor | None,
) -> RealisticVerdict:
    """Both levels: the trigger over every bag, the rigorous recompute over the flagged ones.

    Raises:
        ValueError: a flagged bag longer than 21,845 lookups.
    """
    flagged, expected = trigger_bags(out, stats, indices, lengths, weights)
    bad, corrupt = confirm_bags(out, packed, stats, indices, lengths, weights, flagged)
    return RealisticVerdict(bad, expected, int(flagged.sum()), int(corrupt.sum()))
