"""matmul_golden's exact comparison as one Triton kernel: each tile of the expected product loaded once
and held while the block's outputs are compared with it (sdcscan/checks/golden_compare.py says what it
computes and why). Imported only where a kernel runs: it imports Triton."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# An output's bits are loaded as the integer of its width and reinterpreted as its float format (as the
# other check kernels load them: one path for every format, the interpreter's included).
BITS = {
    torch.bfloat16: torch.int16,
    torch.float16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}
_FLOAT = {
    torch.bfloat16: tl.bfloat16,
    torch.float16: tl.float16,
    torch.float32: tl.float32,
    torch.float64: tl.float64,
}
# The format values are compared in: 2-byte floats widened to fp32, which holds each of their values
# exactly (NaN stays NaN, -0.0 equals +0.0). In Triton's interpreter (3.x) a bf16 -0.0 compared unequal
# to +0.0 (agrees_on_a_small_block found it); in fp32 it compares equal there and on a GPU.
_COMPARED = {**_FLOAT, torch.bfloat16: tl.float32, torch.float16: tl.float32}


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]
def _kernel(
    outputs_ptr: tl.tensor,
    expected_ptr: tl.tensor,
    partials_ptr: tl.tensor,
    repeats: tl.tensor,
    m: tl.tensor,
    n: tl.tensor,
    FLOAT: tl.constexpr,
    COMPARED: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
) -> None:
    """Program (row block, column block): for each repeat, the bad elements of each of its BM rows within
    its BN columns, into partials[repeat, row, column block]. Bad: the values differ as floats (NaN
    differs from everything, +0.0 equals -0.0)."""
    rb = tl.program_id(0).to(tl.int64)
    cb = tl.program_id(1).to(tl.int64)
    nb = tl.num_programs(1).to(tl.int64)
    rows = rb * BM + tl.arange(0, BM).to(tl.int64)
    cols = cb * BN + tl.arange(0, BN).to(tl.int64)
    inside = (rows[:, None] < m) & (cols[None, :] < n)
    at = rows[:, None] * n + cols[None, :]
    expected = tl.load(expected_ptr + at, mask=inside, other=0).to(FLOAT, bitcast=True).to(COMPARED)
    m64 = m.to(tl.int64)  # a block of outputs passes 2^31 elements (32 repeats of 8192^2)
    for r in range(repeats):
        bits = tl.load(outputs_ptr + r * m64 * n + at, mask=inside, other=0)
        bad = (bits.to(FLOAT, bitcast=True).to(COMPARED) != expected) & inside
        counts = tl.sum(bad.to(tl.int64), axis=1)
        tl.store(partials_ptr + (r * m64 + rows) * nb + cb, counts, mask=rows < m)


def partials(
    outputs: torch.Tensor, expected: torch.Tensor, block: tuple[int, int], warps: int
) -> torch.Tensor:
    """(repeats, m, column blocks) int64: each repeat's bad elements per row within each block of columns,
    for a contiguous (repeats, m, n) stack of outputs and the contiguous (m, n) expected output."""
    repeats, m, n = outputs.shape
    bm, bn = block
    mb, nb = -(-m // bm), -(-n // bn)
    made = outputs.new_empty((repeats, m, nb), dtype=torch.int64)
    bits = BITS[outputs.dtype]
    _kernel[(mb, nb)](
        outputs.view(bits),
        expected.view(bits),
        made,
        repeats,
        m,
        n,
        FLOAT=_FLOAT[outputs.dtype],
        COMPARED=_COMPARED[outputs.dtype],
        BM=bm,
        BN=bn,
        num_warps=warps,
    )
    return made
