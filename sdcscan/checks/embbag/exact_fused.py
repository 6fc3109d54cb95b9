"""The exact EmbeddingBag check and the output's fingerprint in one read of the output (issue 42).

`exact.exact_bad_bags` takes the counts of 2^-7 of every output element, their plain and column-weighted
sums per bag and the round trip of each count, in torch ops that move about 12 bytes per output byte,
and the fingerprint reads the output once more (17-25% of the lookups' time on an H200 by the cost
model). `bad_bags` gives the same bad-bag flags and the same fingerprint sum from one Triton kernel
(exact_triton.py), registered as the operator `sdcscan::embbag_exact_partials` so that the cost model
counts it as the one kernel it is. The flags are the torch path's bit for bit: the sums are compared
modulo 2^32 as the torch path's wrapping int32 sums are, and an element off the grid (NaN, Inf, a value
beyond int32, a fraction of 2^-7) condemns its bag on both paths whatever count it converts to.

Runs where `triton_kernels.choose` takes it for embbag_int8's `check_kernel`: by default on a GPU, where
an H200 matched it bit for bit (scripts/check_fused.py); on a CPU in Triton's interpreter, which is how
the tests hold it to the torch path.
"""

from __future__ import annotations

import torch

BAGS = 32  # bags per program: 32 × 64 elements of the GPU profiles' dim, 8 KB of output a program


def supports(dim: int) -> bool:
    """Whether a bag of `dim` elements is whole 64-bit words (the form the kernel reads)."""
    return dim % 2 == 0


def bad_bags(
    out: torch.Tensor, expected: torch.Tensor, weights: torch.Tensor, expected_weighted: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,) bool, `exact.exact_bad_bags(out, expected, weighted=(weights, expected_weighted))`, and the
    0-dim int64 `digest.fingerprint_words(out)`.

    Raises:
        ValueError: an output that is not a contiguous fp32 (B, D) tensor with D even.
    """
    if out.dtype != torch.float32 or out.dim() != 2 or not out.is_contiguous() or not supports(out.shape[1]):
        raise ValueError("embbag exact check: a contiguous fp32 (bags, dim) output with dim even is needed")
    bad, prints = torch.ops.sdcscan.embbag_exact_partials(out, expected, weights, expected_weighted)
    return bad != 0, prints.sum()  # int64 sums wrap mod 2^64 on every device, as the keyed sum does


def agrees_on_a_small_output(device: torch.device) -> bool:
    """The fused kernel against `exact.exact_bad_bags` and the fingerprint on a small output with clean
    bags, a bag off the grid (NaN, a fraction of 2^-7) and a wrong sum, on `device`: what a workload runs
    once at start-up."""
    from sdcscan.checks.digest import fingerprint_words
    from sdcscan.checks.embbag import exact
    from sdcscan.checks.embbag.packing import UNIT

    bags, dim = 2 * BAGS + 3, 16
    g = torch.Generator().manual_seed(7)
    units = torch.randint(-(2**17), 2**17, (bags, dim), generator=g, dtype=torch.int32).to(device)
    weights = exact.column_weights(dim, 7, device)
    expected, weighted = units.sum(1, dtype=torch.int32), (units * weights).sum(1, dtype=torch.int32)
    out = units.float() * UNIT
    out[1, 3], out[BAGS, 0], out[bags - 1, 5] = float("nan"), 0.001, out[bags - 1, 5] + 1
    flags, printed = bad_bags(out, expected, weights, weighted)
    want = exact.exact_bad_bags(out, expected, None, (weights, weighted))
    return torch.equal(flags, want) and torch.equal(printed, fingerprint_words(out)) and int(want.sum()) == 3


@torch.library.custom_op("sdcscan::embbag_exact_partials", mutates_args=())
def _partials(
    out: torch.Tensor, expected: torch.Tensor, weights: torch.Tensor, expected_weighted: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel: each bag's flag, and each program's keyed sum of its words."""
    from sdcscan.checks.embbag import exact_triton  # imports Triton: only where the kernel runs

    return exact_triton.partials(
        out, expected.to(torch.int32), weights.to(torch.int32), expected_weighted, BAGS
    )


@_partials.register_fake
def _(
    out: torch.Tensor, expected: torch.Tensor, weights: torch.Tensor, expected_weighted: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    programs = max(1, -(-out.shape[0] // BAGS))
    return out.new_empty(out.shape[0], dtype=torch.int8), out.new_empty(programs, dtype=torch.int64)
