"""Float embedding tables with the value distributions of trained ones, quantized as FBGEMM packs them.

The realistic EmbeddingBag check (sdcscan/checks/embbag/) must hold, and be measured, on tables like
those deployed, not only on uniform random ones: heavy-tailed values, per-row scales spanning orders of
magnitude, near-constant rows, a mean direction shared by every row and a few outlier dimensions (as in
the embedding tables of trained language models). Each family below is one such shape; `mixed_tables`
cycles through them in blocks of rows, so bags drawn at random mix them.

Quantization is torch's own prepack (FBGEMM's rowwise min/max): 8-bit rows are D bytes then fp32 scale
and bias; 4-bit rows are D/2 bytes of nibbles (element 2k in the low nibble) then fp16 scale and bias.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import torch

# name -> what it models (docs/abft.md §2.5)
FAMILIES = {
    "uniform": "U(-0.05, 0.05)",
    "normal": "N(0, 0.1²) plus a per-row offset N(0, 0.05²)",
    "student_t": "Student-t, 3 degrees of freedom, × 0.05: rare large values set each row's range",
    "row_scales": "N(0, 1) × a per-row scale log-uniform over 1e-4..1e0",
    "near_constant": "the normal family with 2% of rows near-constant (half exactly, half with noise 1e-6)",
    "lm_like": "shared mean direction, Student-t(5) values, log-normal row norms, 2% outlier dimensions",
}
LOG_SCALE_RANGE = (-4.0, 0.0)  # row_scales: log10 of the smallest and largest per-row scale
NEAR_CONSTANT_EVERY = 50  # near_constant: one row in this many


def constant_rows(rows: int, dim: int, g: torch.Generator) -> torch.Tensor:
    """Rows of one value each, N(0, 1): even rows exactly constant (FBGEMM stores scale 0 for 8-bit), odd
    rows with a relative noise of 1e-6, far below one step of any quantizer of the row's range."""
    level = torch.randn(rows, 1, generator=g)
    noisy = (torch.arange(rows) % 2 == 1).unsqueeze(1).float()
    return level + noisy * level * 1e-6 * torch.randn(rows, dim, generator=g)


def float_table(family: str, rows: int, dim: int, g: torch.Generator) -> torch.Tensor:
    """A (rows, dim) fp32 table drawn from `family` (one of FAMILIES).

    Raises:
        ValueError: an unknown family.
    """
    if family == "uniform":
        return (torch.rand(rows, dim, generator=g) * 2 - 1) * 0.05
    if family == "normal":
        return torch.randn(rows, dim, generator=g) * 0.1 + torch.randn(rows, 1, generator=g) * 0.05
    if family == "student_t":
        return _student_t(3.0, (rows, dim), g) * 0.05
    if family == "row_scales":
        low, high = LOG_SCALE_RANGE
        exponent = torch.rand(rows, 1, generator=g, dtype=torch.float64) * (high - low) + low
        return (torch.randn(rows, dim, generator=g) * torch.pow(10.0, exponent).float()).contiguous()
    if family == "near_constant":
        table = float_table("normal", rows, dim, g)
        picked = torch.randperm(rows, generator=g)[: max(1, rows // NEAR_CONSTANT_EVERY)]
        table[picked] = constant_rows(len(picked), dim, g)
        return table
    if family == "lm_like":
        return _lm_like(rows, dim, g)
    raise ValueError(f"unknown table family {family!r}; expected one of {', '.join(FAMILIES)}")


def quantize(table: torch.Tensor, bits: int) -> torch.Tensor:
    """FBGEMM rowwise quantization of an fp32 table by torch's prepack op: (rows, packed bytes) uint8.

    Raises:
        ValueError: bits other than 8 or 4.
    """
    if bits == 8:
        return cast(torch.Tensor, torch.ops.quantized.embedding_bag_byte_prepack(table))
    if bits == 4:
        return cast(torch.Tensor, torch.ops.quantized.embedding_bag_4bit_prepack(table))
    raise ValueError(f"bits must be 8 or 4 (got {bits})")


def mixed_tables(
    g: torch.Generator, rows: int, dim: int, bits: Sequence[int], *, chunk_rows: int = 1 << 16
) -> dict[int, torch.Tensor]:
    """Packed tables (one per bit width, quantized from the same floats) whose rows cycle through every
    family in blocks, built chunk by chunk so a million-row table is never held in fp32 at once.

    Blocks are a sixth of a chunk (or of the table, if smaller), so any table of a few hundred rows holds
    every family, and bags drawn at random mix them.
    """
    names = list(FAMILIES)
    block = max(1, min(chunk_rows, rows) // len(names))
    chunks: dict[int, list[torch.Tensor]] = {b: [] for b in bits}
    for start in range(0, rows, chunk_rows):
        n = min(chunk_rows, rows - start)
        parts = []
        for k, first in enumerate(range(0, n, block)):
            family = names[(start // block + k) % len(names)]
            parts.append(float_table(family, min(block, n - first), dim, g))
        floats = torch.cat(parts)
        for b in bits:
            chunks[b].append(quantize(floats, b))
    return {b: torch.cat(c).contiguous() for b, c in chunks.items()}


def zipf_indices(count: int, rows: int, g: torch.Generator, exponent: float = 1.1) -> torch.Tensor:
    """`count` row ids with P(rank k) ∝ k^-exponent over a random permutation of the rows (hot rows)."""
    ranks = torch.arange(1, rows + 1, dtype=torch.float64)
    probs = ranks.pow(-exponent)
    picks = torch.multinomial(probs / probs.sum(), count, replacement=True, generator=g)
    return torch.randperm(rows, generator=g)[picks]


def _student_t(dof: float, shape: tuple[int, int], g: torch.Generator) -> torch.Tensor:
    """Student-t samples as N(0,1) / sqrt(χ²_dof / dof), the χ² drawn as a sum of squared normals."""
    normal = torch.randn(shape, generator=g)
    chi2 = torch.randn((*shape, math.ceil(dof)), generator=g).square().sum(-1)
    return normal / torch.sqrt(chi2 / math.ceil(dof))


def _lm_like(rows: int, dim: int, g: torch.Generator) -> torch.Tensor:
    """Token embeddings of a trained language model, in shape: a mean direction shared by every row
    (anisotropy), heavy-tailed values, row norms spread log-normally and a few outlier dimensions."""
    mean = torch.randn(1, dim, generator=g) * 0.02
    values = _student_t(5.0, (rows, dim), g) * 0.02
    norms = torch.exp(torch.randn(rows, 1, generator=g) * 0.5)
    outliers = torch.ones(1, dim)
    outliers[0, torch.randperm(dim, generator=g)[: max(1, dim // 50)]] = 10.0
    return (mean + values * norms) * outliers
