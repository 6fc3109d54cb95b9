"""The checks rewritten to run on a GPU without waiting (issue 42) give, bit for bit, what the code they
replaced gave: clean, and under every fault model the self-test sweeps at their output sites.

The replaced code is written out here as the reference (`_old_*`): the int8 row checks (a loop of fp64
GEMVs per chunk of columns, the checksum digit weights as a tensor copied to the device), the exact
EmbeddingBag round trip (a difference buffer and a min/max read on the host) and the V-ABFT verification
(the output converted to the checker's dtype, then summed; verdicts in converted float64).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch

from sdcscan.checks import int8, vabft
from sdcscan.checks.embbag import exact
from sdcscan.checks.limits import DIGIT_BASE, FP64_EXACT, WORD
from sdcscan.faults import corrupt_, from_label
from sdcscan.workloads.embbag_int8.workload import EmbbagInt8
from sdcscan.workloads.gemm_fp.workload import GemmFp
from sdcscan.workloads.gemm_int8.workload import GemmInt8

# --- the replaced code, as it was --------------------------------------------------------------------


def _old_weighted_row_sums(data: torch.Tensor) -> torch.Tensor:
    n = data.shape[1]
    weights = int8.position_weights(n, data.device).double()
    width = max(1, (FP64_EXACT - 1) // (n * WORD))
    total = torch.zeros(data.shape[0], dtype=torch.int64, device=data.device)
    for start in range(0, n, width):
        total += (data[:, start : start + width] @ weights[start : start + width]).to(torch.int64)
    return total


def _old_check_rows(c_ext: torch.Tensor, lay: int8.Layout) -> tuple[torch.Tensor, ...]:
    n, rows = lay.n, lay.row_digits
    chk = c_ext[:, n : n + rows].to(torch.int64)
    pad_nonzero = (c_ext[:, lay.pad_start :] != 0).any(1)
    if lay.scheme == "mod2_32":
        data_sum = c_ext[:, :n].sum(1, dtype=torch.int32).to(torch.int64) & 0xFFFFFFFF
        weights = torch.tensor([1, DIGIT_BASE, DIGIT_BASE**2], dtype=torch.int64)
        checksum = (chk * weights).sum(1) & 0xFFFFFFFF
    else:
        data_sum = torch.remainder(c_ext[:, :n].sum(1, dtype=torch.int64), 127)
        checksum = torch.remainder(-chk[:, 0], 127)
    data = c_ext[:, :n].double()
    weighted_sum = _old_weighted_row_sums(data)
    digits = c_ext[:, lay.weighted_start : lay.pad_start].to(torch.int64)
    powers = DIGIT_BASE ** torch.arange(lay.weighted_digits, dtype=torch.int64)
    weighted_checksum = (digits * powers).sum(1)
    column_sums = (torch.ones(data.shape[0], dtype=torch.float64) @ data).to(torch.int64)
    bad = (data_sum != checksum) | pad_nonzero
    return bad, data_sum, checksum, pad_nonzero, weighted_sum != weighted_checksum, weighted_sum, column_sums


def _old_exact_bad_bags(out: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    scaled = out * exact.UNIT_INV
    units = scaled.to(torch.int32)
    bad = units.sum(1, dtype=torch.int32) != expected
    off = units.to(torch.float32) - scaled
    low, high = torch.aminmax(off)
    if bool((low != 0) | (high != 0)):
        bad |= (off != 0).any(1)
    return bad


def _old_with_total(tiles: torch.Tensor, dim: int = -1) -> torch.Tensor:
    if tiles.shape[dim] == 1:
        return tiles
    return torch.cat([tiles, tiles.sum(dim=dim, keepdim=True)], dim=dim)


def _old_verify(c_out: torch.Tensor, exp: vabft.Expected) -> tuple[torch.Tensor, ...]:
    c = c_out.to(exp.rows.dtype)
    n = c.shape[-1]
    w = vabft.tile_width(n)
    d_rows = _old_with_total(c.reshape(*c.shape[:-1], n // w, w).sum(dim=-1)) - exp.rows
    m = c.shape[-2]
    h = vabft.tile_width(m)
    col_tiles = c.reshape(*c.shape[:-2], m // h, h, c.shape[-1]).sum(dim=-2)
    d_cols = _old_with_total(col_tiles, dim=-2).transpose(-1, -2) - exp.cols
    bad_rows, bad_cols = ~(d_rows.double().abs() <= exp.row_t), ~(d_cols.double().abs() <= exp.col_t)
    ratio = max(
        torch.nan_to_num(d.double().abs() / t.clamp_min(1e-300), nan=math.inf).max()
        for d, t in ((d_rows, exp.row_t), (d_cols, exp.col_t))
    )
    return d_rows, d_cols, bad_rows, bad_cols, ratio


# --- the comparisons -----------------------------------------------------------------------------------


def _int8_outputs(m: int, k: int, n: int, scheme: str) -> tuple[torch.Tensor, int8.Layout]:
    g = torch.Generator().manual_seed(m * 7 + n)
    a = torch.randint(0, 256, (m, k), generator=g, dtype=torch.uint8)
    w_ext = int8.encode_weight(torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8), scheme)
    c = (a.double() @ w_ext.double().t()).to(torch.int32)  # exact
    return c, int8.layout(n, scheme)


def _int8_faulted(scheme: str) -> Iterator[tuple[str, torch.Tensor, int8.Layout]]:
    """Clean outputs (one with 16 weighted chunks), then each self-test output model at its shape."""
    for shape in ((8, 64, 40), (64, 64, 256), (4, 64, 8192)):
        c, lay = _int8_outputs(*shape, scheme)
        yield f"clean {shape}", c, lay
    for variant, (m, k, n) in ((scheme, (8, 64, 40)), (f"{scheme}_wide", (64, 64, 256))):
        for i, label in enumerate(GemmInt8.selftest_bits(variant, "output")):
            c, lay = _int8_outputs(m, k, n, scheme)
            for repeat in range(3):
                corrupt_(c, from_label(label, "output", 1000 * i + repeat), columns=n)
            yield f"{label} x3", c, lay


@pytest.mark.parametrize("scheme", int8.SCHEMES)
def test_int8_row_checks_are_the_replaced_ones_bit_for_bit(scheme: str) -> None:
    """Every field of the row checks, clean and under every self-test output model (three strikes each)."""
    for what, c, lay in _int8_faulted(scheme):
        new = int8.check_rows(c, lay)
        got = (
            new.row.bad, new.row.data_sum, new.row.checksum, new.row.pad_nonzero,
            new.weighted_bad, new.weighted_sum, new.column_sums,
        )  # fmt: skip
        for field, (mine, theirs) in enumerate(zip(got, _old_check_rows(c, lay), strict=True)):
            assert mine.dtype == theirs.dtype and torch.equal(mine, theirs), (what, field)


def test_int8_weighted_row_sums_are_the_replaced_ones_on_extreme_words() -> None:
    """Words of ±2^31 in every column of 16 chunks: the one GEMM's partial sums stay exact."""
    data = torch.full((3, 8192), -(2.0**31), dtype=torch.float64)
    data[1] = 2.0**31 - 1
    data[2, ::3] = 12345.0
    assert torch.equal(int8.weighted_row_sums(data), _old_weighted_row_sums(data))


def test_the_exact_embbag_round_trip_is_the_replaced_one_bit_for_bit() -> None:
    """Bad bags, clean and under the self-test's output models and values no table gives (NaN, Inf,
    denormals, values beyond int32's range)."""
    g = torch.Generator().manual_seed(5)
    units = torch.randint(-2000, 2000, (64, 128), generator=g, dtype=torch.int32)
    clean = units.float() * exact.UNIT
    expected = units.sum(1, dtype=torch.int32)
    cases = [("clean", clean.clone())]
    labels = {*EmbbagInt8.selftest_bits("exact", "output"), *EmbbagInt8.selftest_bits("exact_wide", "output")}
    for i, label in enumerate(sorted(labels, key=str)):
        out = clean.clone()
        corrupt_(out, from_label(label, "output", 77 + i))
        cases.append((str(label), out))
    for value in (math.nan, math.inf, -math.inf, 1e-40, 2.0**40, 0.5 * exact.UNIT):
        out = clean.clone()
        out[3, 5] = value
        cases.append((repr(value), out))
    off_grid = clean.clone()
    u = int(units[7, 9])
    off_grid[7, 9] = (u + (0.25 if u >= 0 else -0.25)) * exact.UNIT  # truncates to u: the sum is unchanged
    cases.append(("a quarter of a unit added", off_grid))
    for what, out in cases:
        assert torch.equal(exact.exact_bad_bags(out, expected), _old_exact_bad_bags(out, expected)), what


@pytest.mark.parametrize(
    ("dtype", "checker"),
    [
        (torch.float32, torch.float64),  # gemm_fp's default checker for fp32
        (torch.float32, torch.float32),  # the self-test's
        (torch.float64, torch.float64),
        (torch.bfloat16, torch.float32),
        (torch.float16, torch.float32),
    ],
)
def test_vabft_verification_is_the_replaced_one_bit_for_bit(dtype: torch.dtype, checker: torch.dtype) -> None:
    """Residuals, verdicts and the max ratio of a stack of products, clean and under each self-test
    output model of gemm_fp, accumulated in the checker's precision without the converted copy."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(64, 96, generator=g).to(dtype)
    b = torch.randn(96, 48, generator=g).to(dtype)
    e_max = 1e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-5
    exp = vabft.expected(a, b, vabft.encode(b, checker), checker, e_max)
    name = str(dtype).removeprefix("torch.")
    labels = list(GemmFp.selftest_bits(name, "output"))
    stacks = [torch.stack([a @ b] * 3)]
    for i, label in enumerate(labels):
        stack = torch.stack([a @ b] * 3)
        corrupt_(stack[1], from_label(label, "output", 11 + i))
        stacks.append(stack)
    for stack in stacks:
        rows, cols = vabft.verify(stack, exp)
        ratio = torch.maximum(rows.ratio_tensor(), cols.ratio_tensor())
        for mine, theirs in zip(
            (rows.d, cols.d, rows.bad, cols.bad, ratio), _old_verify(stack, exp), strict=True
        ):
            torch.testing.assert_close(mine, theirs, rtol=0, atol=0, equal_nan=True)
