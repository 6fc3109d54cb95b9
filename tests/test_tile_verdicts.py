"""gemm_fp's fused block check (sdcscan/checks/tile_verdicts.py) against the torch path, in Triton's
interpreter (TRITON_INTERPRET=1, set for this suite): the same failing rows, columns and repeats on clean
blocks and under every kind of fault, ratios within the checker's rounding, fingerprints bit for bit."""

from __future__ import annotations

import math

import pytest
import torch

from sdcscan.checks import tile_verdicts, triton_kernels, vabft
from sdcscan.checks.digest import RepeatDigest
from sdcscan.checks.limits import UNIT_ROUNDOFF

pytest.importorskip("triton")
CPU = torch.device("cpu")
# (m, k, n): whole programs, programs partly outside the block along either side, a line of one tile
SHAPES = [(64, 32, 96), (72, 16, 40), (8, 24, 8), (40, 8, 136)]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def block(dtype: torch.dtype, shape: tuple[int, int, int], repeats: int = 3, seed: int = 0):
    """(outs, expectations): `repeats` clean products of |N(0,1)| + 0.5 operands, checked as gemm_fp checks
    them, with an e_max of 4 unit roundoffs of the output (clean checksums below a third of their thresholds)."""
    m, k, n = shape
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn((m, k), generator=g).abs() + 0.5).to(dtype)
    b = (torch.randn((k, n), generator=g).abs() + 0.5).to(dtype)
    checker = tile_verdicts.COVERED[dtype]
    e_max = 4 * UNIT_ROUNDOFF[str(dtype).removeprefix("torch.")]
    exp = vabft.expected(a, b, vabft.encode(b, checker), checker, e_max)
    return torch.stack([a @ b for _ in range(repeats)]), exp


def both(outs: torch.Tensor, exp: vabft.Expected):
    """(kernel's verdict, torch's verdict, the fingerprints RepeatDigest takes of the block)."""
    digest = RepeatDigest()
    digest.add_stack(outs)
    return tile_verdicts.by_kernel(outs, exp), tile_verdicts.by_torch(outs, exp), digest.sums()


def assert_same(kernel, reference, prints) -> None:
    assert torch.equal(kernel.bad, reference.bad), (kernel.bad, reference.bad)
    assert torch.equal(kernel.failed, reference.failed), (kernel.failed, reference.failed)
    assert torch.equal(kernel.fingerprints, prints)
    assert math.isclose(float(kernel.ratio), float(reference.ratio), rel_tol=1e-3)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_clean_block_passes_with_torchs_ratio_and_fingerprints(dtype, shape) -> None:
    outs, exp = block(dtype, shape)
    kernel, reference, prints = both(outs, exp)
    assert_same(kernel, reference, prints)
    assert not kernel.failed.any() and 0 < float(kernel.ratio) < 1


def _flip(outs: torch.Tensor, r: int, i: int, j: int, bit: int) -> None:
    words = outs.view({2: torch.int16, 4: torch.int32}[outs.element_size()])
    words[r, i, j] ^= torch.tensor(1 << bit, dtype=torch.int64).to(words.dtype)


LOW_EXP = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}  # the lowest exponent bit: a factor 2
# Faults: each strikes repeat 1 (or 1 and 2) of three; repeat 0 stays clean.
FAULTS = {
    "sign of one element": lambda o: _flip(o, 1, 3, 5, o.element_size() * 8 - 1),
    "top exponent bit": lambda o: _flip(o, 1, o.shape[1] - 1, o.shape[2] - 1, o.element_size() * 8 - 2),
    "lowest exponent bit in the last program": lambda o: _flip(
        o, 1, o.shape[1] - 2, o.shape[2] - 3, LOW_EXP[o.dtype]
    ),
    "NaN": lambda o: o[1, 0, 0].fill_(float("nan")),
    "inf": lambda o: o[2, 5, 1].fill_(float("inf")),
    "a column tile zeroed": lambda o: o[1, :8, 2].zero_(),
    "two elements of a row swapped": lambda o: o[1, 2, :2].copy_(o[1, 2, :2].flip(0) * 1.5),
    "two repeats struck": lambda o: (_flip(o, 1, 0, 0, 14), _flip(o, 2, 7, 7, 14)),
}


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("shape", SHAPES[:2])
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_struck_block_fails_where_torch_fails(dtype, shape, fault) -> None:
    outs, exp = block(dtype, shape)
    FAULTS[fault](outs)
    kernel, reference, prints = both(outs, exp)
    assert_same(kernel, reference, prints)
    assert kernel.failed.tolist()[0] is False and kernel.failed.any(), kernel.failed


def test_a_fault_in_any_program_moves_only_its_repeats_verdict() -> None:
    """One element in each program's corner, one repeat each: every program's checks see their own."""
    m, _, n = shape = (72, 16, 80)
    corners = [
        (i, j) for i in range(0, m, tile_verdicts.BLOCK[0]) for j in range(0, n, tile_verdicts.BLOCK[1])
    ]
    outs, exp = block(torch.bfloat16, shape, repeats=len(corners) + 1)
    for r, (i, j) in enumerate(corners, start=1):
        outs[r, i, j] *= 8
    kernel, reference, prints = both(outs, exp)
    assert_same(kernel, reference, prints)
    assert kernel.failed.tolist() == [False] + [True] * len(corners)
    assert kernel.bad.tolist() == [len(corners), len(corners)]


def test_the_trial_passes_here_and_a_kernel_that_disagrees_is_refused(monkeypatch) -> None:
    assert tile_verdicts.agrees_on_a_small_block(CPU)
    plain = tile_verdicts.by_kernel

    def blind(outs, exp):  # a kernel that sees no failing column
        found = plain(outs, exp)
        return tile_verdicts.BlockVerdict(
            found.ratio, found.bad * torch.tensor([1, 0]), found.failed, found.fingerprints
        )

    monkeypatch.setattr(tile_verdicts, "by_kernel", blind)
    take, why = triton_kernels.choose(
        "fused", CPU, "gemm_fp", lambda: tile_verdicts.agrees_on_a_small_block(CPU)
    )
    assert not take and "failed its start-up trial" in why


@pytest.mark.parametrize(
    ("dtype", "checker", "m", "n", "covered"),
    [
        (torch.bfloat16, torch.float32, 64, 64, True),
        (torch.float32, torch.float64, 8, 16, True),
        (torch.float32, torch.float32, 64, 64, False),  # the checker's rounding as large as the output's
        (torch.float64, torch.float64, 64, 64, False),
        (torch.bfloat16, torch.float64, 64, 64, False),
        (torch.bfloat16, torch.float32, 60, 64, False),  # vabft makes one tile of a line 8 does not divide
        (torch.bfloat16, torch.float32, 64, 12, False),
    ],
)
def test_the_kernel_covers_only_outputs_its_order_of_sums_cannot_move(dtype, checker, m, n, covered) -> None:
    assert tile_verdicts.covers(dtype, checker, m, n) is covered


def test_the_operator_refuses_what_it_does_not_cover() -> None:
    outs, exp = block(torch.bfloat16, (16, 8, 16))
    with pytest.raises(ValueError, match="contiguous"):
        tile_verdicts.by_kernel(outs.transpose(1, 2), exp)
    with pytest.raises(ValueError, match="covered"):
        tile_verdicts.by_kernel(outs.double(), exp)
