"""Which `torch._int_mm` route `gemm_int8` takes on a device: the one rule, read by the workload and by
the plain-op peak that its efficiency is measured against (sdcscan/peaks/plain_ops.py).

"unsigned" is u8 × s8 (VNNI's native pair on a CPU); "signed" is s8 × s8 with the activations shifted
by 128 (sdcscan/checks/int8.py): every row identity holds for that product as it is, and its column sums
move by a constant per column, so it is checked and digested as it is. A cohort shares one torch and so
one route. CUDA's
`_int_mm` takes int8 × int8 only. CPU kernels differ by torch release: torch 2.13.0+cpu takes a uint8 A,
while torch 2.11.0+cu130's CPU kernel refused it ("int_mm_out_cpu: Expected self dtype to be of type
int8 but got unsigned char", seen on an AMX Xeon beside an H200), which made every CPU unit's setup
fail. So "auto" asks the CPU kernel once, and takes the signed route where the unsigned one is refused.
"""

from __future__ import annotations

import functools

import torch


def takes_signed_path(path: str, device: torch.device) -> bool:
    """Whether `gemm_int8` with this `path` parameter ("auto", "unsigned" or "signed") multiplies s8 × s8
    on `device`."""
    if path == "signed":
        return True
    if path == "unsigned":
        return False
    return device.type != "cpu" or not cpu_takes_unsigned()


@functools.cache
def cpu_takes_unsigned() -> bool:
    """Whether this torch's CPU `_int_mm` accepts a uint8 A (any refusal is read as "no")."""
    a = torch.ones((32, 8), dtype=torch.uint8)
    w = torch.ones((8, 8), dtype=torch.int8)
    try:
        torch._int_mm(a, w.t())
    except RuntimeError:
        return False
    return True
