"""matmul_golden's exact comparison of a block of repeats: each repeat's bad elements per row, by torch
ops or by one Triton kernel that reads each output and each tile of the expected product once (issue 42).

By torch, `outputs != expected` reads the expected product again for every output of the block (134 MB
at 8192^2 in bf16, beyond a GPU's L2 cache) and writes a flag byte per element that `masks.count_true`
reads back: 3.1 bytes moved per byte of a bf16 output, 7.2% of an H200's 8192^3 bf16 GEMMs by the cost
model. The kernel (golden_compare_triton.py) holds a tile of the expected product while it compares the
block's outputs with it, and writes each row's count per block of columns, which torch adds up: about
1 + 1/R bytes per output byte for a block of R repeats.

An element is bad when its value differs as a float: NaN differs from everything, +0.0 equals -0.0 (as
BadElements defines it). Counts are integers, so the kernel's equal torch's bit for bit on any device.
Which path a case takes is matmul_golden's `check_kernel` (sdcscan/checks/triton_kernels.py), decided
once per unit with a trial on a small block (`agrees_on_a_small_block`). No lent GPU has run the kernel
yet, so "auto" keeps the torch ops on a GPU too; scripts/check_fused.py compares the two.
"""

from __future__ import annotations

import functools

import torch

from sdcscan.checks.masks import count_true

BLOCK = (16, 256)  # outputs a program compares in each repeat: rows by columns
NUM_WARPS = 4
COVERED = (torch.bfloat16, torch.float16, torch.float32, torch.float64)  # every slot's output dtype


def by_torch(outputs: torch.Tensor, expected: torch.Tensor, out: torch.Tensor) -> None:
    """Each repeat's bad elements per row of `outputs` (R, m, n) against `expected` (m, n), into `out`
    (R, m) int64, by torch ops."""
    count_true(outputs != expected, out=out)  # no int64 copy of the flags


def by_kernel(outputs: torch.Tensor, expected: torch.Tensor, out: torch.Tensor) -> None:
    """As `by_torch`, by the kernel's counts per block of columns, added up by torch."""
    torch.sum(torch.ops.sdcscan.golden_bad_partials(outputs, expected), -1, out=out)


@functools.cache
def tried(device: torch.device) -> bool:
    """`agrees_on_a_small_block` on `device`, run once a process: matmul_golden prepares once a unit, but
    the self-test makes many."""
    return agrees_on_a_small_block(device)


def agrees_on_a_small_block(device: torch.device) -> bool:
    """The kernel against the torch path on `device`, for each covered dtype, on a block that leaves
    programs partly outside it: a clean repeat, one with a flipped bit, one with NaN, infinities and a
    -0.0 where +0.0 is expected (not bad), and one wholly wrong. What a unit runs once at start-up."""
    g = torch.Generator().manual_seed(42)
    m, n = 40, 300
    for dtype in COVERED:
        expected = torch.randint(-64, 65, (m, n), generator=g).to(dtype)
        expected[3, :20] = 0.0
        outputs = expected.expand(4, m, n).clone()
        bits = outputs.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize])
        bits[1, 7, 299] ^= 1  # repeat 1: one element's lowest bit, in the last column's partial tile
        outputs[2, 39, 0], outputs[2, 0, 1], outputs[2, 3, :20] = float("nan"), float("inf"), -0.0
        outputs[3] += 1
        expected, outputs = expected.to(device), outputs.to(device)
        kernel = torch.zeros((4, m), dtype=torch.int64, device=device)
        reference = torch.zeros_like(kernel)
        by_kernel(outputs, expected, kernel)
        by_torch(outputs, expected, reference)
        totals = reference.sum(1).tolist()
        if not torch.equal(kernel, reference) or totals != [0, 1, 2, m * n]:
            return False
    return True


@torch.library.custom_op("sdcscan::golden_bad_partials", mutates_args=())
def _partials(outputs: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """The kernel: (R, m, column blocks) int64, each repeat's bad elements per row in each block of
    BLOCK[1] columns."""
    ok = outputs.dim() == 3 and outputs.shape[1:] == expected.shape and outputs.dtype == expected.dtype
    if not ok or outputs.dtype not in COVERED or not (outputs.is_contiguous() and expected.is_contiguous()):
        raise ValueError(
            "golden comparison: a contiguous (repeats, m, n) stack and its (m, n) expected output"
        )
    from sdcscan.checks import golden_compare_triton  # imports Triton: only where the kernel runs

    return golden_compare_triton.partials(outputs, expected, BLOCK, NUM_WARPS)


@_partials.register_fake
def _(outputs: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    repeats, m, n = outputs.shape
    return outputs.new_empty((repeats, m, -(-n // BLOCK[1])), dtype=torch.int64)
