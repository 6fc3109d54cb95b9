"""`matmul_golden`: matmuls in fp32, fp64, bf16, fp16 and TF32 (sdcscan.checks.tf32), and, opted into,
fp8 operands with an fp32 output (sdcscan.checks.fp8), compared bit for bit with an exact int64 reference.

Operands are small integers (|x| <= max_abs) with k * max_abs^2 < 2^24, so every partial sum is exact in
fp32 and the product is the same in any summation order, blocking or thread count; bf16/fp16 outputs
are rounded once (RNE) from the exact value (docs/abft.md §4.3). Correct hardware therefore
matches the golden exactly, anywhere.

The reference is computed once per worker for a pool operand pair; each case derives fresh operands by
permuting rows, columns and the inner dimension and flipping signs, whose exact product follows from
the reference by the same permutation. `reference: direct` draws the pool at random and multiplies it
in int64 on the CPU (a generic integer loop: m·k·n multiply-adds, minutes at 8192^3); `reference:
kronecker` draws Kronecker-structured pool operands A = A1 ⊗ A2, B = B1 ⊗ B2, whose exact product
(A1·B1) ⊗ (A2·B2) costs two small matmuls (GPU-sized shapes). The per-case permutations hide the
structure from the kernel.

Nothing in a case waits for the device until its end: each repeat's bad elements are counted on the
device, the first few bad rows of each repeat are kept there for the records, and counts and digest are
read once. Permutations come from the counter generator on the device (sdcscan/checks/counter_rng.py).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from sdcscan.checks import counter_rng, fp8, golden_compare, tf32
from sdcscan.checks.digest import Fingerprint
from sdcscan.checks.limits import TF32_SLOT
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, UNCOVERED, Case, Mismatch, Outcome
from sdcscan.workloads.base import Context, check_block, register, takes_fused_kernel
from sdcscan.workloads.matmul_golden.selftest_spec import SelftestMixin
from sdcscan.workloads.matmul_golden.spec import DTYPES as DTYPE_NAMES
from sdcscan.workloads.matmul_golden.spec import REFERENCES, SPEC, golden_kronecker_split
from sdcscan.workloads.readout import read_once
from sdcscan.workloads.workload_spec import WorkloadSpec

# The dtype each slot's output is compared in: TF32 and fp8 slots' products come out in fp32.
DTYPES: dict[str, torch.dtype] = {
    name: torch.float32 if name in (*fp8.OPERANDS, TF32_SLOT) else getattr(torch, name)
    for name in DTYPE_NAMES
}
_WORDS = {2: torch.int16, 4: torch.int32, 8: torch.int64}
MAX_RECORDED = 8  # mismatching elements recorded per case; the count is always complete
Split = tuple[tuple[int, int], ...]  # ((m1, m2), (k1, k2), (n1, n2)) of a Kronecker pool


@register
class MatmulGolden(SelftestMixin):
    name: ClassVar[str] = "matmul_golden"
    spec: ClassVar[WorkloadSpec] = SPEC
    negative_sites: ClassVar[tuple[str, ...]] = ()  # the golden is built from the operands it checks

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.p = p = {**self.spec.defaults, **params}
        if p["k"] * p["max_abs"] ** 2 >= 2**24:
            raise ValueError("matmul_golden: k * max_abs^2 must stay below 2^24 for exact fp32 partial sums")
        if any(d not in DTYPES for d in p["dtypes"]) or len(p["repeats"]) != len(p["dtypes"]):
            raise ValueError(f"matmul_golden: dtypes must be from {', '.join(DTYPES)}, one repeat count each")
        if p["reference"] not in REFERENCES:
            raise ValueError(f"matmul_golden: reference must be one of {', '.join(REFERENCES)}")
        self.split: Split | None = None
        if p["reference"] == "kronecker":
            try:
                self.split = golden_kronecker_split(p["m"], p["k"], p["n"])
            except ValueError as err:
                raise ValueError(f"matmul_golden: {err}") from None
        self.uncovered: dict[str, str] = {}  # slot -> why this unit cannot run it (no such datapath)
        self.fused = False  # blocks compared by the fused kernel (prepare)
        self.a0: torch.Tensor | None = None  # pool operands and their exact product, built by prepare
        self.b0: torch.Tensor | None = None
        self.ref0: torch.Tensor | None = None

    @classmethod
    def for_selftest(cls, params: Mapping[str, Any]) -> MatmulGolden:
        return cls(params)  # no shortcut: a trial is one small matmul

    def prepare(self, ctx: Context) -> None:
        p, g = self.p, ctx.generator(ctx.run_seed ^ 0x5EED)
        lim = p["max_abs"]
        if self.split is not None:  # small factors on the host, the Kronecker products on the device
            a0, b0, ref0 = kronecker_pool(self.split, lim, g, device=ctx.device)  # float32, exact
        else:
            a0 = torch.randint(-lim, lim + 1, (p["m"], p["k"]), generator=g, dtype=torch.int64)
            b0 = torch.randint(-lim, lim + 1, (p["k"], p["n"]), generator=g, dtype=torch.int64)
            ref0 = golden_reference(a0, b0)  # exact, on the CPU, independent of the unit's float units
        self.uncovered = _uncovered(p, ctx.device)
        self.fused = takes_fused_kernel(
            ctx, p["check_kernel"], self.name, lambda: golden_compare.tried(ctx.device)
        )
        self.fp8_scale = fp8.unit_scale(ctx.device)  # once, not a kernel per fp8 repeat
        for slot, why in self.uncovered.items():
            ctx.note(f"matmul_golden: {slot} is not covered on this unit ({why}); its cases check nothing")
        # Kept as fp32 (exact for these small integers): permuting 4-byte words per case is cheap.
        self.a0, self.b0 = a0.to(ctx.device, torch.float32), b0.to(ctx.device, torch.float32)
        self.ref0 = ref0.to(ctx.device, torch.float32)  # |C| < 2^24: exact in fp32

    def run(self, ctx: Context, case: Case) -> Outcome:
        p = self.p
        slot = case.occurrence % len(p["dtypes"])
        dtype, repeats = DTYPES[p["dtypes"][slot]], p["repeats"][slot]
        name = p["dtypes"][slot]
        if name in self.uncovered:  # no such datapath here: reported as not covered, never failed
            return Outcome(
                status=STATUS_OK,
                digest=hashlib.sha256(f"uncovered {name}".encode()).hexdigest()[:16],
                mismatches=[],
                ops=0.0,
                ops_unit="flop",
                detail={"dtype": name, "bad_elements": 0, UNCOVERED: self.uncovered[name]},
            )
        with ctx.phase("setup"):
            a, b, ref = self._case_operands(ctx, case)
            a, b = fp8.operands(a, b, name) if name in fp8.OPERANDS else (a.to(dtype), b.to(dtype))
            expected = ref.to(dtype)  # exact in fp32; one RNE rounding to dtype
            tally = BadElements(expected, repeats, fused=self.fused)
        # Repeats write into a block of outputs, compared together (issue 10: a comparison and a
        # fingerprint per repeat cost 6.5% of fp32 cases of 256 x 1024 x 256 on a core).
        m, n = expected.shape
        block = check_block(ctx.device, repeats, m * n * expected.element_size())
        with ctx.phase("check"):
            outputs = torch.empty((block, m, n), dtype=dtype, device=expected.device)
        for first in range(0, repeats, block):  # phases time CUDA work with events: no wait for the device
            count = min(block, repeats - first)
            for r in range(first, first + count):
                with ctx.phase("compute"):
                    _product(name, a, b, outputs[r - first], self.fp8_scale)
                ctx.fault("output", outputs[r - first], repeat=r, repeats=repeats)
            with ctx.phase("check"):
                tally.add_block(outputs[:count], first)
        with ctx.phase("check"):
            digest = tally.digest()
            counts, sums = read_once([tally.counts(), digest.sums()])  # the case's one wait
            mismatches, bad_total = tally.findings(name, counts)
        return Outcome(
            status=STATUS_MISMATCH if bad_total else STATUS_OK,
            digest=digest.hexdigest_of(sums),
            mismatches=mismatches,
            ops=2.0 * p["m"] * p["n"] * p["k"] * repeats,
            ops_unit="flop",
            detail={
                "dtype": name,
                "bad_elements": bad_total,
                "check_kernel": "fused" if self.fused else "torch",
            },
        )

    def _case_operands(self, ctx: Context, case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Permute and sign-flip the pool operands; the exact product follows from the reference."""
        assert self.a0 is not None and self.b0 is not None and self.ref0 is not None, (
            "prepare() was not called"
        )
        m, k, n = self.p["m"], self.p["k"], self.p["n"]
        device = self.a0.device
        # Permutations and signs from the counter generator, drawn on the device: the same on every
        # device, and no copy from the host for the GPU to wait for (issue 42).
        seeds = [case.seed ^ salt for salt in (0x120A5, 0x1229E, 0xC015, 0x5161, 0x5162)]
        rows, inner, cols = (
            counter_rng.permutation(seeds[i], size, device) for i, size in enumerate((m, k, n))
        )
        row_sign = (counter_rng.below(seeds[3], m, 2, device) * 2 - 1).to(torch.float32).view(m, 1)
        col_sign = (counter_rng.below(seeds[4], n, 2, device) * 2 - 1).to(torch.float32).view(1, n)
        a = self.a0[rows][:, inner] * row_sign
        b = self.b0[inner][:, cols] * col_sign
        # + 0.0 turns the -0.0 of (0 * -1) into +0.0, the zero an exact sum of products yields.
        ref = self.ref0[rows][:, cols] * row_sign * col_sign + 0.0
        return a, b, ref


def _product(slot: str, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, fp8_scale: torch.Tensor) -> None:
    """One repeat's product A·B into `out`, taken as the slot's datapath takes it (fp8 with unit scales,
    `fp8_scale`)."""
    if slot in fp8.OPERANDS:
        fp8.scaled_mm(a, b, out=out, scale=fp8_scale)
    elif slot == TF32_SLOT:
        with tf32.products(a.device):
            torch.matmul(a, b, out=out)
    else:
        torch.matmul(a, b, out=out)


def _uncovered(p: Mapping[str, Any], device: torch.device) -> dict[str, str]:
    """The slots of `p["dtypes"]` this device has no datapath for, each with the reason: fp8 (its tensor
    cores came with sm_89; torch's reason, from one 16 x 16 product) and TF32 (`tf32.missing`). A slot
    the datapath lacks is not covered, never failed."""
    missing = {}
    for slot in dict.fromkeys(d for d in p["dtypes"] if d in fp8.OPERANDS):
        ones = torch.ones((16, 16), device=device)
        try:
            fp8.scaled_mm(*fp8.operands(ones, ones, slot))
        except (RuntimeError, NotImplementedError) as err:
            missing[slot] = str(err).splitlines()[0][:200] or type(err).__name__
    if TF32_SLOT in p["dtypes"]:
        why = tf32.missing(device, p["m"], p["k"], p["n"])
        missing.update({TF32_SLOT: why} if why else {})
    return missing


class BadElements:
    """Elements of a case's repeats that differ from the expected output, tallied on the device.

    `add_block` queues a fixed handful of kernels per block of repeats and never waits: each repeat's
    bad elements per row, and its first MAX_RECORDED bad rows (row index and output bits), which hold
    its first MAX_RECORDED bad elements in row-major order. `counts` and `digest` stay on the device for
    the case's one read; `findings` turns what was read into records with XOR masks, reading the kept
    rows only when a repeat was bad. Records name the first bad repeat only; the count covers every
    repeat. The buffers hold repeats · (m + MAX_RECORDED · (n + 1)) words: tens of MB at 8192^2.

    An element is bad when its value differs (NaN differs from everything): +0.0 and -0.0 are the same
    result, as they were to the `torch.equal` this replaces. An all-zero row of A with its sign flipped
    makes every product -0.0, and a kernel may sum those to -0.0 where the reference holds +0.0.

    `fused`: the bad elements per row are counted by golden_compare's kernel, one read of each output and
    of each tile of the expected one, instead of by torch ops (the same counts).
    """

    def __init__(
        self,
        expected: torch.Tensor,
        repeats: int,
        *,
        every_repeat: bool | None = None,
        fused: bool = False,
    ) -> None:
        self.expected = expected  # (m, n)
        self._count_bad = golden_compare.by_kernel if fused else golden_compare.by_torch
        m, n = expected.shape
        keep, device = min(MAX_RECORDED, m), expected.device
        self._rows = torch.arange(m, device=device)
        self._per_row = torch.zeros((repeats, m), dtype=torch.int64, device=device)
        self._kept_rows = torch.zeros((repeats, keep), dtype=torch.int64, device=device)
        self._kept = torch.zeros((repeats, keep, n), dtype=expected.dtype, device=device)
        # On the CPU a comparison answers at once, so a clean block costs that one pass; on a GPU the
        # answer would make the host wait for the device, so every block is tallied (every_repeat).
        self._clean_first = not (device.type != "cpu" if every_repeat is None else every_repeat)

    def add_block(self, outputs: torch.Tensor, first: int) -> None:
        """Tally the outputs (count, m, n) of repeats first, first + 1, ..., without waiting (on a CPU, one
        comparison of the block answers for all of them while they are clean)."""
        if self._clean_first and torch.equal(outputs, self.expected.expand_as(outputs)):
            return  # their row counts stay 0
        count, n = outputs.shape[0], outputs.shape[2]
        per_row = self._per_row[first : first + count]
        self._count_bad(outputs, self.expected, per_row)  # (count, m)
        # Rows in order, bad ones first; the last row stands in where fewer rows are bad (findings
        # drops rows without a bad element).
        last = self.expected.shape[0] - 1
        keys = torch.where(per_row > 0, self._rows, last)
        rows = torch.topk(keys, self._kept_rows.shape[1], dim=1, largest=False).values  # (count, keep)
        self._kept_rows[first : first + count] = rows
        self._kept[first : first + count] = torch.gather(outputs, 1, rows.unsqueeze(2).expand(-1, -1, n))

    def add(self, out: torch.Tensor, repeat: int) -> None:
        """Tally one repeat's output (same shape and dtype as the expected one), without waiting."""
        self.add_block(out.unsqueeze(0), repeat)

    def counts(self) -> torch.Tensor:
        """(repeats,) int64 bad elements per repeat, on the device."""
        return self._per_row.sum(1)

    def digest(self) -> Fingerprint:
        """The case's digest, on the device: the expected output, every repeat's bad elements per row, and
        the kept rows. Every repeat of a correct unit equals the expected output, so its digest is that of
        one output; a repeat with any bit of a value changed has a bad count, which changes it."""
        return (
            Fingerprint()
            .tensor(self.expected)
            .tensor(self._per_row)
            .tensor(self._kept_rows)
            .tensor(self._kept)
        )

    def findings(self, dtype_name: str, counts: list[int] | None = None) -> tuple[list[Mismatch], int]:
        """(records of the first bad repeat's first MAX_RECORDED bad elements, bad elements in all repeats).

        `counts`: `counts()` as the caller read it; read here (one wait) when None.
        """
        if counts is None:
            counts = self.counts().tolist()
        bad = [r for r, count in enumerate(counts) if count]
        if not bad:
            return [], 0
        first = bad[0]
        per_row = self._per_row[first].tolist()
        picks, rows = [], []  # positions in the kept rows, and their rows in the output
        for i, row in enumerate(self._kept_rows[first].tolist()):
            if per_row[row] and row not in rows:
                picks.append(i)
                rows.append(row)
        values = self._kept[first][picks]
        found, _ = bitwise_mismatches(values, self.expected[rows], dtype_name, repeat=first, rows=rows)
        return found, int(sum(counts))


def kronecker_pool(
    split: Split,
    max_abs: int,
    g: torch.Generator,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pool operands A (m, k), B (k, n) and their exact product C = A·B, Kronecker-structured.

    A = A1 ⊗ A2 and B = B1 ⊗ B2 give A·B = (A1·B1) ⊗ (A2·B2), so C costs the two small products
    (golden_reference, in int64) and one elementwise expansion. The factors' entries are non-zero
    integers, |x| <= r1 = isqrt(max_abs) in A1 and B1 and |x| <= r2 = max_abs // r1 in A2 and B2, so
    |A|, |B| <= r1·r2 <= max_abs and A and B have no zero rows or columns. Every value is exact in
    `dtype` when k·max_abs^2 < 2^24 (fp32): |C| <= k1·r1^2 · k2·r2^2 <= k·max_abs^2.

    Args:
        split: ((m1, m2), (k1, k2), (n1, n2)) from `golden_kronecker_split`.
        max_abs: bound on every entry of A and B.
        g: the CPU generator the factors are drawn from.
        dtype: of the three results (int64 for tests).
        device: where the products are expanded (the factors are drawn and multiplied on the CPU).
    """
    (m1, m2), (k1, k2), (n1, n2) = split
    r1 = math.isqrt(max_abs)
    r2 = max_abs // r1
    a1, b1 = _nonzero(g, (m1, k1), r1), _nonzero(g, (k1, n1), r1)
    a2, b2 = _nonzero(g, (m2, k2), r2), _nonzero(g, (k2, n2), r2)
    c1, c2 = golden_reference(a1, b1), golden_reference(a2, b2)
    a, b, c = (
        torch.kron(x.to(device, dtype), y.to(device, dtype)) for x, y in ((a1, a2), (b1, b2), (c1, c2))
    )
    return a, b, c


def _nonzero(g: torch.Generator, shape: tuple[int, int], r: int) -> torch.Tensor:
    """Integers uniform on [-r, -1] ∪ [1, r], int64."""
    u = torch.randint(0, 2 * r, shape, generator=g, dtype=torch.int64)
    return torch.where(u < r, u - r, u - r + 1)


def golden_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact product of integer matrices in int64 on the CPU (torch's generic integer kernel)."""
    return a.cpu().to(torch.int64) @ b.cpu().to(torch.int64)


def bitwise_mismatches(
    out: torch.Tensor,
    expected: torch.Tensor,
    dtype_name: str,
    repeat: int,
    rows: list[int] | None = None,
) -> tuple[list[Mismatch], int]:
    """Every element whose bits differ: (first few as Mismatch records with XOR masks, total count).

    `rows`: the output's row index of each row given (when `out` holds some rows of it only).
    """
    word = _WORDS[out.element_size()]
    diff = out.view(word) != expected.view(word)
    count = int(diff.sum())
    found = []
    for idx in diff.nonzero()[:MAX_RECORDED].tolist():
        got, exp = out[tuple(idx)], expected[tuple(idx)]
        mask = int(got.view(word)) ^ int(exp.view(word))
        mask &= (1 << (8 * out.element_size())) - 1
        named = idx if rows is None else [rows[idx[0]], *idx[1:]]
        where = f"{dtype_name} out[{', '.join(map(str, named))}] (repeat {repeat})"
        found.append(Mismatch("golden", where, repr(float(exp)), repr(float(got)), f"{mask:#x}"))
    return found, count
