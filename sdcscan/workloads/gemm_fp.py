"""`gemm_fp`: fp32/fp64/bf16/fp16 matmuls checked by V-ABFT row AND column checksums, errors located to an element.

B is encoded before the GEMM (its row sums and the statistics the threshold needs, "offline" as for a
weight) and the column side from A and B before B's fault site; after each repeat of the GEMM every row
sum and every column sum of C is compared with its expectation against a variance-based threshold
scaled by an e_max for this device, dtype and checker (docs/abft.md §3). Both checks always run: a row
check alone is blind to two elements of a row swapped, to two columns swapped and to a compensating
pair in a row; the column check sees each of them. A failing row and a failing column name the element.
Nothing in the repeat loop waits for the device, because a GPU then runs the repeats back to back: the
totals and the first failing repeat's output stay on the device and are read once, at the end of the case.

Every unit gets an e_max (`calibration.resolve`: a file, the cache, the shipped table or a fresh
measurement, held against a ceiling the arithmetic sets). A unit whose e_max is refused reports each
gemm_fp case as an error, so it is `invalid`, never a quiet pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from sdcscan.checks import vabft
from sdcscan.checks.digest import RepeatDigest
from sdcscan.outcomes import STATUS_ERROR, STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome
from sdcscan.workloads import SPECS, WorkloadSpec, calibration
from sdcscan.workloads.base import Context, register
from sdcscan.workloads.gemm_fp_selftest import SelftestMixin

DTYPES = calibration.DTYPES
MAX_RECORDED = 8  # mismatching rows recorded per case; the count is always complete


@register
class GemmFp(SelftestMixin):
    name: ClassVar[str] = "gemm_fp"
    spec: ClassVar[WorkloadSpec] = SPECS[name]
    negative_sites: ClassVar[tuple[str, ...]] = ("operand_a",)  # consistent error: a row check cannot see it

    def __init__(self, params: Mapping[str, Any], *, reuse_product: bool = False) -> None:
        """`reuse_product` is for `sdcscan selftest` only (see `for_selftest`): a run must recompute every
        product, or a retest of a failing case would reuse the product it is meant to check."""
        self.p = p = {**self.spec.defaults, **params}
        self.reuse_product = reuse_product
        n = len(p["dtypes"])
        if any(d not in DTYPES for d in p["dtypes"]) or any(c not in DTYPES for c in p["checkers"]):
            raise ValueError(f"gemm_fp: dtypes and checkers must be from {', '.join(DTYPES)}")
        if not n or not len(p["shapes"]) == len(p["repeats"]) == len(p["checkers"]) == n:
            raise ValueError("gemm_fp: dtypes, shapes, repeats and checkers need one entry per dtype")
        if (
            any(len(s) != 3 or min(s) < 1 for s in p["shapes"])
            or p["inputs"] not in calibration.DISTRIBUTIONS
        ):
            raise ValueError(
                f"gemm_fp: shapes are [m, k, n]; inputs one of {', '.join(calibration.DISTRIBUTIONS)}"
            )
        self.thresholds: list[calibration.Threshold | None] = [None] * n  # set by prepare
        self._memo: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # reuse_product: A, B, C
        self._setup_memo: tuple[tuple[int, int], torch.Tensor, torch.Tensor, vabft.Encoding] | None = None

    @classmethod
    def for_selftest(cls, params: Mapping[str, Any]) -> GemmFp:
        """Trials run seed-major: one clean GEMM per trial seed, injected into copies at the output site."""
        return cls(params, reuse_product=True)

    def prepare(self, ctx: Context) -> None:
        """Resolve e_max per (dtype, checker, shape) on this device; note where each came from."""
        p = self.p
        for slot, (dtype, chk) in enumerate(zip(p["dtypes"], p["checkers"], strict=True)):
            shape = tuple(p["shapes"][slot])
            found = calibration.resolve(ctx.device, dtype, chk, shape, p["calibration"])
            self.thresholds[slot] = found
            if found.refused:
                ctx.note(f"gemm_fp: {dtype} ({chk} checker) cannot be checked on this unit: {found.refused}")
            elif found.source == "fresh":
                ctx.note(
                    f"gemm_fp: {dtype} ({chk} checker) K={shape[1]} calibrated on this unit: e_max "
                    f"{found.e_max:.3g} (ceiling {found.ceiling:.3g})"
                )
            if found.cache_note:
                ctx.note(f"gemm_fp: {found.cache_note}")

    def run(self, ctx: Context, case: Case) -> Outcome:
        p = self.p
        slot = case.occurrence % len(p["dtypes"])
        name, chk = p["dtypes"][slot], p["checkers"][slot]
        (m, k, n), repeats = p["shapes"][slot], p["repeats"][slot]
        found = self.thresholds[slot]
        assert found is not None, "prepare() was not called"
        if found.e_max is None:  # refused: no threshold this unit may be trusted with
            return Outcome(status=STATUS_ERROR, digest=None, error=f"gemm_fp {name}: {found.refused}")
        with ctx.phase("setup"):
            a, b, enc = self._setup(ctx, case, slot)
            ctx.fault("operand_a", a)  # negative control: A is not encoded, so the error is consistent
            expect = vabft.expected(a, b, enc, DTYPES[chk], found.e_max, p["c"])
            ctx.fault("operand_b_encoded", b)  # after encoding: the checksums no longer match B
        tally, digest = _Tally(ctx.device), RepeatDigest()
        for r in range(repeats):
            with ctx.phase("compute"):
                out = self._product(a, b)
            ctx.fault("output", out, repeat=r, repeats=repeats)
            with ctx.phase("check"):
                tally.add(r, out, *vabft.verify(out, expect))
                digest.add(out)
        ratio, bad_rows, bad_cols, first_bad = tally.read()
        found_at: list[Mismatch] = []
        if first_bad >= 0 and tally.kept:  # counts cover every repeat; only the first failing one is located
            out, rows, cols = tally.kept
            found_at = self._locate(slot, (a, b, out), enc, (rows, cols), first_bad)
        return Outcome(
            status=STATUS_MISMATCH if bad_rows or bad_cols else STATUS_OK,
            digest=digest.hexdigest(),
            mismatches=found_at,
            ops=2.0 * m * n * k * repeats,
            detail={
                "dtype": name,
                "checker": chk,
                "threshold": "vabft",
                "threshold_source": found.source,
                "k": k,
                "e_max": found.e_max,
                "calibration_cache": found.cache,  # peers that disagree have it measured again
                "e_max_ceiling": found.ceiling,
                "bad_rows": bad_rows,
                "bad_columns": bad_cols,
                "rows_checked": m * repeats,
                "columns_checked": n * repeats,
                "max_ratio": ratio,  # max |D|/T: headroom left by the threshold (≥ 1 means a check failed)
            },
        )

    def _setup(
        self, ctx: Context, case: Case, slot: int
    ) -> tuple[torch.Tensor, torch.Tensor, vabft.Encoding]:
        """Operands from the case seed and B's encoding, taken before any fault site ("offline").

        With reuse_product (self-test only), a case with the same seed and slot as the last one gets copies
        of the same operands and encoding instead of drawing and encoding them again.
        """
        p, key = self.p, (case.seed, slot)
        if self.reuse_product and self._setup_memo is not None and self._setup_memo[0] == key:
            _, a, b, enc = self._setup_memo
            return a.clone(), b.clone(), enc  # copies: the fault sites corrupt operands in place
        (m, k, n), dtype, g = p["shapes"][slot], DTYPES[p["dtypes"][slot]], ctx.generator(case.seed)
        a = calibration.sample(p["inputs"], (m, k), g, dtype).to(ctx.device)
        b = calibration.sample(p["inputs"], (k, n), g, dtype).to(ctx.device)
        enc = vabft.encode(b, DTYPES[p["checkers"][slot]])
        if self.reuse_product:
            self._setup_memo = (key, a.clone(), b.clone(), enc)
        return a, b, enc

    def _product(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """C = A @ B, or (self-test only) the last C when A and B are bit-identical to the last case's."""
        if not self.reuse_product:
            return a @ b
        memo = self._memo
        if memo is not None and torch.equal(memo[0], a) and torch.equal(memo[1], b):
            return memo[2].clone()  # the caller may corrupt its copy at the output site
        out = a @ b
        self._memo = (a.clone(), b.clone(), out.clone())
        return out

    def _locate(
        self,
        slot: int,
        abc: tuple[torch.Tensor, ...],
        enc: vabft.Encoding,
        checks: tuple[vabft.CheckResult, vabft.CheckResult],
        r: int,
    ) -> list[Mismatch]:
        """Two-sided localisation: pair failing rows with failing columns; recompute the named element."""
        (a, b, out), (rows, cols) = abc, checks
        name, chk_name = self.p["dtypes"][slot], self.p["checkers"][slot]
        chk, check = DTYPES[chk_name], f"vabft_{chk_name}"
        if not bool(rows.bad.any()):  # row sums agree: values moved within rows (a swap, a compensating pair)
            found = []
            for j in cols.bad.nonzero().flatten()[:MAX_RECORDED].tolist():
                total = out[:, j].to(chk).sum()
                where = f"{name} C column {j} (column check; every row sum agrees) (repeat {r})"
                found.append(Mismatch(check, where, repr(float(total - cols.d[j])), repr(float(total))))
            return found
        found = []
        for i, j in vabft.localize(rows, cols, MAX_RECORDED):
            if j is None:
                where = (
                    f"{name} C row {i} (row check; no single column fails: operand changed after encoding?)"
                )
                expected, actual = float(a[i].to(chk) @ enc.rowsum), float(out[i].to(chk).sum())
            else:
                where = f"{name} C[{i}, {j}] (row {i} and column {j} checks)"
                expected, actual = float(a[i].to(chk) @ b[:, j].to(chk)), float(out[i, j])  # recomputed dot
            found.append(Mismatch(check, f"{where} (repeat {r})", repr(expected), repr(actual)))
        return found


class _Tally:
    """What the repeats of a case found, accumulated on the device: adding a repeat never waits for it."""

    def __init__(self, device: torch.device) -> None:
        self.ratio = torch.zeros((), dtype=torch.float64, device=device)  # max |d|/t over the repeats
        self.bad = torch.zeros(2, dtype=torch.int64, device=device)  # failing rows, failing columns
        self.first_bad = torch.full((), -1, dtype=torch.int64, device=device)  # -1 while none failed
        # The first failing repeat's output and its row and column checks, for `_locate` (repeat 0's while
        # none failed). Later failing repeats are counted, but neither located nor recorded as mismatches.
        self.kept: tuple[torch.Tensor, vabft.CheckResult, vabft.CheckResult] | None = None

    def add(self, r: int, out: torch.Tensor, rows: vabft.CheckResult, cols: vabft.CheckResult) -> None:
        """Fold in repeat `r` (the caller must not modify `out` afterwards)."""
        self.ratio = torch.maximum(self.ratio, torch.maximum(rows.ratio_tensor(), cols.ratio_tensor()))
        self.bad = self.bad + torch.stack([rows.bad.sum(), cols.bad.sum()])
        first = (rows.bad.any() | cols.bad.any()) & (self.first_bad < 0)  # 0-dim bool
        self.first_bad = torch.where(first, r, self.first_bad)
        if self.kept is None:
            self.kept = (out, rows, cols)
            return
        # A conditional copy instead of a wait: one more pass over C, whose GEMM took K multiply-adds
        # per element of C.
        kept_out, kept_rows, kept_cols = self.kept
        self.kept = (
            torch.where(first, out, kept_out),
            _pick(first, rows, kept_rows),
            _pick(first, cols, kept_cols),
        )

    def read(self) -> tuple[float, int, int, int]:
        """(max ratio, failing rows, failing columns, first failing repeat or -1), in one wait."""
        ratio, rows, cols, first = read_totals(
            torch.cat([self.ratio.view(1), self.bad.double(), self.first_bad.double().view(1)])
        )
        return ratio, int(rows), int(cols), int(first)


def _pick(cond: torch.Tensor, new: vabft.CheckResult, old: vabft.CheckResult) -> vabft.CheckResult:
    """`new` where the 0-dim `cond` holds, else `old` (same thresholds), without a wait."""
    return vabft.CheckResult(torch.where(cond, new.d, old.d), new.t, torch.where(cond, new.bad, old.bad))


def read_totals(totals: torch.Tensor) -> list[float]:
    """Copy a case's totals to the host: where a gemm_fp case first waits for the device (at its end)."""
    return totals.tolist()
