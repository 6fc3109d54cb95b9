"""Counting the True flags of a comparison without the copy torch would make of it.

`mask.sum(-1)` of a bool mask first converts the whole mask to the result's dtype, int64: torch's sum
converts its input before reducing (`aten::to` inside `aten::sum`; on a GPU it spares only half and
bfloat16 summed into float32). On an H200 that copy, 8 bytes written and read for each compared element,
made matmul_golden's exact comparison of bf16 outputs take 1.26 ms a repeat beside a 1.29 ms GEMM
(README "On a GPU"). Summing the flags as uint8 in groups that cannot wrap needs no copy of the mask:
only the group counts, 1/128 of it, are widened.
"""

from __future__ import annotations

import torch

GROUP = 128  # flags summed as uint8: at most 128, below 256


def count_true(mask: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """(..., n) bool -> (...) int64: the True flags along the last dimension, exactly `mask.sum(-1)`.

    `out`: an int64 tensor of the result's shape to write into (e.g. a slice of a tally).
    """
    n = mask.shape[-1]
    whole = n - n % GROUP
    flags = mask.view(torch.uint8)
    if out is None:
        out = torch.empty(mask.shape[:-1], dtype=torch.int64, device=mask.device)
    if whole:
        groups = flags[..., :whole].unflatten(-1, (whole // GROUP, GROUP)).sum(-1, dtype=torch.uint8)
        torch.sum(groups, -1, out=out)  # widens the group counts only
    else:
        out.zero_()
    if whole < n:
        out += flags[..., whole:].sum(-1)  # fewer than GROUP columns: their copy is small
    return out
