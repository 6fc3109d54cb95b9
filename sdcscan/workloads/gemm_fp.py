"""`gemm_fp`: fp32/fp64/bf16/fp16 matmuls row-checked with V-ABFT thresholds, errors located to an element.

B is encoded before the GEMM (its row sums and the statistics the threshold needs, "offline" as for a
weight); after the GEMM each row sum of C is compared with A_i·(B·1) against a variance-based threshold
scaled by an e_max calibrated for this device, dtype and checker (docs/abft.md §3). A failing
row is paired with a failing column check to name the element. Uncalibrated devices fall back to a
rigorous worst-case bound, which never fires on correct hardware but detects fewer small errors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from sdcscan.checks import vabft
from sdcscan.checks.digest import Digest
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome
from sdcscan.units import device_model
from sdcscan.workloads import SPECS, WorkloadSpec, calibration
from sdcscan.workloads.base import Context, register
from sdcscan.workloads.gemm_fp_selftest import SelftestMixin

DTYPES = calibration.DTYPES
UNIT_ROUNDOFF = {name: torch.finfo(dt).eps / 2 for name, dt in DTYPES.items()}
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
        self.e_max: list[float | None] = [None] * n  # None: no calibration, use the rigorous bound
        self._memo: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # reuse_product: A, B, C
        self._setup_memo: tuple[tuple[int, int], torch.Tensor, torch.Tensor, vabft.Encoding] | None = None

    @classmethod
    def for_selftest(cls, params: Mapping[str, Any]) -> GemmFp:
        """Trials run seed-major: one clean GEMM per trial seed, injected into copies at the output site."""
        return cls(params, reuse_product=True)

    def prepare(self, ctx: Context) -> None:
        """Look up e_max per (device model, dtype, checker); note any fallback or extrapolation."""
        p, model = self.p, device_model(ctx.device)
        table = calibration.load_table(p["calibration"])
        for slot, (dtype, chk) in enumerate(zip(p["dtypes"], p["checkers"], strict=True)):
            entry = calibration.lookup(table, model, dtype, chk)
            if entry is None:
                ctx.note(
                    f"gemm_fp: no calibration for {model} ({dtype}, {chk} checker); using the conservative "
                    "rigorous bound, which detects fewer small errors: run `sdcscan calibrate -o cal.json` "
                    "and pass `--calibration cal.json`"
                )
                continue
            e_max, k, k_max = float(entry["e_max"]), p["shapes"][slot][1], int(entry["k_max"])
            if k > k_max:  # e_max grows with K; scale as the V-ABFT artifact does
                e_max *= math.sqrt(k / k_max)
                ctx.note(
                    f"gemm_fp: {dtype} K={k} exceeds the calibrated K≤{k_max}; e_max scaled by sqrt(K/Kmax)"
                )
            self.e_max[slot] = e_max

    def run(self, ctx: Context, case: Case) -> Outcome:
        p = self.p
        slot = case.occurrence % len(p["dtypes"])
        name = p["dtypes"][slot]
        (m, k, n), repeats = p["shapes"][slot], p["repeats"][slot]
        with ctx.phase("setup"):
            a, b, enc = self._setup(ctx, case, slot)
            ctx.fault("operand_a", a)  # negative control: A is not encoded, so the error is consistent
            ctx.fault("operand_b_encoded", b)  # after encoding: the checksum no longer matches B
        found: list[Mismatch] = []
        bad_rows, ratio = 0, 0.0
        for r in range(repeats):
            with ctx.phase("compute"):
                out = self._product(a, b)
            if r == 0:
                ctx.fault("output", out)
            with ctx.phase("check"):
                rows = self._row_check(slot, a, out, enc)
                ratio = max(ratio, rows.ratio())
                if bool(rows.bad.any()):
                    bad_rows += int(rows.bad.sum())
                    found += self._locate(slot, (a, b, out), enc, rows, r)[: MAX_RECORDED - len(found)]
        with ctx.phase("check"):
            digest = Digest().tensor(out).hexdigest()
        return Outcome(
            status=STATUS_MISMATCH if bad_rows else STATUS_OK,
            digest=digest,
            mismatches=found,
            ops=2.0 * m * n * k * repeats,
            detail={
                "dtype": name,
                "checker": p["checkers"][slot],
                "threshold": "vabft" if self.e_max[slot] is not None else "rigorous",
                "e_max": self.e_max[slot],
                "bad_rows": bad_rows,
                "rows_checked": m * repeats,
                "max_ratio": ratio,  # max |D|/T: headroom left by the threshold (≥ 1 means a row failed)
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
        enc = vabft.encode(b, DTYPES[p["checkers"][slot]], rigorous=self.e_max[slot] is None)
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

    def _row_check(
        self, slot: int, a: torch.Tensor, out: torch.Tensor, enc: vabft.Encoding
    ) -> vabft.CheckResult:
        """V-ABFT with the calibrated e_max, or the rigorous bound where this device is uncalibrated."""
        e_max, p = self.e_max[slot], self.p
        if e_max is not None:
            return vabft.row_check(a, out, enc, e_max, p["c"])
        u_chk, u_out = UNIT_ROUNDOFF[p["checkers"][slot]], UNIT_ROUNDOFF[p["dtypes"][slot]]
        u_acc = min(u_out, UNIT_ROUNDOFF["float32"])  # assumes bf16/fp16 GEMMs accumulate in fp32
        d = vabft.row_residual(a, out, enc.rowsum)
        t = vabft.rigorous_threshold(a, out, enc, u_acc=u_acc, u_chk=u_chk, u_out=u_out)
        return vabft.CheckResult(d=d, t=t, bad=vabft.failing(d, t))

    def _column_check(
        self, slot: int, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor
    ) -> vabft.CheckResult:
        """Column check (roles of A and B swapped) with the same threshold model as the row check."""
        p, e_max = self.p, self.e_max[slot]
        chk = DTYPES[p["checkers"][slot]]
        if e_max is not None:
            return vabft.column_check(a, b, out, chk, e_max, p["c"])
        u_chk, u_out = UNIT_ROUNDOFF[p["checkers"][slot]], UNIT_ROUNDOFF[p["dtypes"][slot]]
        enc_a = vabft.encode(a.t(), chk, rigorous=True)
        d = vabft.row_residual(b.t(), out.t(), enc_a.rowsum)
        t = vabft.rigorous_threshold(
            b.t(), out.t(), enc_a, u_acc=min(u_out, UNIT_ROUNDOFF["float32"]), u_chk=u_chk, u_out=u_out
        )
        return vabft.CheckResult(d=d, t=t, bad=vabft.failing(d, t))

    def _locate(
        self, slot: int, abc: tuple[torch.Tensor, ...], enc: vabft.Encoding, rows: vabft.CheckResult, r: int
    ) -> list[Mismatch]:
        """Two-sided localisation: pair failing rows with failing columns; recompute the named element."""
        (a, b, out), name, chk_name = abc, self.p["dtypes"][slot], self.p["checkers"][slot]
        chk = DTYPES[chk_name]
        found = []
        for i, j in vabft.localize(rows, self._column_check(slot, a, b, out), MAX_RECORDED):
            if j is None:
                where = (
                    f"{name} C row {i} (row check; no single column fails: operand changed after encoding?)"
                )
                expected, actual = float(a[i].to(chk) @ enc.rowsum), float(out[i].to(chk).sum())
            else:
                where = f"{name} C[{i}, {j}] (row {i} and column {j} checks)"
                expected, actual = float(a[i].to(chk) @ b[:, j].to(chk)), float(out[i, j])  # recomputed dot
            check = f"{'vabft' if self.e_max[slot] is not None else 'rigorous'}_{chk_name}"
            found.append(Mismatch(check, f"{where} (repeat {r})", repr(expected), repr(actual)))
        return found
