"""`gemm_int8`: u8 × s8 → s32 GEMMs through `torch._int_mm`, every output verified by exact ABFT checks.

The weight is encoded once per case with checksum rows (sdcscan/checks/int8.py) and every int32 result
is checked before anything else touches it, as in Li et al.'s DLRM int8 GEMM, by four independent
checks: the modular row checksum of the scheme, a position-weighted row checksum, an exact column
check of the whole case against W·(Σ A), and each row's tag (the activation row's index, carried
through the product: rows written at each other's addresses, issue 44). The checks are integer
arithmetic, so a failing check is a wrong product, never rounding. Shapes are DLRM-like and include
skinny ones (m = 1…64); a case cycles through them by occurrence.

The repeats of a case write into one block of outputs and are checked together (a fixed handful of
kernels per block: the row and weighted sums as one fp64 GEMM); the column check's reference is one
few-row GEMM per case. Outputs are digested by a device-side fingerprint (sdcscan/checks/digest.py):
hashing their bytes on the host cost up to 40% of the GEMMs' time at the burnin shapes on an AVX-512
core, and would stop a GPU every block. The verdicts stay on the device until the case's one read
(issue 42: a case of 455 repeats waited for the device 1,824 times). Pools and offsets come from the
counter-based generator (sdcscan/checks/counter_rng.py), drawn where the unit computes.

Pre-VNNI int8 kernels may saturate u8·s8 pairs to int16 (docs/abft.md §1.2): `prepare`
probes exactness and, where the probe fails, restricts activations to [0, 127] and says so, so that
saturation is never reported as a hardware fault.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from sdcscan.checks import counter_rng, int8, int8_block, limits
from sdcscan.checks.digest import Fingerprint
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome
from sdcscan.workloads.base import Context, register, takes_fused_kernel
from sdcscan.workloads.gemm_int8.int_mm_path import cpu_takes_unsigned, takes_signed_path
from sdcscan.workloads.gemm_int8.selftest_spec import SelftestMixin
from sdcscan.workloads.gemm_int8.spec import MIN_K, PATHS, SPEC
from sdcscan.workloads.readout import read_once
from sdcscan.workloads.workload_spec import WorkloadSpec

MAX_RECORDED = 8  # findings recorded per case, shared among the checks that fired; counts are complete
# Outputs checked together. On a CPU, few eager ops per case while the block stays in cache (measured best
# of 0.25–16 MiB at the burnin shapes); on a GPU, a handful of check kernels per GiB of outputs, whatever
# the shape (the 4 MiB of a CPU made every 268 MB output its own block: issue 42).
CHECK_BLOCK_BYTES = 4 << 20  # a CPU's
DEVICE_BLOCK_BYTES = 2 << 30  # any other device's: two of the largest burnin outputs (537 MB each)
# Operands come from per-worker pools built once in `prepare` (issue 10: drawing a fresh weight and
# encoding it took twice the GEMMs' own time): WEIGHTS_PER_SHAPE encoded weights per shape, one picked
# per case, and per k one block of tagged activation rows, of which each repeat of a case reads m rows
# from its own first row (so a GPU case of hundreds of 8192² GEMMs needs one GEMM's activations, not all
# of them). Both come from the run's seed, so every unit of a cohort computes the same products.
WEIGHTS_PER_SHAPE = 2
ACTIVATION_ROOM = 1 << 20  # bytes of activation rows beyond the tallest GEMM of a k: where views start
MIN_ROOM_ROWS = 256  # and at least this many rows (distinct views), however wide the rows


@dataclass(frozen=True, slots=True)
class _Rows:
    """The activation rows of one k: `rows` (R, tagged_width(k, tags, multiple)) as the GEMM takes them (u8, or
    s8 words a − 128 on the s8 × s8 route): k data columns, `tags` digits of the row's index, zeros;
    `prefix` the int8.row_prefix of the u8 data columns, for the column check."""

    rows: torch.Tensor
    prefix: torch.Tensor
    tags: int


@dataclass(slots=True)
class _Found:
    """What the repeats of one case leave for the verdict, all of it on the device until the one read."""

    column_sums: torch.Tensor  # (n,) int64, exact Σ over every output row of the case
    digit_products: torch.Tensor  # (digits, n_ext) int32: the digit rows of Σ A times W_ext
    bad: torch.Tensor  # (3,) int64: rows failing the row check, the weighted check, the row tag
    blocks: list[tuple[int, int8.RowsCheck]] = field(default_factory=list)  # (first repeat, its checks)
    digest: Fingerprint = field(default_factory=Fingerprint)


@dataclass(frozen=True, slots=True)
class _Weight:
    """One encoded weight of a shape, as the GEMM takes it, and what the checks need of it."""

    w_ext: torch.Tensor  # (n_ext, tagged_width(k, tags, multiple)) int8
    shift: torch.Tensor | None  # (n_ext,) int64 int8.signed_column_shift on the s8 × s8 route, else None


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
            if shape[1] > int8.max_exact_k() or (
                p["scheme"] == "mod2_32" and shape[2] > limits.MAX_N_MOD2_32
            ):
                raise ValueError(f"gemm_int8: shape {shape} overflows int32 or the checksum digits")
            if shape[2] > limits.MAX_N_WEIGHTED:
                raise ValueError(f"gemm_int8: shape {shape}: n must be at most {limits.MAX_N_WEIGHTED}")
            if shape[0] >= limits.CHUNK_ROWS:  # one repeat's rows at least are summed together in fp64
                raise ValueError(f"gemm_int8: shape {shape}: m must be below {limits.CHUNK_ROWS}")
        self.a_max = 255
        self.signed = False
        self.multiple = int8.ROW_MULTIPLE  # W_ext's rows padded to a multiple of it (int8.row_multiple)
        self.fused = False  # the block sums by the fused kernel (triton_kernels.choose)
        self.weights: dict[tuple[int, int, int], list[_Weight]] = {}  # shape -> encoded weights
        self.activations: dict[int, _Rows] = {}  # k -> its tagged activation rows
        self.coefficients: dict[int, torch.Tensor] = {}  # n -> int8.row_sum_coefficients on the device

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
        self.multiple = int8.row_multiple(ctx.device)
        self.fused = takes_fused_kernel(
            ctx, self.p["check_kernel"], self.name, lambda: int8_block.agrees_on_a_small_block(ctx.device)
        )
        bad = _probe(self._mm, ctx.device, self.signed)
        if bad:
            self.a_max = 127
            ctx.note(
                f"gemm_int8: torch._int_mm is not exact for full-range u8 activations on {ctx.device} "
                f"({bad}); likely int16 saturation in a pre-VNNI kernel, not a fault. "
                "Activations restricted to [0, 127]."
            )
        self._build_pools(ctx)

    def _build_pools(self, ctx: Context) -> None:
        """The encoded weights of every shape and the activation buffer, drawn on the unit's device from
        the run's seed by the counter generator (the same bits on every device): a GPU unit neither waits
        for a host thread to draw 2^28 values nor copies them (issue 42: 6.8 s for the doctor's)."""
        p, device = self.p, ctx.device
        for k in sorted({k for _, k, _ in p["shapes"]}):
            tallest = max(m for m, kk, _ in p["shapes"] if kk == k)
            room = max(MIN_ROOM_ROWS, ACTIVATION_ROOM // k)
            self.activations[k] = self._rows(ctx.run_seed, k, tallest + room, device)
        for m, k, n in p["shapes"]:
            self.coefficients.setdefault(n, int8.row_sum_coefficients(n, device))
            self.weights[(m, k, n)] = [
                self._encoded(_pool_seed(ctx.run_seed, f"weights {m}x{k}x{n} {i}"), n, k, device)
                for i in range(WEIGHTS_PER_SHAPE)
            ]

    def _rows(self, run_seed: int, k: int, count: int, device: torch.device) -> _Rows:
        """`count` tagged activation rows of k values in [0, a_max], drawn from the run's seed."""
        data = counter_rng.fill_below(
            _pool_seed(run_seed, f"activations k={k}"), count * k, self.a_max + 1, torch.uint8, device
        ).view(count, k)
        tags = int8.tags_needed(count)
        rows = torch.zeros(
            (count, int8.tagged_width(k, tags, self.multiple)), dtype=torch.uint8, device=device
        )
        rows[:, :k] = data
        rows[:, k : k + tags] = int8.row_tags(torch.arange(count, device=device), tags)
        taken = int8.signed_activations(rows) if self.signed else rows
        return _Rows(taken, int8.row_prefix(data), tags)

    def _encoded(self, seed: int, n: int, k: int, device: torch.device) -> _Weight:
        """One (n, k) weight drawn from `seed`, encoded with readers of k's row tags, ready for this
        route's GEMM (the tagged width is a multiple of 8, as CUDA's int8 GEMM needs)."""
        w = counter_rng.fill_below(seed, n * k, 256, torch.uint8, device).view(torch.int8).view(n, k)
        w_ext = int8.encode_weight(w, self.p["scheme"], self.activations[k].tags, self.multiple)
        return _Weight(w_ext, int8.signed_column_shift(w_ext) if self.signed else None)

    def run(self, ctx: Context, case: Case) -> Outcome:
        p = self.p
        m, k, n = p["shapes"][case.occurrence % len(p["shapes"])]
        repeats = repeats_of(p, (m, k, n))
        rows = self.activations[k]
        lay = int8.layout(n, p["scheme"], rows.tags, self.multiple)
        with ctx.phase("setup"):
            a, starts, weight = self._operands(ctx, case, (m, k, n), repeats)
            w_ext = weight.w_ext
            # Faults corrupt in place: a pool's tensor is copied first, so the next case reads it clean.
            if ctx.armed_at("encoded"):  # in the k columns the data multiplies: beyond them A's row
                w_ext = w_ext.clone()  # tags are mostly 0 and its padding all 0, so a flip there is no fault
                w_ext[:, :k] = ctx.fault("encoded", w_ext[:, :k].contiguous())
            copied = ctx.armed_at("operand")
            if copied:  # negative control: A is not encoded, the product stays consistent
                a[0] = a[0].clone()  # its data columns only: a changed tag would be a moved row
                a[0][:, :k] = self._in_range(ctx.fault("operand", a[0][:, :k].contiguous()))
        with ctx.phase("check"):
            # Σ A over the case as digit rows under the last repeat's activations (the column checksum
            # rows of classic ABFT): that product carries W·(Σ A) for the column check, a few rows more.
            # The views' sums are read off the rows' prefix (two reads of k per repeat, not m·k: issue
            # 10), all repeats in one gather; the negative control's corrupted copy is summed itself.
            sums = int8.activation_sums_of_row_views(rows.prefix, starts[1:] if copied else starts, m)
            if copied:
                sums += int8.activation_sums((a[0].view(torch.uint8) ^ 0x80 if self.signed else a[0])[:, :k])
            narrow = int8.activation_digits(sums, repeats * m * self.a_max)
            # The digit rows as wide as a tagged row, their tag columns 0: rows of no view, never checked.
            wide = torch.zeros((narrow.shape[0], a[-1].shape[1]), dtype=torch.uint8, device=narrow.device)
            wide[:, :k] = narrow
            # The digit rows are u8 in [0, 127]: the same words as s8, multiplied as they are.
            digits = wide.view(torch.int8) if self.signed else wide
            last = torch.cat([a[-1], digits])
        found = self._repeats(ctx, a, last, w_ext, lay, starts)
        with ctx.phase("check"):
            expected = int8.expected_column_sums(found.digit_products, n)
            if weight.shift is not None:  # the s8 × s8 route: every row of A was shifted by −128
                expected = expected - repeats * m * weight.shift[:n]
            columns = int8.check_columns(found.column_sums, expected)
            bad, bad_columns, sums_read = read_once(  # the case's one wait for the device
                [found.bad, columns.bad.sum(), found.digest.sums()]
            )
        counts = {
            "bad_rows": bad[0],
            "bad_weighted_rows": bad[1],
            "bad_row_tags": bad[2],
            "bad_columns": bad_columns[0],
        }
        mismatches = (
            _findings(found.blocks, columns, m, repeats, p["scheme"], self._tag_shift(lay))
            if any(counts.values())
            else []
        )
        return Outcome(
            status=STATUS_MISMATCH if any(counts.values()) else STATUS_OK,
            digest=found.digest.hexdigest_of(sums_read),
            mismatches=mismatches,
            ops=2.0 * m * n * k * repeats,
            ops_unit="op",
            detail={
                "scheme": p["scheme"],
                "shape": [m, k, n],
                "repeats": repeats,
                "activation_max": self.a_max,
                "path": "signed" if self.signed else "unsigned",
                "check_kernel": "fused" if self.fused else "torch",
                "rows_checked": repeats * m,
                **counts,
            },
        )

    def _operands(
        self, ctx: Context, case: Case, shape: tuple[int, int, int], repeats: int
    ) -> tuple[list[torch.Tensor], torch.Tensor, _Weight]:
        """This case's activations, one view of m whole tagged rows per repeat from a first row drawn
        from the case's seed by the counter generator (the host computes them as numbers for the views,
        the device as a tensor for the column and tag checks: the same values, and no copy between
        them), those first rows on the device, and one of the shape's encoded weights, also drawn."""
        m, k, _ = shape
        rows = self.activations[k].rows
        slots = rows.shape[0] - m + 1
        seed = case.seed ^ 0x0FF5E7
        views = [
            rows[start : start + m]
            for start in (counter_rng.host_below(seed, r, slots) for r in range(repeats))
        ]
        starts = counter_rng.below(seed, repeats, slots, rows.device)
        pick = counter_rng.host_below(case.seed ^ 0x9E1C7, 0, WEIGHTS_PER_SHAPE)
        return views, starts, self.weights[shape][pick]

    def _repeats(
        self,
        ctx: Context,
        a: list[torch.Tensor],
        last: torch.Tensor,
        w_ext: torch.Tensor,
        lay: int8.Layout,
        starts: torch.Tensor,
    ) -> _Found:
        """Every repeat's GEMM, written block by block into one buffer, each block checked and hashed whole.

        The last repeat multiplies `last` (its activations and the digit rows); its digit rows land just
        below its own output, where no later repeat writes. Each row's tag must be its activation row's
        index, `starts[r]` + i. Nothing here waits for the device.
        """
        repeats, m, device = len(a), a[0].shape[0], last.device
        block_bytes = CHECK_BLOCK_BYTES if device.type == "cpu" else DEVICE_BLOCK_BYTES
        block = max(1, min(repeats, block_bytes // (4 * m * lay.n_ext), (limits.CHUNK_ROWS - 1) // m))
        coefficients = self.coefficients[lay.n]
        with ctx.phase("check"):
            outputs = torch.empty(
                (block * m + last.shape[0] - m, lay.n_ext), dtype=torch.int32, device=device
            )
            bad = torch.zeros(3, dtype=torch.int64, device=device)
            # Row i of repeat r must carry tag starts[r] + i (in the s8 × s8 route's words, less a shift).
            shift = self._tag_shift(lay)
            within = torch.arange(-shift, m - shift, dtype=torch.float64, device=device)
            firsts = starts.double()
        digits_start = (repeats - 1) % block * m + m  # just below the last repeat's rows in its block
        digit_products = outputs[digits_start : digits_start + last.shape[0] - m]
        found = _Found(torch.zeros(lay.n, dtype=torch.int64, device=device), digit_products, bad)
        for first in range(0, repeats, block):
            count = min(block, repeats - first)
            for r in range(first, first + count):
                operand = a[r] if r < repeats - 1 else last
                start = (r - first) * m
                with ctx.phase("compute"):
                    self._mm(operand, w_ext, out=outputs[start : start + operand.shape[0]])
                ctx.fault("output", outputs[start : start + m], repeat=r, repeats=repeats, columns=lay.n)
            with ctx.phase("check"):
                expected = (firsts[first : first + count, None] + within).flatten()
                checked = int8.check_rows(outputs[: count * m], lay, coefficients, expected, self.fused)
                found.column_sums += checked.column_sums
                found.bad += torch.stack(
                    [checked.row.bad.sum(), checked.weighted_bad.sum(), checked.tag_bad.sum()]
                )
                found.blocks.append((first, checked))
                found.digest.summed(outputs[: count * m], checked.fingerprint)
        return found

    def _tag_shift(self, lay: int8.Layout) -> int:
        """What this route's words take off a row tag's value (the s8 × s8 route's a − 128)."""
        return int8.signed_tag_shift(lay.tags) if self.signed else 0

    def _in_range(self, a: torch.Tensor) -> torch.Tensor:
        """A struck copy of activations held to [0, a_max]: where the probe restricted them to 127, a
        saturating kernel computes a word the fault pushed past it wrongly (found on an emulated AVX2
        CPU, where the doctor's negative control fired), and the control must stay a consistent product."""
        if self.a_max == 255:
            return a
        words = a.view(torch.uint8) ^ 0x80 if self.signed else a.view(torch.uint8)  # the u8 values
        kept = words & self.a_max
        return (kept ^ 0x80).view(torch.int8) if self.signed else kept

    def _mm(self, a: torch.Tensor, w_ext: torch.Tensor, out: torch.Tensor) -> None:
        """out = A @ W_ext.T in int32: u8 × s8 on the unsigned route; on the s8 × s8 route, A is already
        s8 and W_ext padded to CUDA's k, so only skinny or odd-k activations are padded here."""
        m, k = a.shape
        if not self.signed or (m >= int8.CUDA_MIN_M and k == w_ext.shape[1]):
            torch._int_mm(a, w_ext.t(), out=out)
            return
        padded = a.new_zeros(max(m, int8.CUDA_PAD_M), w_ext.shape[1])
        padded[:m, :k] = a
        out.copy_(torch._int_mm(padded, w_ext.t())[:m])


def repeats_of(params: Mapping[str, Any], shape: Sequence[int]) -> int:
    """GEMMs in a case of this shape: enough for the case's `ops_per_case`, at least one."""
    m, k, n = shape
    return max(1, math.ceil(float(params["ops_per_case"]) / (2.0 * m * n * k)))


def _pool_seed(run_seed: int, what: str) -> int:
    """A seed for one of the pools, from the run's seed (the same on every unit of the run)."""
    return int.from_bytes(hashlib.sha256(f"gemm_int8 {what} {run_seed}".encode()).digest()[:8], "little")


def _probe(mm: Any, device: torch.device, signed: bool) -> str:
    """Compare the route's GEMM (`mm(a, w, out)`) with an exact fp64 reference on full-range inputs; ''
    when exact, else what failed."""
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
    for label, (a_u8, w) in cases.items():
        a = int8.signed_activations(a_u8) if signed else a_u8
        ref = (a.double() @ w.double().t()).to(torch.int32)  # exact: |C| < 2^23
        got = torch.empty(shape[0], shape[0], dtype=torch.int32, device=device)
        mm(a.to(device), w.to(device), out=got)
        if not torch.equal(got.cpu(), ref):
            return f"{label}: max error {int((got.cpu().long() - ref.long()).abs().max())}"
    return ""


def _findings(
    blocks: list[tuple[int, int8.RowsCheck]],
    columns: int8.ColumnCheck,
    m: int,
    repeats: int,
    scheme: str,
    tag_shift: int,
) -> list[Mismatch]:
    """Up to MAX_RECORDED records taken in turn from each check that fired (read only in a failing case)."""
    row: list[Mismatch] = []
    weighted: list[Mismatch] = []
    tagged: list[Mismatch] = []
    for first, rows in blocks:
        if bool(rows.bad.any()):
            found_row, found_weighted = _row_records(rows, first, m, scheme)
            row.extend(found_row[: MAX_RECORDED - len(row)])
            weighted.extend(found_weighted[: MAX_RECORDED - len(weighted)])
            tagged.extend(_tag_records(rows, first, m, tag_shift)[: MAX_RECORDED - len(tagged)])
    return _interleave([row, weighted, tagged, _column_records(columns, repeats)])


def _tag_records(rows: int8.RowsCheck, first: int, m: int, tag_shift: int) -> list[Mismatch]:
    """Rows whose tag is another row's: where the product of activation row X was found instead."""
    found = []
    for i in _first_true(rows.tag_bad):
        actual, expected = (int(t[i]) + tag_shift for t in (rows.tags, rows.expected_tags))
        where = f"row {i % m} of C (repeat {first + i // m}) holds activation row {actual}'s product"
        found.append(Mismatch("abft_row_tag", where, str(expected), str(actual), _mask(expected, actual)))
    return found


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
