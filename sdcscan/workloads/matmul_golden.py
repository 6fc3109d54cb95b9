"""`matmul_golden`: matmuls in fp32, fp64, bf16 and fp16 compared bit for bit with an exact int64 reference.

Operands are small integers (|x| <= max_abs) with k * max_abs^2 < 2^24, so every partial sum is exact in
fp32 and the product is the same in any summation order, blocking or thread count; bf16/fp16 outputs
are rounded once (RNE) from the exact value (docs/abft.md §4.3). Correct hardware therefore
matches the golden exactly, anywhere.

The int64 reference is expensive (a generic integer loop), so it is computed once per worker for a
pool operand pair; each case derives fresh operands by permuting rows, columns and the inner dimension
and flipping signs, whose exact product follows from the reference by the same permutation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from sdcscan.checks.digest import RepeatDigest
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome
from sdcscan.workloads import SPECS, WorkloadSpec
from sdcscan.workloads.base import Context, register

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
_WORDS = {2: torch.int16, 4: torch.int32, 8: torch.int64}
MAX_RECORDED = 8  # mismatching elements recorded per case; the count is always complete


@register
class MatmulGolden:
    name: ClassVar[str] = "matmul_golden"
    spec: ClassVar[WorkloadSpec] = SPECS[name]

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.p = p = {**self.spec.defaults, **params}
        if p["k"] * p["max_abs"] ** 2 >= 2**24:
            raise ValueError("matmul_golden: k * max_abs^2 must stay below 2^24 for exact fp32 partial sums")
        if any(d not in DTYPES for d in p["dtypes"]) or len(p["repeats"]) != len(p["dtypes"]):
            raise ValueError(f"matmul_golden: dtypes must be from {', '.join(DTYPES)}, one repeat count each")
        self.a0: torch.Tensor | None = None  # pool operands and their exact product, built by prepare
        self.b0: torch.Tensor | None = None
        self.ref0: torch.Tensor | None = None

    def prepare(self, ctx: Context) -> None:
        p, g = self.p, ctx.generator(ctx.run_seed ^ 0x5EED)
        lim = p["max_abs"]
        a0 = torch.randint(-lim, lim + 1, (p["m"], p["k"]), generator=g, dtype=torch.int64)
        b0 = torch.randint(-lim, lim + 1, (p["k"], p["n"]), generator=g, dtype=torch.int64)
        ref0 = golden_reference(a0, b0)  # exact, on the CPU, independent of the unit's float units
        # Kept as fp32 (exact for these small integers): permuting 4-byte words per case is cheap.
        self.a0, self.b0 = a0.to(ctx.device, torch.float32), b0.to(ctx.device, torch.float32)
        self.ref0 = ref0.to(ctx.device, torch.float32)  # |C| < 2^24: exact in fp32

    def run(self, ctx: Context, case: Case) -> Outcome:
        p = self.p
        slot = case.occurrence % len(p["dtypes"])
        dtype, repeats = DTYPES[p["dtypes"][slot]], p["repeats"][slot]
        with ctx.phase("setup"):
            a, b, ref = self._case_operands(ctx, case)
            a, b = a.to(dtype), b.to(dtype)
            expected = ref.to(dtype)  # exact in fp32; one RNE rounding to dtype
        mismatches: list[Mismatch] = []
        bad_total, digest = 0, RepeatDigest()
        for r in range(repeats):
            with ctx.phase("compute"):
                out = a @ b
            ctx.fault("output", out, repeat=r, repeats=repeats)
            with ctx.phase("check"):
                if not torch.equal(out, expected):  # NaN-safe: NaN never equals
                    found, count = bitwise_mismatches(out, expected, p["dtypes"][slot], repeat=r)
                    bad_total += count
                    mismatches.extend(found[: MAX_RECORDED - len(mismatches)])
                digest.add(out)
        return Outcome(
            status=STATUS_MISMATCH if bad_total else STATUS_OK,
            digest=digest.hexdigest(),
            mismatches=mismatches,
            ops=2.0 * p["m"] * p["n"] * p["k"] * repeats,
            ops_unit="flop",
            detail={"dtype": p["dtypes"][slot], "bad_elements": bad_total},
        )

    def _case_operands(self, ctx: Context, case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Permute and sign-flip the pool operands; the exact product follows from the reference."""
        assert self.a0 is not None and self.b0 is not None and self.ref0 is not None, (
            "prepare() was not called"
        )
        g = ctx.generator(case.seed)
        m, k, n = self.p["m"], self.p["k"], self.p["n"]
        rows, inner, cols = (
            torch.randperm(m, generator=g),
            torch.randperm(k, generator=g),
            torch.randperm(n, generator=g),
        )
        row_sign = (torch.randint(0, 2, (m, 1), generator=g) * 2 - 1).to(self.a0.device, torch.float32)
        col_sign = (torch.randint(0, 2, (1, n), generator=g) * 2 - 1).to(self.a0.device, torch.float32)
        rows, inner, cols = rows.to(self.a0.device), inner.to(self.a0.device), cols.to(self.a0.device)
        a = self.a0[rows][:, inner] * row_sign
        b = self.b0[inner][:, cols] * col_sign
        # + 0.0 turns the -0.0 of (0 * -1) into +0.0, the zero an exact sum of products yields.
        ref = self.ref0[rows][:, cols] * row_sign * col_sign + 0.0
        return a, b, ref


def golden_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact product of integer matrices in int64 on the CPU (torch's generic integer kernel)."""
    return a.cpu().to(torch.int64) @ b.cpu().to(torch.int64)


def bitwise_mismatches(
    out: torch.Tensor, expected: torch.Tensor, dtype_name: str, repeat: int
) -> tuple[list[Mismatch], int]:
    """Every element whose bits differ: (first few as Mismatch records with XOR masks, total count)."""
    word = _WORDS[out.element_size()]
    diff = out.view(word) != expected.view(word)
    count = int(diff.sum())
    found = []
    for idx in diff.nonzero()[:MAX_RECORDED].tolist():
        got, exp = out[tuple(idx)], expected[tuple(idx)]
        mask = int(got.view(word)) ^ int(exp.view(word))
        mask &= (1 << (8 * out.element_size())) - 1
        where = f"{dtype_name} out[{', '.join(map(str, idx))}] (repeat {repeat})"
        found.append(Mismatch("golden", where, repr(float(exp)), repr(float(got)), f"{mask:#x}"))
    return found, count
