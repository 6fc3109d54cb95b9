"""`embbag_int8`: 8- and 4-bit rowwise-quantized EmbeddingBag (FBGEMM) with every bag checked against
checksums of the intended rows.

One large table per bit width (default 1,000,000 rows, so lookups leave the cache) is built once per
worker from the run seed; each case takes the bit width its occurrence selects from `bits`, draws bags
of 20–100 lookups and checks each bag against precomputed row checksums gathered at the intended
indices (sdcscan/checks/embbag.py), so a corrupted table element, a corrupted output and a fetch of the
wrong row are all seen. `exact` mode writes dyadic scales and biases so the check is integer equality;
`realistic` quantizes tables shaped like trained embeddings (sdcscan/checks/embbag_tables.py) as FBGEMM
does and runs the two-level check: a variance-model trigger on every bag, then a rigorous fp64
recompute of the flagged ones. The op's `mode` argument is ignored by torch (always sum), so it is not
used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from sdcscan.checks import embbag, embbag_tables
from sdcscan.checks.digest import Digest
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome
from sdcscan.workloads import SPECS, WorkloadSpec
from sdcscan.workloads.base import Context, register

MODES = ("exact", "realistic")
MAX_RECORDED = 8
BUILD_CHUNK_ROWS = 1 << 16  # realistic tables are quantized in chunks: no full fp32 copy in memory
MEMORY_SHARE = 4  # a worker's tables may use 1 / (MEMORY_SHARE · cpus) of MemAvailable
CHECK_BYTES_PER_ROW = 24  # realistic: two complex64 and an int64 fingerprint per row (exact needs less)
FETCH_SITE_LOOKUPS = 64  # the `fetch` fault strikes one of the first lookups of a case
_SMALL = {"rows": 4096, "dim": 16, "bags": 8, "pooling": [20, 40]}  # selftest: ~1 ms per trial
# Floors measured with `sdcscan selftest` and scripts/bench_embbag_detection.py (docs/abft.md §2.5).
# Realistic mode, in bits of a table byte: the high nibble of an 8-bit value (its lower bits change an
# element by 1/16 of that or less and are reported only); every bit of a 4-bit byte, whose quantization
# step is 1/15 of the row's range.
_REALISTIC_TABLE_FLOORS = {8: dict.fromkeys(range(4, 8), 0.99), 4: dict.fromkeys(range(8), 0.99)}


@register
class EmbbagInt8:
    name: ClassVar[str] = "embbag_int8"
    spec: ClassVar[WorkloadSpec] = SPECS[name]
    negative_sites: ClassVar[tuple[str, ...]] = ("indices",)  # lookup and checksum both use the hashed id
    blind_spots: ClassVar[tuple[str, ...]] = (
        "realistic mode: a change within the rigorous rounding bound of the element it hits (low q bits of "
        "rows orders of magnitude below their bag's largest, near-constant rows, output mantissa bits 0-4)",
        "exact mode: two output elements of one bag exchanged; a wrong-row fetch between rows of equal sums",
        "a q bit flipped in a row stored with scale 0 (no value changes); an id corrupted before the lookup "
        "(the checksum uses the same id: the negative control)",
    )  # docs/abft.md §2.6
    selftest_variants: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "exact": {"mode": "exact", "weighted": True, "bits": [8], **_SMALL},
        "exact_4bit": {"mode": "exact", "weighted": True, "bits": [4], **_SMALL},
        "realistic": {"mode": "realistic", "bits": [8], **_SMALL},
        "realistic_4bit": {"mode": "realistic", "weighted": True, "bits": [4], **_SMALL},
    }

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.p = p = {**self.spec.defaults, **params}
        lo, hi = p["pooling"] if len(p["pooling"]) == 2 else (-1, -1)
        if p["mode"] not in MODES:
            raise ValueError(f"embbag_int8: mode must be one of {', '.join(MODES)}")
        if not p["bits"] or any(b not in embbag.BITS for b in p["bits"]):
            raise ValueError(f"embbag_int8: bits must be a non-empty list of {embbag.BITS}")
        if not 0 <= lo <= hi or hi * 3 >= 2**16 or p["dim"] % 4 or p["rows"] < 1 or p["bags"] < 1:
            raise ValueError(
                "embbag_int8: need 0 <= pooling[0] <= pooling[1] < 21845, dim % 4 == 0, rows, bags > 0"
            )
        if 4 in p["bits"] and p["dim"] % 8:
            raise ValueError("embbag_int8: 4-bit tables need dim % 8 == 0")
        self.tables: dict[int, torch.Tensor] = {}  # bits -> packed table, built by prepare
        self.row_sums: dict[int, torch.Tensor] = {}  # exact mode
        self.stats: dict[int, embbag.RowStats] = {}  # realistic mode

    @classmethod
    def for_selftest(cls, params: Mapping[str, Any]) -> EmbbagInt8:
        return cls(params)  # no shortcut: a trial is about a millisecond

    @classmethod
    def selftest_floor(cls, variant: str, site: str, bit: int | str) -> float | None:
        """Exact mode sees every value-changing flip of a pooled element or an output, and every wrong-row
        fetch of one bit (each row's sum carries its index's parity); realistic mode is held to 99% on
        the high bits of a table value and on wrong-row fetches, and reports the rest."""
        if variant.startswith("exact"):
            return 1.0 if site in ("output", "table", "fetch") else None
        if site == "fetch":
            return 0.99
        bits = 4 if variant.endswith("4bit") else 8
        return _REALISTIC_TABLE_FLOORS[bits].get(bit) if site == "table" and isinstance(bit, int) else None

    @classmethod
    def selftest_bits(cls, variant: str, site: str) -> Sequence[int | str]:
        """Every bit of an output word, of a table byte, of a raw id; for `fetch`, the bits that keep a
        row id inside the selftest's table (a power of two of rows), each a wrong-row fetch."""
        rows = {**cls.spec.defaults, **cls.selftest_variants[variant]}["rows"]
        return list(range({"output": 32, "table": 8, "indices": 64, "fetch": rows.bit_length() - 1}[site]))

    def prepare(self, ctx: Context) -> None:
        p = self.p
        widths = sorted(set(p["bits"]), reverse=True)
        row_bytes = sum(_packed_bytes(b, p["dim"]) for b in widths) + CHECK_BYTES_PER_ROW * len(widths)
        rows = fit_rows(p["rows"], row_bytes, _mem_available(), os.cpu_count() or 1)
        if rows < p["rows"]:
            ctx.note(
                f"embbag_int8: table scaled down from {p['rows']} to {rows} rows (MemAvailable is short)"
            )
        g = ctx.generator(ctx.run_seed ^ 0xE3BA6)
        if p["mode"] == "exact":
            tables = {b: exact_table(g, rows, p["dim"], b) for b in widths}
        else:
            tables = embbag_tables.mixed_tables(g, rows, p["dim"], widths, chunk_rows=BUILD_CHUNK_ROWS)
        for bits, packed in tables.items():
            self.tables[bits] = packed.to(ctx.device)
            if p["mode"] == "exact":
                self.row_sums[bits] = embbag.exact_row_sums(packed, bits).to(ctx.device)
            else:
                self.stats[bits] = embbag.row_stats(packed, bits, weighted=p["weighted"]).to(ctx.device)

    def run(self, ctx: Context, case: Case) -> Outcome:
        p = self.p
        bits = p["bits"][case.occurrence % len(p["bits"])]
        packed = self.tables.get(bits)
        assert packed is not None, "prepare() was not called"
        with ctx.phase("setup"):
            idx, lengths, weights = self._case_inputs(ctx, case, packed.shape[0])
            offsets = torch.cumsum(lengths, 0) - lengths
            psw = None if weights is None else weights.to(torch.float32)
            pooled = packed[int(idx[0])] if idx.numel() else packed[0]  # a row bag 0 reads (a view)
            saved = pooled.clone()
        try:
            body = pooled[: _packed_bytes(bits, p["dim"]) - embbag.layout(bits).meta_bytes]
            ctx.fault("table", body)
            _note_unchanged_value(ctx, saved, pooled, bits)
            fetched = _fetched(ctx, idx, packed.shape[0])
            with ctx.phase("compute"):
                out = embbag.embedding_bag(packed, bits, fetched, offsets, psw)
            ctx.fault("output", out)
            with ctx.phase("check"):
                bad, expected, detail = self._check(bits, out, idx, lengths, weights)
                digest = Digest().tensor(out).hexdigest()  # every bag of the case
        finally:
            pooled.copy_(saved)  # a table fault must not leak into later cases
        return Outcome(
            status=STATUS_MISMATCH if bad.any() else STATUS_OK,
            digest=digest,
            mismatches=_mismatches(bad, expected, out, p["mode"], bits),
            ops=float(idx.numel()),
            ops_unit="lookup",
            detail={
                "mode": p["mode"],
                "bits": bits,
                "rows": packed.shape[0],
                "bad_bags": int(bad.sum()),
                "rows_checked": out.shape[0],
                **detail,
            },
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
        self,
        bits: int,
        out: torch.Tensor,
        idx: torch.Tensor,
        lengths: torch.Tensor,
        weights: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, int]]:
        """(B,) bool of bags the mode's check condemns, (B,) fp64 S_exp, and the check's counters."""
        if self.p["mode"] == "exact":
            expected = embbag.exact_expected(self.row_sums[bits], idx, lengths, weights)
            return embbag.exact_bad_bags(out, expected), expected * embbag.UNIT, {}
        verdict = embbag.realistic_check(out, self.tables[bits], self.stats[bits], idx, lengths, weights)
        counters = {"flagged_bags": verdict.flagged, "corrupt_rows": verdict.corrupt_rows}
        return verdict.bad, verdict.expected, counters


def fit_rows(rows: int, bytes_per_row: int, mem_available: int | None, cpus: int) -> int:
    """Rows that fit this worker's share of available memory (every CPU unit builds its own tables)."""
    if mem_available is None:
        return rows
    return max(1, min(rows, mem_available // (MEMORY_SHARE * cpus * bytes_per_row)))


def exact_table(g: torch.Generator, rows: int, dim: int, bits: int) -> torch.Tensor:
    """Dyadic table: uniform q, scale 2^-7, bias k·2^-7 with k in [-(2^bits − 1), 0], and each row's sum
    of q made to carry the parity of its index's popcount (by toggling the lowest bit of its first
    value where needed), so that a fetch of row r XOR 2^k changes the bag sum's parity: every wrong-row
    fetch of one index bit is caught, not only those between rows of different sums."""
    q_max = embbag.layout(bits).q_max
    q = torch.randint(0, q_max + 1, (rows, dim), generator=g, dtype=torch.uint8)
    wanted = _popcount_parity(torch.arange(rows))
    q[:, 0] ^= ((q.sum(1, dtype=torch.int64) & 1) != wanted).to(torch.uint8)
    bias_units = torch.randint(-q_max, 1, (rows,), generator=g)
    return embbag.dyadic_pack(q, bias_units, bits)


def _popcount_parity(values: torch.Tensor) -> torch.Tensor:
    """(N,) int64 parity (0 or 1) of the number of set bits of each non-negative value."""
    parity = torch.zeros_like(values)
    rest = values.clone()
    while bool((rest > 0).any()):
        parity ^= rest & 1
        rest >>= 1
    return parity


def _packed_bytes(bits: int, dim: int) -> int:
    """Bytes of one packed row."""
    lay = embbag.layout(bits)
    return dim // lay.per_byte + lay.meta_bytes


def _fetched(ctx: Context, idx: torch.Tensor, rows: int) -> torch.Tensor:
    """The row ids the op reads: `idx` itself unless a fault strikes the `fetch` site, which corrupts one
    of the first lookups (a copy of a few ids is all a clean case pays); the check keeps `idx`."""
    if idx.numel() == 0:  # every bag is empty: nothing is fetched
        return idx
    head = idx[:FETCH_SITE_LOOKUPS].clone()
    ctx.fault("fetch", head)
    if ctx.injected is None or ctx.injected["site"] != "fetch":
        return idx
    wrapped = torch.remainder(head, rows)  # a flipped high bit must still name a row (else the op raises)
    if torch.equal(wrapped, idx[: head.numel()]):
        ctx.injected["value_changed"] = False  # the flip wrapped back onto the intended row
    fetched = idx.clone()
    fetched[: head.numel()] = wrapped
    return fetched


def _note_unchanged_value(ctx: Context, saved: torch.Tensor, pooled: torch.Tensor, bits: int) -> None:
    """A flipped q byte of a row with scale 0 (FBGEMM's 8-bit form of a constant row) changes no value:
    record it as unchanged, like +0.0 → −0.0, so the selftest does not count it as a miss."""
    if ctx.injected is None or ctx.injected["site"] != "table" or not ctx.injected["value_changed"]:
        return
    before = embbag.split_packed(saved.unsqueeze(0), bits)
    after = embbag.split_packed(pooled.unsqueeze(0), bits)
    values = [q.to(torch.float64) * s.double()[:, None] + b.double()[:, None] for q, s, b in (before, after)]
    if torch.equal(values[0], values[1]):
        ctx.injected["value_changed"] = False


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


def _mismatches(
    bad: torch.Tensor, expected: torch.Tensor, out: torch.Tensor, mode: str, bits: int
) -> list[Mismatch]:
    """One record per bad bag: the checksum of the intended rows versus the sum of the bag's output."""
    found = []
    for b in bad.nonzero().flatten()[:MAX_RECORDED].tolist():
        actual = float(out[b].sum(dtype=torch.float64))
        if mode == "exact" and actual == float(expected[b]):
            where = f"{bits}-bit bag {b} (an element is off the 2^-7 grid)"
        elif mode == "exact":
            where = f"{bits}-bit bag {b} sum"
        else:
            where = f"{bits}-bit bag {b} (an element beyond its rounding bound, or a row changed in memory)"
        found.append(Mismatch(f"embbag_{mode}", where, repr(float(expected[b])), repr(actual)))
    return found
