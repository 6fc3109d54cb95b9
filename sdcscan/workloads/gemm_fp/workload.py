"""`gemm_fp`: fp32/fp64/bf16/fp16 matmuls checked by V-ABFT row AND column checksums, errors located to an element.

B is encoded before the GEMM (its row sums and the statistics the threshold needs, "offline" as for a
weight) and the column side from A and B before B's fault site; after each repeat of the GEMM every row
sum and every column sum of C is compared with its expectation against a variance-based threshold
scaled by an e_max for this device, dtype and checker (docs/abft.md §3). Both checks always run: a row
check alone is blind to two elements of a row swapped, to two columns swapped and to a compensating
pair in a row; the column check sees each of them. A failing row and a failing column name the element.
Nothing in the repeat loop waits for the device, because a GPU then runs the repeats back to back: the
totals and the first failing repeat's output stay on the device and are read once, at the end of the case.

Set-up and checks are kept small beside the GEMMs (issue 10). Each worker draws one pair of operands per
dtype from the run seed and takes their V-ABFT statistics once (`vabft.pool_stats`); a case multiplies
permutations of them (rows of A, the inner index, columns of B) drawn from its seed, which costs two
gathers and two matrix-vector products instead of drawing, encoding and summarising fresh operands on
the host. The repeats write into a block of outputs that is checked and fingerprinted whole, so a small
product pays a few eager ops per block rather than per repeat. Where asked for (`check_kernel: fused`; a
GPU's default once a lent GPU has matched it), one Triton kernel checks and fingerprints a bf16, fp16 or
fp32 block in one read of it (sdcscan/checks/tile_verdicts.py).

Every unit gets an e_max (`calibration.resolve`: a file, the cache, the shipped table or a fresh
measurement, held against a ceiling the arithmetic sets). A unit whose e_max is refused reports each
gemm_fp case as an error, so it is `invalid`, never a quiet pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch

from sdcscan.calibration import measure as calibration
from sdcscan.checks import confirm, counter_rng, tile_verdicts, vabft
from sdcscan.checks.digest import Fingerprint, RepeatDigest
from sdcscan.errors import InputRefused
from sdcscan.outcomes import STATUS_ERROR, STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome
from sdcscan.workloads.base import Context, check_block, register, takes_fused_kernel
from sdcscan.workloads.gemm_fp.selftest_spec import SelftestMixin
from sdcscan.workloads.gemm_fp.spec import SPEC
from sdcscan.workloads.readout import float_of, read_once
from sdcscan.workloads.workload_spec import WorkloadSpec

DTYPES = calibration.DTYPES
MAX_RECORDED = 8  # mismatching rows recorded per case; the count is always complete
MAX_NOMINATED = 8  # nominated repeats of a case confirmed on a CPU (a GPU confirms the first)
POOL_SEED = 0x6E3F  # the operand pool's seed is the run seed xor this xor the dtype's slot
# A clean product of a unit's own pool must stay under this fraction of the threshold of an e_max read
# from a file or the cache: calibration leaves a margin of 2, and clean checksums reached 0.79 of it at
# most over 10^6 rows (README); a threshold a clean product crosses would flag clean cases.
SANE_CLEAN_RATIO = 1.0


@register
class GemmFp(SelftestMixin):
    name: ClassVar[str] = "gemm_fp"
    spec: ClassVar[WorkloadSpec] = SPEC
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
        self.pools: list[_Pool | None] = [None] * n  # set by prepare, where the threshold is not refused
        self.fused = False  # blocks checked by the fused kernel where it covers the dtype (prepare)
        self._memo: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # reuse_product: A, B, C

    @classmethod
    def for_selftest(cls, params: Mapping[str, Any]) -> GemmFp:
        """Trials run seed-major: one clean GEMM per trial seed, injected into copies at the output site."""
        return cls(params, reuse_product=True)

    def prepare(self, ctx: Context) -> None:
        """Resolve e_max per (dtype, checker, shape) on this device; note where each came from."""
        p = self.p
        self.fused = takes_fused_kernel(
            ctx, p["check_kernel"], self.name, lambda: tile_verdicts.tried(ctx.device)
        )
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
            if found.file_note:
                ctx.note(f"gemm_fp: {found.file_note}")
            if found.cache_note:
                ctx.note(f"gemm_fp: {found.cache_note}")
            if found.e_max is None:
                continue
            a, b = _Pool.operands(ctx, slot, p)
            if calibration.beyond_range(a, b, DTYPES[dtype]):
                # Every unit draws this pool: its product is out of range everywhere, on every case.
                why = (
                    f"the product of {p['inputs']} operands at {tuple(shape)} exceeds {dtype}'s largest "
                    f"value, so every output would overflow on any unit: use a smaller K or leave {dtype} out"
                )
                self.thresholds[slot] = replace(found, e_max=None, refused=why)
                ctx.note(f"gemm_fp: {dtype} cannot be checked: {why}")
                continue
            self.pools[slot] = self._sane_pool(ctx, slot, (a, b), found)

    def _sane_pool(
        self, ctx: Context, slot: int, ab: tuple[torch.Tensor, torch.Tensor], found: calibration.Threshold
    ) -> _Pool | None:
        """The slot's pool, once a clean product of its operands stays under the threshold of an e_max from
        a file or the cache (issue 43: a legal but far too tight e_max flagged every clean case).

        A cache entry that fails is discarded and measured again. A file's is the user's input, proven
        wrong: the unit refuses it (`InputRefused`, exit 2 before any case is judged); a library caller
        that catches it may not run the slot.

        Raises:
            InputRefused: the e_max came from a file and a clean product exceeds its threshold.
        """
        p, (a, b) = self.p, ab
        chk, dtype = p["checkers"][slot], p["dtypes"][slot]
        pool = _Pool.of(a, b, chk, p["c"], found)
        if found.source not in ("file", "cache"):
            return pool
        ratio = clean_ratio(pool)
        if ratio <= SANE_CLEAN_RATIO:
            return pool
        what = (
            f"its {found.source}'s e_max {found.e_max:.3g} ({dtype}, {chk} checker, K={p['shapes'][slot][1]})"
        )
        why = f"a clean product of this unit's operands reached {ratio:.3g} times the threshold of {what}"
        if found.source == "file":
            self.thresholds[slot] = replace(found, e_max=None, refused=f"{why}: the calibration is too tight")
            raise InputRefused(
                f"gemm_fp calibration {p['calibration'] or 'file'}: {why}; the calibration is too tight for "
                "this unit: measure it again with `sdcscan calibrate`"
            )
        calibration.discard_cached(found.cache)
        fresh = calibration.resolve(ctx.device, dtype, chk, tuple(p["shapes"][slot]), p["calibration"])
        self.thresholds[slot] = fresh
        ctx.note(f"gemm_fp: {why}: the cache entry was discarded and e_max measured again ({fresh.e_max})")
        return None if fresh.e_max is None else _Pool.of(a, b, chk, p["c"], fresh)

    def run(self, ctx: Context, case: Case) -> Outcome:
        p = self.p
        slot = case.occurrence % len(p["dtypes"])
        name, chk = p["dtypes"][slot], p["checkers"][slot]
        (m, k, n), repeats = p["shapes"][slot], p["repeats"][slot]
        found = self.thresholds[slot]
        assert found is not None, "prepare() was not called"
        if found.e_max is None:  # refused: no threshold this unit may be trusted with
            return Outcome(status=STATUS_ERROR, digest=None, error=f"gemm_fp {name}: {found.refused}")
        pool = self.pools[slot]
        assert pool is not None, "prepare() draws a pool for every dtype it can check"
        with ctx.phase("setup"):
            a, b, perms = pool.case_operands(case.seed)
            if ctx.armed_at("operand_a"):  # negative control: A is not encoded, the error is consistent
                ctx.fault("operand_a", a)  # and A's statistics change with it, so they are taken anew
                expect = vabft.expected(
                    a, b, vabft.encode(b, DTYPES[chk]), DTYPES[chk], found.e_max, p["c"], e_mean=found.e_mean
                )
            else:
                expect = vabft.permuted_expected(pool.stats, a, b, perms)
            ctx.fault("operand_b_encoded", b)  # after encoding: the checksums no longer match B
        tally, digest = RepeatTally(ctx.device), RepeatDigest()
        fused = self.fused and tile_verdicts.covers(a.dtype, DTYPES[chk], m, n)
        block = check_block(ctx.device, repeats, m * n * a.element_size())
        with ctx.phase("check"):
            outputs = torch.empty((block, m, n), dtype=a.dtype, device=a.device)
        for first in range(0, repeats, block):
            outs = outputs[: min(block, repeats - first)]
            for i, out in enumerate(outs):
                with ctx.phase("compute"):
                    self._product(a, b, out)
                ctx.fault("output", out, repeat=first + i, repeats=repeats)
            with ctx.phase("check"):
                verdict = (tile_verdicts.by_kernel if fused else tile_verdicts.by_torch)(outs, expect)
                tally.add(first, outs, verdict)
                if verdict.fingerprints is None:
                    digest.add_stack(outs)
                else:
                    digest.add_fingerprints(outs, verdict.fingerprints)
        totals, sums = read_totals([tally.totals(), digest.sums()])
        ratio, bad_rows, bad_cols, first_bad = tally.read(totals)
        found_at: list[Mismatch] = []
        confirmed = 0
        # The counts cover every repeat; the nominated repeats are confirmed.
        if first_bad >= 0 and tally.kept is not None:
            # The clean pool's B: a B changed after its encoding (operand_b_encoded) is a fault too.
            clean_b = pool.case_operands(case.seed)[1]
            for r, out in tally.nominated or [(first_bad, tally.kept)]:
                found_at, confirmed = self._confirm(slot, (a, clean_b, out), r)
                if confirmed:
                    break
            if not confirmed and pool.changed():  # every element agrees with fp64 of changed operands
                found_at, confirmed = [self._operands_changed(slot, first_bad)], 1
        return Outcome(
            status=STATUS_MISMATCH if confirmed else STATUS_OK,
            digest=digest.hexdigest_of(sums),
            mismatches=found_at,
            ops=2.0 * m * n * k * repeats,
            detail={
                "dtype": name,
                "checker": chk,
                "inputs": self.p["inputs"],  # the self-test's floors hold on abs_normal (sdcscan.proof)
                "threshold": "vabft",
                "threshold_source": found.source,
                "check_kernel": "fused" if fused else "torch",
                "k": k,
                "e_max": found.e_max,
                "e_mean": found.e_mean,
                "calibration_cache": found.cache,  # peers that disagree have it measured again
                "e_max_ceiling": found.ceiling,
                "bad_rows": bad_rows,  # nominated by the statistical check, every repeat
                "bad_columns": bad_cols,
                "confirmed": confirmed,  # elements (or lines) of the first nominated repeat proven wrong
                "rows_checked": m * repeats,
                "columns_checked": n * repeats,
                "max_ratio": ratio,  # max |D|/T: headroom left by the threshold (≥ 1 means a check failed)
            },
        )

    def _product(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        """out = A @ B, or (self-test only) the last C when A and B are bit-identical to the last case's."""
        if not self.reuse_product:
            torch.matmul(a, b, out=out)
            return
        memo = self._memo
        if memo is not None and torch.equal(memo[0], a) and torch.equal(memo[1], b):
            out.copy_(memo[2])  # the caller may corrupt it at the output site
            return
        torch.matmul(a, b, out=out)
        self._memo = (a.clone(), b.clone(), out.clone())

    def _confirm(self, slot: int, abc: tuple[torch.Tensor, ...], r: int) -> tuple[list[Mismatch], int]:
        """A nominated repeat's product against fp64 (sdcscan.checks.confirm): (records of its wrong
        elements, how many). The statistical check only nominates: a clean product whose rounding
        crossed the threshold has no element beyond the bound, and passes (issue 44)."""
        a, b, out = abc
        name, chk = self.p["dtypes"][slot], self.p["checkers"][slot]
        errors = confirm.product_errors(a, b, out)
        wrong = errors.wrong
        found = []
        for i, j in wrong.nonzero()[:MAX_RECORDED].tolist():
            where = (
                f"{name} C[{i}, {j}] (repeat {r}): off by {float(errors.error[i, j]):.3g}, beyond the "
                f"{float(errors.bound[i, j]):.3g} correct arithmetic allows"
            )
            exact, actual = repr(float(errors.reference[i, j])), repr(float(out[i, j]))
            found.append(Mismatch(f"vabft_{chk}", where, exact, actual))
        return found, int(wrong.sum())

    def _operands_changed(self, slot: int, r: int) -> Mismatch:
        """The finding when every element agrees with fp64 of the operands, but the operands are no longer
        those the checks were encoded from: the worker's pool changed in memory after `prepare`."""
        name, chk = self.p["dtypes"][slot], self.p["checkers"][slot]
        where = f"{name} operands (repeat {r}): changed in memory since the checks were encoded from them"
        return Mismatch(f"vabft_{chk}", where, "", "")


def _signature(a: torch.Tensor, b: torch.Tensor) -> str:
    return Fingerprint().tensor(a).tensor(b).hexdigest()


class RepeatTally:
    """What the repeats of a case found, accumulated on the device: adding a block never waits for it."""

    def __init__(self, device: torch.device, *, every_block: bool | None = None) -> None:
        """`every_block`: fold in every block without reading anything on the host (a GPU's way, the
        default off the CPU); otherwise a block's verdict is read at once, as a CPU gives it at once."""
        self.every_block = device.type != "cpu" if every_block is None else every_block
        self.ratio = torch.zeros((), dtype=torch.float64, device=device)  # max |d|/t over the repeats
        self.bad = torch.zeros(2, dtype=torch.int64, device=device)  # failing rows, failing columns
        # 1 + the first failing repeat; 0 while none failed (a device value read as 0 is a clean answer)
        self.first_bad = torch.zeros((), dtype=torch.int64, device=device)
        # The first failing repeat's output, to be confirmed (on a GPU repeat 0's while none failed, on a
        # CPU none). Later failing repeats are counted, not confirmed.
        self.kept: torch.Tensor | None = None
        # On a CPU, every nominated repeat's output (up to MAX_NOMINATED, in order), each to be confirmed:
        # a clean repeat that crossed the threshold must not hide a faulty one after it.
        self.nominated: list[tuple[int, torch.Tensor]] = []

    def add(self, first: int, outs: torch.Tensor, verdict: tile_verdicts.BlockVerdict) -> None:
        """Fold in repeats first .. first + len(outs) - 1: their outputs (R, M, N) and their checks'
        verdict. The caller may overwrite `outs` afterwards."""
        self.ratio = torch.maximum(self.ratio, verdict.ratio)
        self.bad = self.bad + verdict.bad
        failed = verdict.failed  # (R,) per repeat of the block: any failing checksum of any row or column
        # The block's first failing repeat (0 when none failed), and whether it is the case's first.
        at = torch.argmax(failed.to(torch.int8)).view(1)
        new = failed.any() & (self.first_bad == 0)
        self.first_bad = torch.where(new, at[0] + first + 1, self.first_bad)
        if not self.every_block:  # the verdict is at hand: copy the failing outputs only
            for r in failed.nonzero().flatten().tolist()[: MAX_NOMINATED - len(self.nominated)]:
                self.nominated.append((first + r, outs[r].clone()))
            if not bool(new):
                return
        # A copy of one output per block instead of a wait: one pass over C per block of repeats.
        picked = outs.index_select(0, at)[0]
        self.kept = picked if self.kept is None else torch.where(new, picked, self.kept)

    def totals(self) -> torch.Tensor:
        """(4,) float64 on the device: max ratio, failing rows, failing columns, 1 + first failing repeat."""
        return torch.cat([self.ratio.view(1), self.bad.double(), self.first_bad.double().view(1)])

    def read(self, words: list[int] | None = None) -> tuple[float, int, int, int]:
        """(max ratio, failing rows, failing columns, first failing repeat or -1) from `totals()` as the
        caller read them (`read_once`), or read here in one wait."""
        if words is None:
            words = read_totals([self.totals()])[0]
        ratio, rows, cols, first = (float_of(w) for w in words)
        return ratio, int(rows), int(cols), int(first) - 1


@dataclass(frozen=True)
class _Pool:
    """One dtype's operands for a worker, drawn once from the run seed, and their check statistics."""

    a: torch.Tensor  # (M, K) on the unit's device
    b: torch.Tensor  # (K, N)
    stats: vabft.PoolStats
    signature: str = ""  # the operands' fingerprint as the statistics were taken from them

    def changed(self) -> bool:
        """Whether the operands differ now from what the statistics were taken from (one wait)."""
        return _signature(self.a, self.b) != self.signature

    @staticmethod
    def operands(ctx: Context, slot: int, p: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """One dtype's (A, B), drawn from the run seed on the unit's device."""
        (m, k, n), dtype = p["shapes"][slot], DTYPES[p["dtypes"][slot]]
        g = ctx.generator(ctx.run_seed ^ POOL_SEED ^ slot)
        a = calibration.sample(p["inputs"], (m, k), g, dtype).to(ctx.device)
        b = calibration.sample(p["inputs"], (k, n), g, dtype).to(ctx.device)
        return a, b

    @classmethod
    def of(
        cls, a: torch.Tensor, b: torch.Tensor, checker: str, c: float, found: calibration.Threshold
    ) -> _Pool:
        """The pool of operands (A, B) with their check statistics."""
        assert found.e_max is not None, "a refused threshold draws no pool"
        stats = vabft.pool_stats(a, b, DTYPES[checker], found.e_max, c, e_mean=found.e_mean)
        return cls(a, b, stats, _signature(a, b))

    def case_operands(
        self, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """A case's A and B: the pool's rows of A, inner index and columns of B permuted from the case's
        `seed` by the counter generator on the pool's device (no host work, no copy to wait for), so
        A @ B is the pool's product permuted, summed in another order. Rows and columns move with their
        check tiles (`vabft.tiled_permutation`), so the pool's thresholds hold. Returns (A, B, permutations)."""
        (m, k), n, device = self.a.shape, self.b.shape[1], self.a.device
        rows, inner, cols = (
            vabft.tiled_permutation(m, seed ^ 0x120A5, device),
            counter_rng.permutation(seed ^ 0x1229E, k, device),
            vabft.tiled_permutation(n, seed ^ 0xC015, device),
        )
        a = self.a.index_select(0, rows).index_select(1, inner)
        b = self.b.index_select(0, inner).index_select(1, cols)
        return a, b, (rows, inner, cols)


def clean_ratio(pool: _Pool) -> float:
    """max |D|/T of the row and column checks of one clean product of the pool's operands (in place)."""
    (m, k), n, device = pool.a.shape, pool.b.shape[1], pool.a.device
    rows, inner, cols = (torch.arange(size, device=device) for size in (m, k, n))
    expect = vabft.permuted_expected(pool.stats, pool.a, pool.b, (rows, inner, cols))
    row_check, column_check = vabft.verify((pool.a @ pool.b).unsqueeze(0), expect)
    return max(row_check.ratio(), column_check.ratio())


def read_totals(parts: list[torch.Tensor]) -> list[list[int]]:
    """Copy a case's totals and fingerprints to the host: where a gemm_fp case first waits for the
    device (at its end), once."""
    return read_once(parts)
