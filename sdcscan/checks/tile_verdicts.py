"""gemm_fp's verdicts on a block of repeats, by torch ops or by one Triton kernel that reads each output
once (issue 42).

A block is R outputs of one product, each checked by its row and column tile sums against the
expectations and thresholds of `vabft.Expected`; what the repeat loop keeps of it is a `BlockVerdict`:
the largest |d|/t, how many rows and columns failed, which repeats failed, and (from the kernel) each
repeat's fingerprint. In torch on a GPU that is two reductions of the block and a dozen passes over the
residuals: by the cost model about 7 bytes moved per byte of a bf16 output, beside the fingerprint's one
(`scripts/gpu_model.py`; an H200 measured 911 ms of checks against 504 ms of bf16 GEMMs a case before the
last three savings). The kernel (tile_verdicts_triton.py) reads each output once and writes a few
partials a row and a column.

The kernel sums in its own order (a tree over each tile, each line's total per program), so its residuals
differ from torch's by the checker's rounding, and calibration measured e_max in torch's order. It is
taken only where the checker is more precise than the output (bf16 and fp16 checked in fp32, fp32 in
fp64), whose rounding, 2^-8 to 2^-24 relative, then dominates every residual: on 512 x 4096 x 4096
products with this CPU's e_max, the kernel's order moved no residual by more than 1.7e-4 of its threshold
(fp16 on N(0,1) operands; bf16 1.2e-5; fp32 in fp64 and |N|+0.5 operands not at all), against the
factor of 2 calibration leaves (scripts/tile_sum_order.py). fp64 checked in fp64 keeps the torch ops:
there the checker's rounding of a long total is as large as the product's own. The statistical verdicts
only nominate a repeat; gemm_fp convicts an element once fp64 confirms it (sdcscan/checks/confirm.py), so
a kernel that nominated wrongly could not fail a unit.
The fingerprints are sums mod 2^64: the kernel's are the torch path's bit for bit.

Which path a case takes is gemm_fp's `check_kernel` (sdcscan/checks/triton_kernels.py), decided once per
unit with a trial on a small block (`agrees_on_a_small_block`), and `covers` for each dtype. No lent GPU
has run the kernel yet, so "auto" keeps the torch ops on a GPU too; scripts/check_fused.py compares the two.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from sdcscan.checks import vabft
from sdcscan.checks.limits import TILE, UNIT_ROUNDOFF

BLOCK = (32, 32)  # outputs a program covers: rows by columns
NUM_WARPS = 4
# The output dtypes the kernel reads, and the checker each needs to be taken (module docstring).
COVERED = {torch.bfloat16: torch.float32, torch.float16: torch.float32, torch.float32: torch.float64}


@dataclass(frozen=True, slots=True)
class BlockVerdict:
    """What the checks of a block of R repeats found, on the device (nothing read).

    Attributes:
        ratio: () float64, max |d|/t over every checksum (inf where a residual is NaN).
        bad: (2,) int64, failing rows and failing columns over the block (a line counts once per repeat).
        failed: (R,) bool, whether each repeat has a failing checksum.
        fingerprints: (R,) int64, each repeat's keyed sum (`digest.fingerprint_words`), or None where the
            path left them to the caller.
    """

    ratio: torch.Tensor
    bad: torch.Tensor
    failed: torch.Tensor
    fingerprints: torch.Tensor | None = None


def covers(dtype: torch.dtype, checker: torch.dtype, m: int, n: int) -> bool:
    """Whether the kernel can check (m, n) outputs of `dtype` checked in `checker`: a covered pair, and
    whole tiles along both sides (vabft's tiles are TILE wide only where TILE divides the line)."""
    return COVERED.get(dtype) == checker and m % TILE == 0 and n % TILE == 0


def by_torch(outs: torch.Tensor, exp: vabft.Expected) -> BlockVerdict:
    """The block's verdict by torch ops (`vabft.verify`); the fingerprints are left to the caller."""
    rows, cols = vabft.verify(outs, exp)
    return BlockVerdict(
        ratio=torch.maximum(rows.ratio_tensor(), cols.ratio_tensor()),
        bad=torch.stack([rows.failing_lines().sum(), cols.failing_lines().sum()]),
        failed=rows.bad.flatten(1).any(dim=1) | cols.bad.flatten(1).any(dim=1),
    )


def by_kernel(outs: torch.Tensor, exp: vabft.Expected) -> BlockVerdict:
    """The block's verdict and fingerprints by the kernel's partials, finished by torch on the partials
    (a few bytes a row and a column): each line's total against its expectation, and the reductions."""
    row_part, col_part, row_flag, col_flag, ratios, prints = torch.ops.sdcscan.fp_tile_partials(
        outs, exp.rows, exp.row_t, exp.cols, exp.col_t
    )
    ratio, failing = ratios.amax(), []
    for part, flags, expected, t in (
        (row_part, row_flag, exp.rows, exp.row_t),
        (col_part, col_flag, exp.cols, exp.col_t),
    ):
        bad = flags.any(dim=-1)  # (R, lines): a failing tile in any program
        if expected.shape[1] > 1:  # a line of more than one tile has its total as the last checksum
            total = vabft.judged(part.sum(dim=-1) - expected[:, -1], t[:, -1])
            ratio = torch.maximum(ratio, total.ratio_tensor())
            bad |= total.bad
        failing.append(bad)
    rows, cols = failing
    return BlockVerdict(
        ratio=ratio,
        bad=torch.stack([rows.sum(), cols.sum()]),
        failed=rows.any(dim=1) | cols.any(dim=1),
        fingerprints=prints.flatten(1).sum(dim=1),  # int64 sums wrap mod 2^64 on every device
    )


@functools.cache
def tried(device: torch.device) -> bool:
    """`agrees_on_a_small_block` on `device`, run once a process: gemm_fp prepares once a unit, but the
    self-test and library callers make many."""
    return agrees_on_a_small_block(device)


def agrees_on_a_small_block(device: torch.device) -> bool:
    """The kernel against the torch path on `device`, for each covered dtype, on a block that leaves
    programs partly outside it, clean and with faults far beyond any threshold: the same failing rows,
    columns and repeats, ratios within the checker's rounding, and the same fingerprints. What a unit runs
    once at start-up."""
    from sdcscan.checks.digest import RepeatDigest

    g = torch.Generator().manual_seed(42)
    for dtype, checker in COVERED.items():
        m, k, n = 72, 32, 80
        a = (torch.randn((m, k), generator=g).abs() + 0.5).to(dtype)
        b = (torch.randn((k, n), generator=g).abs() + 0.5).to(dtype)
        # e_max at 16 unit roundoffs of the output: clean checksums stay far below their thresholds
        e_max = 16 * UNIT_ROUNDOFF[str(dtype).removeprefix("torch.")]
        a, b = a.to(device), b.to(device)
        exp = vabft.expected(a, b, vabft.encode(b, checker), checker, e_max)
        outs = (a.to(checker) @ b.to(checker)).to(dtype).expand(3, m, n).clone()
        outs[1, 5, 70] *= 4  # repeat 1: one row and one column off by far more than rounding
        outs[2, 64:72, 8] = float("nan")  # repeat 2: a column tile of NaN
        kernel, reference = by_kernel(outs, exp), by_torch(outs, exp)
        digest = RepeatDigest()
        digest.add_stack(outs)
        assert kernel.fingerprints is not None
        if not (
            torch.equal(kernel.bad, reference.bad)
            and torch.equal(kernel.failed, reference.failed)
            and torch.equal(kernel.fingerprints, digest.sums())
            and math.isclose(float(kernel.ratio), float(reference.ratio), rel_tol=1e-3)
            and kernel.failed.tolist() == [False, True, True]
        ):
            return False
    return True


@torch.library.custom_op("sdcscan::fp_tile_partials", mutates_args=())
def _partials(
    outs: torch.Tensor, rows: torch.Tensor, row_t: torch.Tensor, cols: torch.Tensor, col_t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The kernel: per program of BLOCK outputs and per repeat, its shares of each row's and column's
    total, flags of its failing rows and columns, its largest ratio and its keyed sum."""
    contiguous = all(t.is_contiguous() for t in (outs, rows, row_t, cols, col_t))
    if outs.dim() != 3 or not contiguous or not covers(outs.dtype, rows.dtype, *outs.shape[1:]):
        raise ValueError("fp tile checks: a contiguous (repeats, m, n) stack of a covered dtype is needed")
    from sdcscan.checks import tile_verdicts_triton  # imports Triton: only where the kernel runs

    made = tile_verdicts_triton.partials(outs, (rows, row_t, cols, col_t), BLOCK, TILE, NUM_WARPS)
    return made[0], made[1], made[2], made[3], made[4], made[5]


@_partials.register_fake
def _(
    outs: torch.Tensor, rows: torch.Tensor, row_t: torch.Tensor, cols: torch.Tensor, col_t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    repeats, m, n = outs.shape
    mb, nb = -(-m // BLOCK[0]), -(-n // BLOCK[1])
    return (
        outs.new_empty((repeats, m, nb), dtype=rows.dtype),
        outs.new_empty((repeats, n, mb), dtype=rows.dtype),
        outs.new_empty((repeats, m, nb), dtype=torch.int8),
        outs.new_empty((repeats, n, mb), dtype=torch.int8),
        outs.new_empty((repeats, mb, nb), dtype=torch.float64),
        outs.new_empty((repeats, mb, nb), dtype=torch.int64),
    )
