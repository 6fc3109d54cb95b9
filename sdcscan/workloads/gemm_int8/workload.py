"""`gemm_int8`: u8 × s8 → s32 GEMMs through `torch._int_mm`, every output verified by exact ABFT checks.

The weight is encoded once per case with checksum rows (sdcscan/checks/int8.py) and every int32 result
is checked before anything else touches it, as in Li et al.'s DLRM int8 GEMM, by three independent
checks: the modular row checksum of the scheme, a position-weighted row checksum, and an exact column
check of the whole case against W·(Σ A). The checks are integer arithmetic, so a failing check is a
wrong product, never rounding. Shapes are DLRM-like and include skinny ones (m = 1…64); a case cycles
through them by occurrence.

The repeats of a case write into one block of outputs and are checked together (a few eager ops per
block rather than per GEMM); the column check's reference is one few-row GEMM per case. Outputs are
digested by a device-side fingerprint (sdcscan/checks/digest.py): hashing their bytes on the host cost
up to 40% of the GEMMs' time at the burnin shapes on an AVX-512 core, and would stop a GPU every block.

Pre-VNNI int8 kernels may saturate u8·s8 pairs to int16 (docs/abft.md §1.2): `prepare`
probes exactness and, where the probe fails, restricts activations to [0, 127] and says so, so that
saturation is never reported as a hardware fault.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from sdcscan.checks import int8
from sdcscan.checks.digest import Fingerprint
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome
from sdcscan.workloads.base import Context, register
from sdcscan.workloads.gemm_int8.int_mm_path import cpu_takes_unsigned, takes_signed_path
from sdcscan.workloads.gemm_int8.selftest_spec import SelftestMixin
from sdcscan.workloads.gemm_int8.spec import MIN_K, PATHS, SPEC
from sdcscan.workloads.workload_spec import WorkloadSpec

MAX_RECORDED = 8  # findings recorded per case, shared among the checks that fired; counts are complete
# Outputs checked together: few eager ops per case (measured best of 0.25–16 MiB at the burnin shapes).
CHECK_BLOCK_BYTES = 4 << 20
# Operands come from per-worker pools built once in `prepare` (issue 10: drawing a fresh weight and
# encoding it took twice the GEMMs' own time): WEIGHTS_PER_SHAPE encoded weights per shape, one picked
# per case, and one activation buffer that each repeat of a case reads at its own offset (so a GPU case
# of hundreds of 8192² GEMMs needs one GEMM's activations, not all of them). Both come from the run's
# seed, so every unit of a cohort computes the same products.
WEIGHTS_PER_SHAPE = 2
ACTIVATION_ROOM = 1 << 20  # bytes of the activation pool beyond the largest GEMM: where offsets range
OFFSET_ALIGN = 64  # activation offsets are multiples of this (aligned operands for every kernel)


@dataclass(slots=True)
class _Found:
    """What the repeats of one case leave for the verdict."""

    column_sums: torch.Tensor  # (n,) int64, exact Σ over every output row of the case
    digit_products: torch.Tensor  # (digits, n_ext) int32: the digit rows of Σ A times W_ext
    blocks: list[tuple[int, int8.RowsCheck]] = field(default_factory=list)  # (first repeat, its checks)
    digest: Fingerprint = field(default_factory=Fingerprint)


@register
class GemmInt8(SelftestMixin):
    name: ClassVar[str] = "gemm_int8"
    spec: ClassVar[WorkloadSpec] = SPEC
    negative_sites: ClassVar[tuple[str, ...]] = ("operand",)  # A before the GEMM: product stays consistent

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.p = p = {**self.spec.defaults, **params}
        int8.checksum_rows(p["scheme"])  # raises on an unknown scheme
        if p["path"] not in PATHS:
            raise ValueError(f"gemm_int8: path must be one of {', '.join(PATHS)}")
        for shape in p["shapes"]:
            if len(shape) != 3 or min(shape) < 1:
                raise ValueError(f"gemm_int8: each shape must be [m, k, n] of positive integers, got {shape}")
            if shape[1] < MIN_K:
                raise ValueError(f"gemm_int8: shape {shape}: k must be at least {MIN_K}")
            if shape[1] > int8.max_exact_k() or (p["scheme"] == "mod2_32" and shape[2] > int8.MAX_N_MOD2_32):
                raise ValueError(f"gemm_int8: shape {shape} overflows int32 or the checksum digits")
            if shape[2] > int8.MAX_N_WEIGHTED:
                raise ValueError(f"gemm_int8: shape {shape}: n must be at most {int8.MAX_N_WEIGHTED}")
            if shape[0] >= int8.CHUNK_ROWS:  # one repeat's rows at least are summed together in fp64
                raise ValueError(f"gemm_int8: shape {shape}: m must be below {int8.CHUNK_ROWS}")
        self.a_max = 255
        self.signed = False
        self.weights: dict[tuple[int, int, int], list[torch.Tensor]] = {}  # shape -> encoded weights
        self.activations = torch.empty(0, dtype=torch.uint8)
        self.activation_prefix: dict[int, torch.Tensor] = {}  # k -> int8.activation_prefix of the pool

    @classmethod
    def for_selftest(cls, params: Mapping[str, Any]) -> GemmInt8:
        return cls(params)  # no shortcut: a trial is a few small GEMMs

    def prepare(self, ctx: Context) -> None:
        self.signed = takes_signed_path(self.p["path"], ctx.device)
        if not self.signed and ctx.device.type != "cpu":
            raise ValueError(f"gemm_int8: path unsigned runs on CPUs only; {ctx.device} takes int8 x int8")
        if not self.signed and not cpu_takes_unsigned():
            raise ValueError(
                f"gemm_int8: path unsigned needs a CPU torch._int_mm that takes uint8 activations, which "
                f"torch {torch.__version__} lacks; use path auto or signed"
            )
        bad = _probe(self._mm, ctx.device)
        if bad:
            self.a_max = 127
            ctx.note(
                f"gemm_int8: torch._int_mm is not exact for full-range u8 activations on {ctx.device} "
                f"({bad}); likely int16 saturation in a pre-VNNI kernel, not a fault. "
                "Activations restricted to [0, 127]."
            )
        with ctx.exact_host_work():  # int8 draws and integer checksum rows
            self._build_pools(ctx)

    def _build_pools(self, ctx: Context) -> None:
        """The encoded weights of every shape and the activation buffer, from the run's seed."""
        p = self.p
        need = max(m * k for m, k, _ in p["shapes"])
        g = ctx.generator(_pool_seed(ctx.run_seed, "activations"))
        pool = torch.randint(0, self.a_max + 1, (need + ACTIVATION_ROOM,), generator=g, dtype=torch.uint8)
        self.activations = pool.to(ctx.device)
        for k in {k for _, k, _ in p["shapes"]}:
            self.activation_prefix[k] = int8.activation_prefix(self.activations, k)
        for m, k, n in p["shapes"]:
            g = ctx.generator(_pool_seed(ctx.run_seed, f"weights {m}x{k}x{n}"))
            self.weights[(m, k, n)] = [
                int8.encode_weight(
                    torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8), p["scheme"]
                ).to(ctx.device)
                for _ in range(WEIGHTS_PER_SHAPE)
            ]

    def _repeats_of(self, m: int, k: int, n: int) -> int:
        return max(1, math.ceil(self.p["ops_per_case"] / (2.0 * m * n * k)))

    def run(self, ctx: Context, case: Case) -> Outcome:
        p = self.p
        m, k, n = p["shapes"][case.occurrence % len(p["shapes"])]
        repeats = self._repeats_of(m, k, n)
        lay = int8.layout(n, p["scheme"])
        with ctx.phase("setup"):
            a, offsets, w_ext = self._operands(ctx, case, (m, k, n), repeats)
            # Faults corrupt in place: a pool's tensor is copied first, so the next case reads it clean.
            if ctx.armed_at("encoded"):
                w_ext = ctx.fault("encoded", w_ext.clone())
            copied = ctx.armed_at("operand")
            if copied:  # negative control: A is not encoded, the product stays consistent
                a[0] = ctx.fault("operand", a[0].clone())
        with ctx.phase("check"):
            # Σ A over the case as digit rows under the last repeat's activations (the column checksum
            # rows of classic ABFT): that product carries W·(Σ A) for the column check, a few rows more.
            # A view's sums are read off the pool's prefix (two reads of k, not m·k: issue 10); the
            # negative control's corrupted copy is summed itself.
            prefix = self.activation_prefix[k]
            sums = int8.activation_sums(a[0]) if copied else int8.activation_sums_at(prefix, offsets[0], m, k)
            for offset in offsets[1:]:
                sums += int8.activation_sums_at(prefix, offset, m, k)
            digits = int8.activation_digits(sums, repeats * m * self.a_max)
            last = torch.cat([a[-1], digits])
        found = self._repeats(ctx, a, last, w_ext, lay)
        with ctx.phase("check"):
            columns = int8.check_columns(
                found.column_sums, int8.expected_column_sums(found.digit_products, n)
            )
            counts, mismatches = _findings(found.blocks, columns, m, repeats, p["scheme"])
        return Outcome(
            status=STATUS_MISMATCH if any(counts.values()) else STATUS_OK,
            digest=found.digest.hexdigest(),
            mismatches=mismatches,
            ops=2.0 * m * n * k * repeats,
            ops_unit="op",
            detail={
                "scheme": p["scheme"],
                "shape": [m, k, n],
                "repeats": repeats,
                "activation_max": self.a_max,
                "path": "signed" if self.signed else "unsigned",
                "rows_checked": repeats * m,
                **counts,
            },
        )

    def _operands(
        self, ctx: Context, case: Case, shape: tuple[int, int, int], repeats: int
    ) -> tuple[list[torch.Tensor], list[int], torch.Tensor]:
        """This case's activations, one (m, k) view of the pool per repeat at offsets drawn from the
        case's seed, those offsets, and one of the shape's encoded weights, also drawn from it."""
        m, k, _ = shape
        g = ctx.generator(case.seed)
        slots = (self.activations.numel() - m * k) // OFFSET_ALIGN + 1
        offsets = (torch.randint(slots, (repeats,), generator=g) * OFFSET_ALIGN).tolist()
        pick = int(torch.randint(WEIGHTS_PER_SHAPE, (1,), generator=g))
        views = [self.activations[offset : offset + m * k].view(m, k) for offset in offsets]
        return views, offsets, self.weights[shape][pick]

    def _repeats(
        self, ctx: Context, a: list[torch.Tensor], last: torch.Tensor, w_ext: torch.Tensor, lay: int8.Layout
    ) -> _Found:
        """Every repeat's GEMM, written block by block into one buffer, each block checked and hashed whole.

        The last repeat multiplies `last` (its activations and the digit rows); its digit rows land just
        below its own output, where no later repeat writes.
        """
        repeats, m = len(a), a[0].shape[0]
        block = max(1, min(repeats, CHECK_BLOCK_BYTES // (4 * m * lay.n_ext)))
        with ctx.phase("check"):
            outputs = torch.empty(
                (block * m + last.shape[0] - m, lay.n_ext), dtype=torch.int32, device=last.device
            )
        digits_start = (repeats - 1) % block * m + m  # just below the last repeat's rows in its block
        digit_products = outputs[digits_start : digits_start + last.shape[0] - m]
        found = _Found(torch.zeros(lay.n, dtype=torch.int64, device=last.device), digit_products)
        for first in range(0, repeats, block):
            count = min(block, repeats - first)
            for r in range(first, first + count):
                operand = a[r] if r < repeats - 1 else last
                start = (r - first) * m
                with ctx.phase("compute"):
                    self._mm(operand, w_ext, out=outputs[start : start + operand.shape[0]])
                ctx.fault("output", outputs[start : start + m], repeat=r, repeats=repeats, columns=lay.n)
            with ctx.phase("check"):
                checked = int8.check_rows(outputs[: count * m], lay)
                found.column_sums += checked.column_sums
                found.blocks.append((first, checked))
                found.digest.tensor(outputs[: count * m])
        return found

    def _mm(self, a_u8: torch.Tensor, w_ext: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """C = A_u8 @ W_ext.T in int32, through the native u8 path or the padded signed (CUDA) path."""
        if not self.signed:
            return (
                torch._int_mm(a_u8, w_ext.t(), out=out) if out is not None else torch._int_mm(a_u8, w_ext.t())
            )
        plan = int8.plan_cuda(a_u8.shape[0], a_u8.shape[1], w_ext.shape[0])
        a_s8, w_s8 = int8.signed_operands(a_u8, w_ext, plan)
        c = torch._int_mm(a_s8, w_s8.t())[: a_u8.shape[0]]
        correction = int8.unsigned_correction(w_ext)  # exact: the same int32 words as the unsigned product
        return torch.add(c, correction, out=out) if out is not None else c + correction


def _pool_seed(run_seed: int, what: str) -> int:
    """A seed for one of the pools, from the run's seed (the same on every unit of the run)."""
    return int.from_bytes(hashlib.sha256(f"gemm_int8 {what} {run_seed}".encode()).digest()[:8], "little")


def _probe(mm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], device: torch.device) -> str:
    """Compare `mm` with an exact fp64 reference on full-range inputs; '' when exact, else what failed."""
    g = torch.Generator().manual_seed(0x1A7)
    shape = (32, 256)  # k = 256: 128 saturated u8·s8 pairs per dot product if the kernel saturates
    a_full = torch.full(shape, 255, dtype=torch.uint8)
    cases = {
        "A=255, W=127": (a_full, torch.full(shape, 127, dtype=torch.int8)),
        "A=255, W=-128": (a_full, torch.full(shape, -128, dtype=torch.int8)),
        "random": (
            torch.randint(0, 256, shape, generator=g, dtype=torch.uint8),
            torch.randint(-128, 128, shape, generator=g, dtype=torch.int8),
        ),
    }
    for label, (a, w) in cases.items():
        ref = (a.double() @ w.double().t()).to(torch.int32)  # exact: |C| < 2^23
        got = mm(a.to(device), w.to(device)).cpu()
        if not torch.equal(got, ref):
            return f"{label}: max error {int((got.long() - ref.long()).abs().max())}"
    return ""


def _findings(
    blocks: list[tuple[int, int8.RowsCheck]], columns: int8.ColumnCheck, m: int, repeats: int, scheme: str
) -> tuple[dict[str, int], list[Mismatch]]:
    """Complete counts per check, and up to MAX_RECORDED records taken in turn from each check that fired."""
    counts = {
        "bad_rows": sum(int(rows.row.bad.sum()) for _, rows in blocks),
        "bad_weighted_rows": sum(int(rows.weighted_bad.sum()) for _, rows in blocks),
        "bad_columns": int(columns.bad.sum()),
    }
    row: list[Mismatch] = []
    weighted: list[Mismatch] = []
    for first, rows in blocks:
        if bool(rows.bad.any()):
            found_row, found_weighted = _row_records(rows, first, m, scheme)
            row.extend(found_row[: MAX_RECORDED - len(row)])
            weighted.extend(found_weighted[: MAX_RECORDED - len(weighted)])
    return counts, _interleave([row, weighted, _column_records(columns, repeats)])


def _row_records(
    rows: int8.RowsCheck, first: int, m: int, scheme: str
) -> tuple[list[Mismatch], list[Mismatch]]:
    """Records of the row and weighted-row checks of one block, each at most MAX_RECORDED long."""

    def where(index: int) -> str:
        return f"row {index % m} of C (repeat {first + index // m})"

    row, weighted = [], []
    for i in _first_true(rows.row.bad):
        exp, act = int(rows.row.checksum[i]), int(rows.row.data_sum[i])
        text = where(i) + (", padding column non-zero" if rows.row.pad_nonzero[i] else "")
        row.append(Mismatch(f"abft_{scheme}", text, str(exp), str(act), f"{exp ^ act:#x}"))
    for i in _first_true(rows.weighted_bad):
        exp, act = int(rows.weighted_checksum[i]), int(rows.weighted_sum[i])
        weighted.append(Mismatch("abft_weighted_row", where(i), str(exp), str(act), _mask(exp, act)))
    return row, weighted


def _column_records(columns: int8.ColumnCheck, repeats: int) -> list[Mismatch]:
    """One record per bad column, at most MAX_RECORDED: the sums cover every repeat, so no repeat is named."""
    found = []
    for j in _first_true(columns.bad):
        exp, act = int(columns.expected[j]), int(columns.data_sum[j])
        where = f"column {j} of C (summed over all {repeats} repeats)"
        found.append(Mismatch("abft_column", where, str(exp), str(act), _mask(exp, act)))
    return found


def _first_true(flags: torch.Tensor) -> list[int]:
    return flags.nonzero().flatten()[:MAX_RECORDED].tolist()


def _mask(expected: int, actual: int) -> str:
    """XOR of two signed int64 sums as their 64-bit two's-complement words (never a negative hex)."""
    return f"{(expected ^ actual) & (2**64 - 1):#x}"


def _interleave(kinds: list[list[Mismatch]]) -> list[Mismatch]:
    """Round-robin over the checks, so that every check that fired is named even when one floods."""
    merged: list[Mismatch] = []
    for turn in range(MAX_RECORDED):
        merged.extend(kind[turn] for kind in kinds if turn < len(kind))
    return merged[:MAX_RECORDED]
