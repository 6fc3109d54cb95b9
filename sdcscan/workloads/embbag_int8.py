"""`embbag_int8`: 8-bit rowwise-quantized EmbeddingBag (FBGEMM) with every bag checked against row checksums.

One large table (default 1,000,000 rows, so lookups leave the cache) is built once per worker from the
run seed; each case draws bags of 20–100 lookups and checks each bag's sum against the precomputed row
sums of the intended indices (sdcscan/checks/embbag.py), so a corrupted table element, a corrupted
output and a fetch of the wrong row are all seen. `exact` mode writes dyadic scales and biases so the
check is integer equality; `realistic` quantizes a random float table as FBGEMM does and uses a
rigorous rounding bound. The op's `mode` argument is ignored by torch (always sum), so it is not used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from sdcscan.checks import embbag
from sdcscan.checks.digest import Digest
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome
from sdcscan.workloads import SPECS, WorkloadSpec
from sdcscan.workloads.base import Context, register

MODES = ("exact", "realistic")
MAX_RECORDED = 8
BUILD_CHUNK_ROWS = 1 << 16  # realistic tables are quantized in chunks: no full fp32 copy in memory
MEMORY_SHARE = 4  # a worker's table may use 1 / (MEMORY_SHARE · cpus) of MemAvailable
_SMALL = {"rows": 4096, "dim": 16, "bags": 8, "pooling": [20, 40]}  # selftest: ~1 ms per trial


@register
class EmbbagInt8:
    name: ClassVar[str] = "embbag_int8"
    spec: ClassVar[WorkloadSpec] = SPECS[name]
    negative_sites: ClassVar[tuple[str, ...]] = ("indices",)  # lookup and checksum both use the hashed id
    selftest_variants: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "exact": {"mode": "exact", "weighted": True, **_SMALL},
        "realistic": {"mode": "realistic", **_SMALL},
    }

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.p = p = {**self.spec.defaults, **params}
        lo, hi = p["pooling"] if len(p["pooling"]) == 2 else (-1, -1)
        if p["mode"] not in MODES:
            raise ValueError(f"embbag_int8: mode must be one of {', '.join(MODES)}")
        if not 0 <= lo <= hi or hi * 3 >= 2**16 or p["dim"] % 4 or p["rows"] < 1 or p["bags"] < 1:
            raise ValueError(
                "embbag_int8: need 0 <= pooling[0] <= pooling[1] < 21845, dim % 4 == 0, rows, bags > 0"
            )
        self.packed: torch.Tensor | None = None  # (rows, D + 8) uint8, built by prepare
        self.row_sums: torch.Tensor | None = None

    @classmethod
    def for_selftest(cls, params: Mapping[str, Any]) -> EmbbagInt8:
        return cls(params)  # no shortcut: a trial is about a millisecond

    @classmethod
    def selftest_floor(cls, variant: str, site: str, bit: int | str) -> float | None:
        """Exact mode sees every value-changing flip of a pooled element or an output; realistic: report."""
        return 0.999 if variant == "exact" and site in ("output", "table") else None

    @classmethod
    def selftest_bits(cls, variant: str, site: str) -> Sequence[int | str]:
        return list(range({"output": 32, "table": 8, "indices": 64}[site]))

    def prepare(self, ctx: Context) -> None:
        p = self.p
        rows = fit_rows(p["rows"], p["dim"] + 8 + 8, _mem_available(), os.cpu_count() or 1)
        if rows < p["rows"]:
            ctx.note(
                f"embbag_int8: table scaled down from {p['rows']} to {rows} rows (MemAvailable is short)"
            )
        g = ctx.generator(ctx.run_seed ^ 0xE3BA6)
        packed = (
            _exact_table(g, rows, p["dim"]) if p["mode"] == "exact" else _realistic_table(g, rows, p["dim"])
        )
        sums = embbag.exact_row_sums(packed) if p["mode"] == "exact" else embbag.realistic_row_sums(packed)
        self.packed, self.row_sums = packed.to(ctx.device), sums.to(ctx.device)

    def run(self, ctx: Context, case: Case) -> Outcome:
        p, packed = self.p, self.packed
        assert packed is not None and self.row_sums is not None, "prepare() was not called"
        with ctx.phase("setup"):
            idx, lengths, weights = self._case_inputs(ctx, case, packed.shape[0])
            offsets = torch.cumsum(lengths, 0) - lengths
            psw = None if weights is None else weights.to(torch.float32)
            pooled = packed[int(idx[0])] if idx.numel() else packed[0]  # a row bag 0 reads: (D + 8,) uint8
            saved = pooled.clone()
        try:
            ctx.fault("table", pooled[: p["dim"]])
            with ctx.phase("compute"):
                out = torch.ops.quantized.embedding_bag_byte_rowwise_offsets(
                    packed, idx, offsets, False, 0, False, psw, None, False
                )
            ctx.fault("output", out)
            with ctx.phase("check"):
                bad, expected = self._check(out, idx, lengths, weights)
                digest = Digest().tensor(out).hexdigest()
        finally:
            pooled.copy_(saved)  # a table fault must not leak into later cases
        return Outcome(
            status=STATUS_MISMATCH if bad.any() else STATUS_OK,
            digest=digest,
            mismatches=_mismatches(bad, expected, out, p["mode"]),
            ops=float(idx.numel()),
            ops_unit="lookup",
            detail={"mode": p["mode"], "rows": packed.shape[0], "bad_bags": int(bad.sum())},
        )

    def _case_inputs(
        self, ctx: Context, case: Case, rows: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Indices (hashed raw ids, as DLRM does), pooling sizes, and per-sample weights if enabled."""
        p, g = self.p, ctx.generator(case.seed)
        lo, hi = p["pooling"]
        lengths = torch.randint(lo, hi + 1, (p["bags"],), generator=g)
        raw = torch.randint(0, 2**62, (int(lengths.sum()),), generator=g)
        idx = torch.remainder(ctx.fault("indices", raw), rows)
        weights = None
        if p["weighted"]:
            weights = (
                torch.randint(1, 4, idx.shape, generator=g).float()  # small integers keep exact mode exact
                if p["mode"] == "exact"
                else torch.rand(idx.shape, generator=g) + 0.5
            )
            weights = weights.to(ctx.device)
        return idx.to(ctx.device), lengths.to(ctx.device), weights

    def _check(
        self, out: torch.Tensor, idx: torch.Tensor, lengths: torch.Tensor, weights: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B,) bool of bags that break the checksum identity for the mode, and (B,) fp64 S_exp."""
        assert self.row_sums is not None
        if self.p["mode"] == "exact":
            expected = embbag.exact_expected(self.row_sums, idx, lengths, weights)
            return embbag.exact_bad_bags(out, expected), expected * embbag.UNIT
        s_exp, abs_sums = embbag.realistic_expected(self.row_sums, idx, lengths, weights)
        threshold = embbag.realistic_threshold(abs_sums, lengths, out.shape[1])
        return embbag.realistic_bad_bags(out, s_exp, threshold), s_exp


def fit_rows(rows: int, bytes_per_row: int, mem_available: int | None, cpus: int) -> int:
    """Rows that fit this worker's share of available memory (every CPU unit builds its own table)."""
    if mem_available is None:
        return rows
    return max(1, min(rows, mem_available // (MEMORY_SHARE * cpus * bytes_per_row)))


def _mem_available() -> int | None:
    """MemAvailable in bytes from /proc/meminfo, or None where there is none (not Linux)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _exact_table(g: torch.Generator, rows: int, dim: int) -> torch.Tensor:
    """Dyadic table: uniform q, scale 2^-7, bias k·2^-7 with k in [-255, 0]."""
    q = torch.randint(0, 256, (rows, dim), generator=g, dtype=torch.uint8)
    return embbag.dyadic_pack(q, torch.randint(-255, 1, (rows,), generator=g))


def _realistic_table(g: torch.Generator, rows: int, dim: int) -> torch.Tensor:
    """FBGEMM-quantized N(0, 0.1²) rows with a per-row offset, quantized in chunks."""
    chunks = []
    for start in range(0, rows, BUILD_CHUNK_ROWS):
        n = min(BUILD_CHUNK_ROWS, rows - start)
        w = torch.randn(n, dim, generator=g) * 0.1 + torch.randn(n, 1, generator=g) * 0.05
        chunks.append(torch.ops.quantized.embedding_bag_byte_prepack(w))
    return torch.cat(chunks).contiguous()


def _mismatches(bad: torch.Tensor, expected: torch.Tensor, out: torch.Tensor, mode: str) -> list[Mismatch]:
    """One record per bad bag: the checksum of the intended rows versus the sum of the bag's output."""
    found = []
    for b in bad.nonzero().flatten()[:MAX_RECORDED].tolist():
        actual = float(out[b].sum(dtype=torch.float64))
        where = (
            f"bag {b} sum" if actual != float(expected[b]) else f"bag {b} (an element is off the 2^-7 grid)"
        )
        found.append(Mismatch(f"embbag_{mode}", where, repr(float(expected[b])), repr(actual)))
    return found
