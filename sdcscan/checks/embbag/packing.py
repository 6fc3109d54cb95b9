"""Packed rows of rowwise-quantized EmbeddingBag tables (FBGEMM `embedding_bag_byte_rowwise_offsets` and
`embedding_bag_4bit_rowwise_offsets`): their layout, the op, unpacking, and dyadic (exact-mode) tables.

8-bit rows are D bytes q, then fp32 scale and bias; 4-bit rows are D/2 bytes of nibbles (element 2k in
the low nibble, 2k + 1 in the high one), then fp16 scale and bias; an element is scale·q + bias
(docs/abft.md §2.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch

from sdcscan.checks.limits import BITS  # torch-free there: the catalogue reads it

UNIT = 2**-7  # exact mode: every value is an integer multiple of this
UNIT_INV = 2**7


@dataclass(frozen=True)
class Layout:
    """How one packed row of a `bits`-bit table is laid out."""

    bits: int
    meta_bytes: int  # trailing bytes holding scale then bias
    meta_dtype: torch.dtype
    per_byte: int  # elements per q byte
    q_max: int


LAYOUTS = {
    8: Layout(8, 8, torch.float32, 1, 255),
    4: Layout(4, 4, torch.float16, 2, 15),
}
_BAG_OPS = {
    8: "embedding_bag_byte_rowwise_offsets",
    4: "embedding_bag_4bit_rowwise_offsets",
}


def layout(bits: int) -> Layout:
    """The row layout of a `bits`-bit table.

    Raises:
        ValueError: bits other than 8 or 4.
    """
    if bits not in LAYOUTS:
        raise ValueError(f"bits must be one of {BITS} (got {bits})")
    return LAYOUTS[bits]


def packed_dim(packed: torch.Tensor, bits: int) -> int:
    """The embedding dimension D of a packed table."""
    lay = layout(bits)
    return (packed.shape[1] - lay.meta_bytes) * lay.per_byte


def embedding_bag(
    packed: torch.Tensor,
    bits: int,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    weights: torch.Tensor | None,
) -> torch.Tensor:
    """The quantized EmbeddingBag op for the table's bit width (sum pooling; torch ignores `mode`)."""
    op = getattr(torch.ops.quantized, _BAG_OPS[layout(bits).bits])  # layout() rejects other widths
    return cast(torch.Tensor, op(packed, indices, offsets, False, 0, False, weights, None, False))


def unpack_q(packed: torch.Tensor, bits: int = 8) -> torch.Tensor:
    """(N, D) uint8 quantized values: a view for 8-bit tables, the nibbles spread out for 4-bit ones."""
    lay = layout(bits)
    body = packed[:, : packed.shape[1] - lay.meta_bytes]
    if bits == 8:
        return body
    return torch.stack([body & 15, body >> 4], 2).reshape(packed.shape[0], -1)


def split_packed(packed: torch.Tensor, bits: int = 8) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Packed rows → q (N, D) uint8, scale (N,) fp32, bias (N,) fp32 (fp16 widens exactly)."""
    lay = layout(bits)
    meta = packed[:, -lay.meta_bytes :].contiguous().view(lay.meta_dtype).to(torch.float32)  # (N, 2)
    return unpack_q(packed, bits), meta[:, 0], meta[:, 1]


def dyadic_pack(q: torch.Tensor, bias_units: torch.Tensor, bits: int = 8) -> torch.Tensor:
    """Build an exact-mode packed table by hand.

    Args:
        q: (N, D) uint8 quantized values, below 2^bits.
        bias_units: (N,) integers k in [-(2^bits − 1), 0]; bias = k·2^-7, scale = 2^-7 (exact in fp16 too).
        bits: 8 or 4.
    Returns:
        (N, packed bytes) uint8 in the layout FBGEMM's prepack writes.
    """
    lay = layout(bits)
    scale = torch.full((q.shape[0],), UNIT, dtype=torch.float32, device=q.device)
    meta = torch.stack([scale, bias_units.to(torch.float32) * UNIT], 1).to(lay.meta_dtype)  # exact
    body = q if bits == 8 else q[:, 0::2] | (q[:, 1::2] << 4)
    return torch.cat([body, meta.view(torch.uint8)], 1).contiguous()
