"""TF32: the tensor-core format in which Ampere and later GPUs take fp32 matmuls when a framework allows
it (most training code does, for matmuls and convolutions alike).

TF32 keeps fp32's 8-bit exponent and 10 of its 23 mantissa bits: each operand is rounded to 11
significant bits, the products are exact and the sums are kept in fp32. matmul_golden's `tfloat32` slot
feeds it integers |x| <= max_abs with k·max_abs² < 2^24. Every integer up to 2^11 is exact in TF32,
every product is exact, and so is every fp32 partial sum: the product equals the int64 reference bit
for bit on any correct unit, the same argument as for the other slots (docs/abft.md §4.3).

sdcscan keeps TF32 off everywhere else (sdcscan.torch_setup.configure_torch); `products` allows it around the slot's
matmuls only. Whether a unit has the datapath at all is asked of the unit itself (`missing`): one product
that TF32 rounds and fp32 does not. A CPU has none, so there the slot is reported as not covered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

PROBE = 1.0 + 2.0**-12  # exact in fp32; TF32 (10 mantissa bits) rounds it to 1.0


@contextlib.contextmanager
def products(device: torch.device) -> Iterator[None]:
    """Allow TF32 for fp32 matmuls on `device`'s kind within the block; restore the setting after.

    CUDA's switch on a GPU and on the meta device (which the cost model runs to stand for a GPU);
    oneDNN's on a CPU (torch 2.9 and later; before, a CPU has no switch and stays in fp32). CUDA's is set
    through the old API, as the worker sets it: torch refuses to read a switch set through both APIs.
    """
    switch: object
    value: str | bool
    if device.type == "cpu":
        switch, name, value = getattr(torch.backends.mkldnn, "matmul", None), "fp32_precision", "tf32"
    else:
        switch, name, value = torch.backends.cuda.matmul, "allow_tf32", True
    if switch is None:
        yield
        return
    before = getattr(switch, name)
    setattr(switch, name, value)
    try:
        yield
    finally:
        setattr(switch, name, before)


def allowed() -> bool:
    """Whether CUDA matmuls may take fp32 operands in TF32 now (what the cost model counts them at)."""
    return bool(torch.backends.cuda.matmul.allow_tf32)


def missing(device: torch.device, m: int, k: int, n: int) -> str | None:
    """Why this unit cannot multiply in TF32, or None when it does.

    One (m, k) @ (k, n) product with TF32 allowed, of a matrix of PROBE by a matrix whose first row is
    ones and the rest zeros: TF32 gives 1.0 everywhere, fp32 PROBE. The case's own shape, so the library
    picks the kind of kernel the cases will get. Only a product that kept fp32's precision everywhere
    makes the slot uncovered: any other result (a faulty unit's, say) leaves it to the cases' exact
    comparison to judge. The meta device has no values: the cost model counts the slot as a GPU runs it.
    """
    if device.type == "meta":
        return None
    a = torch.full((m, k), PROBE, device=device)
    b = torch.zeros((k, n), device=device)
    b[0] = 1.0
    with products(device):
        c = a @ b
    if bool((c == PROBE).all()):  # prepare may wait for the device: once per unit
        return "its fp32 matmul kept fp32 precision with TF32 allowed: no TF32 datapath"
    return None
