"""Confirm before accusing (issue 44): a product's error measured against a bound correct arithmetic
cannot exceed, so that a check whose threshold is statistical only nominates and never convicts.

V-ABFT's threshold (`vabft`) assumes partial sums that grow like sums of random-sign products; learned
filters against structured inputs sum coherently, and clean products of a trained CNN crossed it (up to
2.7x). So the product of a nominated case is recomputed in fp64 from the same operands, and an element
is wrong only where |C - C64| exceeds Higham's bound for a dot product of length k (Accuracy and
Stability of Numerical Algorithms, 2nd ed., §3.1, eq. 3.5: |fl(x.y) - x.y| <= gamma_k |x|.|y|),
accumulated in the kernel's precision, plus the one rounding to the output format:

    |C_ij - C64_ij| <= (gamma_k(u_acc) + gamma_k(2^-53)) (1 + gamma_k(2^-53)) S_ij
                       + u_out (|C64_ij| + gamma_k(u_acc) S_ij) + k tiny_acc + tiny_out,

with S = |A| @ |B| (computed in fp64: its own rounding is the last factor), u_acc the unit roundoff of
the accumulation, u_out that of the output format, and the tiny terms the underflow of subnormal
partial products. It holds in any summation order and for any blocking, whatever the inputs.

The assumption, stated: bf16 and fp16 products accumulate in fp32. torch on a CPU does (oneDNN, AMX); on
a GPU cuBLAS does when reduced-precision reductions are off, which every sdcscan worker sets
(`sdcscan.torch_setup.configure_torch`), as it keeps TF32 off for fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sdcscan.checks.limits import gamma

FP64_UNIT = 2.0**-53
# Unit roundoff of the accumulation and of the output, per operand dtype.
ACCUMULATION_UNIT = {
    torch.float64: 2.0**-53,
    torch.float32: 2.0**-24,
    torch.bfloat16: 2.0**-24,
    torch.float16: 2.0**-24,
}
OUTPUT_UNIT = {
    torch.float64: 2.0**-53,
    torch.float32: 2.0**-24,
    torch.bfloat16: 2.0**-8,
    torch.float16: 2.0**-11,
}
_ACCUMULATOR = {torch.float64: torch.float64}  # the rest accumulate in fp32


@dataclass(frozen=True, slots=True)
class ProductErrors:
    """(M, N) float64: the fp64 reference, |C - C64| (NaN where C is not finite) and the bound."""

    reference: torch.Tensor
    error: torch.Tensor
    bound: torch.Tensor

    @property
    def wrong(self) -> torch.Tensor:
        """(M, N) True where the error exceeds the bound, or C is NaN or infinite while C64 is finite."""
        return ~(self.error <= self.bound)


def product_errors(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> ProductErrors:
    """How far C = A @ B (as computed, in A's dtype) lies from the fp64 product of the same operands,
    against the bound no correct kernel exceeds (module docstring)."""
    k = a.shape[-1]
    a64, b64 = a.double(), b.double()
    reference = a64 @ b64
    spread = a64.abs() @ b64.abs()
    acc_unit, out_unit = ACCUMULATION_UNIT[a.dtype], OUTPUT_UNIT[a.dtype]
    tiny_acc = torch.finfo(_ACCUMULATOR.get(a.dtype, torch.float32)).tiny
    accumulated = gamma(k, acc_unit) * spread
    bound = (
        (gamma(k, acc_unit) + gamma(k, FP64_UNIT)) * (1 + gamma(k, FP64_UNIT)) * spread
        + out_unit * (reference.abs() + accumulated)
        + k * tiny_acc
        + torch.finfo(a.dtype).tiny
    )
    error = (c.double() - reference).abs()
    return ProductErrors(reference, error, bound)
