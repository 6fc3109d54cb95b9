"""The fp8 tensor-core product as inference and training run it: `torch._scaled_mm` on fp8 operands with
an fp32 output (cuBLASLt on Hopper; a reference kernel on the CPU).

matmul_golden's fp8 slots feed it small integers, which fp8 holds exactly: e4m3 every integer up to 16,
e5m2 (two mantissa bits) every integer up to 8. With unit scales and k·max_abs² below 2^24 every partial
sum is exact in fp32, so the product equals the int64 reference bit for bit on any correct unit
(issue 44: measured exact on a CPU with torch 2.13 at 256×512×256).

cuBLASLt multiplies e4m3 by e4m3 or mixes e4m3 with e5m2, never two e5m2 operands, and wants B
column-major with every dimension a multiple of 16: the `float8_e5m2` slot is A in e4m3 times B in e5m2,
the pairing of a backward pass (activations by gradients).
"""

from __future__ import annotations

import torch

from sdcscan.checks.limits import FP8_SLOTS

OPERANDS: dict[str, tuple[torch.dtype, torch.dtype]] = dict(  # slot name -> (A's type, B's type)
    zip(
        FP8_SLOTS,
        ((torch.float8_e4m3fn, torch.float8_e4m3fn), (torch.float8_e4m3fn, torch.float8_e5m2)),
        strict=True,
    )
)


def operands(a: torch.Tensor, b: torch.Tensor, slot: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A (m, k) and B (k, n) in the slot's fp8 types, B column-major (as cuBLASLt's fp8 kernels want)."""
    a_type, b_type = OPERANDS[slot]
    return a.to(a_type), b.t().contiguous().to(b_type).t()


def unit_scale(device: torch.device) -> torch.Tensor:
    """The scale 1.0 `_scaled_mm` takes for A and for B: made once by a caller that multiplies often, so
    a repeat launches its product and nothing else."""
    return torch.ones((), dtype=torch.float32, device=device)


def scaled_mm(
    a8: torch.Tensor, b8: torch.Tensor, out: torch.Tensor | None = None, *, scale: torch.Tensor | None = None
) -> torch.Tensor:
    """A·B in fp32 with unit scales (`out`, when given, receives it; `scale`, when given, is `unit_scale`'s
    tensor on A's device, else one is made)."""
    one = unit_scale(a8.device) if scale is None else scale
    if out is None:
        return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.float32)
    return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.float32, out=out)
