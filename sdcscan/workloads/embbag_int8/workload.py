"""`embbag_int8`: 8- and 4-bit rowwise-quantized EmbeddingBag (FBGEMM) with every bag checked against
checksums of the intended rows.

One large table per bit width (default 1,000,000 rows, so lookups leave the cache) is built once per
worker from the run seed; each case takes the bit width its occurrence selects from `bits`, draws bags
of 20–100 lookups and checks each bag against precomputed row checksums of the intended rows
(sdcscan/checks/embbag/), so a corrupted table element, a corrupted output and a fetch of the wrong
row are all seen. Exact mode reads a bag's checksum off prefix sums taken once over the id pool
(sdcscan/checks/embbag/id_pool.py): two reads per bag instead of a gather per lookup. The row ids (and
per-sample weights) of a case are a view of a per-worker pool at an offset drawn from the case seed,
and its bag lengths are its own: drawing and hashing millions of ids per case cost a third of the
lookups' time (issue 10). With `repeats` > 1 a case runs that many
batches of `bags` bags, each at its own pool offset (all drawn first from the case seed) and all with
the case's one set of bag lengths, so a GPU case can make billions of lookups from a pool sized for
one batch; each batch is looked up and checked, and every fault site strikes batch 0. Outputs are
digested by a device-side fingerprint, every batch's in order. `exact` mode writes dyadic scales and
biases so the check is integer equality;
`realistic` quantizes tables shaped like trained embeddings (sdcscan/checks/embbag/table_families.py) as FBGEMM
does and runs the two-level check: a variance-model trigger on every bag, then a rigorous fp64
recompute of the flagged ones. The op's `mode` argument is ignored by torch (always sum), so it is not
used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from sdcscan.checks.digest import Fingerprint
from sdcscan.checks.embbag import exact, id_pool, packing, realistic, table_families
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome
from sdcscan.workloads.base import Context, register
from sdcscan.workloads.embbag_int8.selftest_spec import SelftestMixin
from sdcscan.workloads.embbag_int8.spec import FOUR_BIT_DIM_MULTIPLE, MAX_POOLING, MODES, SPEC
from sdcscan.workloads.workload_spec import WorkloadSpec

MAX_RECORDED = 8
BUILD_CHUNK_ROWS = 1 << 16  # realistic tables are quantized in chunks: no full fp32 copy in memory
MEMORY_SHARE = 4  # a CPU worker's tables and pools may use 1 / (MEMORY_SHARE · cpus) of MemAvailable
GPU_MEMORY_SHARE = 2  # a GPU worker's may use 1 / GPU_MEMORY_SHARE of its GPU's free memory
CHECK_BYTES_PER_ROW = 24  # realistic: two complex64 and an int64 fingerprint per row (exact needs less)
EXACT_MAX_WEIGHT = 3  # exact mode's per-sample weights are 1..3: small integers keep every sum exact
# Output bytes exact mode checks at a time: L2-sized blocks on a CPU; a GPU's batch in one (one read).
EXACT_BLOCK_BYTES = {"cpu": 1 << 20}
POOL_ROOM = 1 << 20  # ids in the pool beyond a case's largest need: where the cases' offsets range


@register
class EmbbagInt8(SelftestMixin):
    name: ClassVar[str] = "embbag_int8"
    spec: ClassVar[WorkloadSpec] = SPEC
    negative_sites: ClassVar[tuple[str, ...]] = ("indices",)  # lookup and checksum both use the hashed id

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.p = p = {**self.spec.defaults, **params}
        lo, hi = p["pooling"] if len(p["pooling"]) == 2 else (-1, -1)
        if p["mode"] not in MODES:
            raise ValueError(f"embbag_int8: mode must be one of {', '.join(MODES)}")
        if not p["bits"] or any(b not in packing.BITS for b in p["bits"]):
            raise ValueError(f"embbag_int8: bits must be a non-empty list of {packing.BITS}")
        if not 0 <= lo <= hi or hi > MAX_POOLING or p["dim"] % 4 or p["rows"] < 1 or p["bags"] < 1:
            raise ValueError(
                "embbag_int8: need 0 <= pooling[0] <= pooling[1] < 21845, dim % 4 == 0, rows, bags > 0"
            )
        if 4 in p["bits"] and p["dim"] % FOUR_BIT_DIM_MULTIPLE:
            raise ValueError(f"embbag_int8: 4-bit tables need dim % {FOUR_BIT_DIM_MULTIPLE} == 0")
        if not isinstance(p["repeats"], int) or isinstance(p["repeats"], bool) or p["repeats"] < 1:
            raise ValueError(f"embbag_int8: repeats must be an integer >= 1 (got {p['repeats']!r})")
        self.tables: dict[int, torch.Tensor] = {}  # bits -> packed table, built by prepare
        self.row_sums: dict[int, torch.Tensor] = {}  # exact mode
        self.stats: dict[int, realistic.RowStats] = {}  # realistic mode
        self.ids = torch.empty(0, dtype=torch.int32)  # the pool of row ids, built by prepare
        self.weights: torch.Tensor | None = None  # the pool of per-sample weights, when weighted
        self.prefix: dict[int, torch.Tensor] = {}  # exact mode: the pool's S_exp prefix sums per bit width
        self.scratch = exact.Scratch()  # exact mode's buffers, reused by every batch (blocks set by prepare)

    @classmethod
    def for_selftest(cls, params: Mapping[str, Any]) -> EmbbagInt8:
        return cls(params)  # no shortcut: a trial is about a millisecond

    def prepare(self, ctx: Context) -> None:
        p = self.p
        widths = sorted(set(p["bits"]), reverse=True)
        row_bytes = sum(_packed_bytes(b, p["dim"]) for b in widths) + CHECK_BYTES_PER_ROW * len(widths)
        pool_ids = p["bags"] * p["pooling"][1] + POOL_ROOM
        rows = fit_rows(p["rows"], row_bytes, memory_share(ctx.device), _fixed_bytes(p, pool_ids))
        if rows < p["rows"]:
            short = "free GPU memory" if ctx.device.type == "cuda" else "MemAvailable"
            ctx.note(f"embbag_int8: table scaled down from {p['rows']} to {rows} rows ({short} is short)")
        self.scratch = exact.Scratch(EXACT_BLOCK_BYTES.get(ctx.device.type))
        g = ctx.generator(ctx.run_seed ^ 0xE3BA6)
        if p["mode"] == "exact":
            with ctx.exact_host_work():  # uint8 draws and integer sums
                tables = {b: exact_table(g, rows, p["dim"], b) for b in widths}
                self.row_sums = {b: exact.exact_row_sums(t, b).to(ctx.device) for b, t in tables.items()}
        else:
            tables = table_families.mixed_tables(g, rows, p["dim"], widths, chunk_rows=BUILD_CHUNK_ROWS)
        for bits, packed in tables.items():
            self.tables[bits] = packed.to(ctx.device)
            if p["mode"] != "exact":
                self.stats[bits] = realistic.row_stats(packed, bits, weighted=p["weighted"]).to(ctx.device)
        g = ctx.generator(ctx.run_seed ^ 0x1D5)
        with ctx.exact_host_work():
            self.ids = torch.randint(0, rows, (pool_ids,), generator=g, dtype=torch.int32).to(ctx.device)
        if p["weighted"]:
            weights = (
                torch.randint(
                    1, EXACT_MAX_WEIGHT + 1, (pool_ids,), generator=g
                ).float()  # exact mode stays exact
                if p["mode"] == "exact"
                else torch.rand(pool_ids, generator=g) + 0.5
            )
            self.weights = weights.to(ctx.device)
        for bits, row_sums in self.row_sums.items():  # exact mode
            self.prefix[bits] = id_pool.pool_prefix(row_sums, self.ids, self.weights)

    def run(self, ctx: Context, case: Case) -> Outcome:
        p = self.p
        bits = p["bits"][case.occurrence % len(p["bits"])]
        packed = self.tables.get(bits)
        assert packed is not None, "prepare() was not called"
        rows = packed.shape[0]
        with ctx.phase("setup"):
            lengths, starts = self._case_draws(ctx, case)
            count = int(lengths.sum())
            copied = ctx.armed_at("indices")  # batch 0's ids will be a corrupted copy, not the pool's
            idx, weights = self._batch_inputs(ctx, starts[0], count, rows, first=True)
            lengths = lengths.to(ctx.device)
            ends = torch.cumsum(lengths, 0, dtype=torch.int64)
            offsets = (ends - lengths).to(idx.dtype)  # the op wants the ids' dtype
            bounds = torch.cat([ends.new_zeros(1), ends])  # where each bag starts in the batch, and the end
        # The table fault strikes a row bag 0 of batch 0 reads (a view of the shared table); the row stays
        # corrupted for the rest of the case (later batches that read it see it too) and is restored after.
        pooled = packed[int(idx[0])] if ctx.armed_at("table") and idx.numel() else packed[0]
        saved = pooled.clone() if ctx.armed_at("table") else None
        fingerprint = Fingerprint()  # every bag of every batch, in order
        mismatches: list[Mismatch] = []
        bad_bags = 0
        counters: dict[str, int] = {}  # the check's, summed over the batches
        try:
            body = pooled[: _packed_bytes(bits, p["dim"]) - packing.layout(bits).meta_bytes]
            ctx.fault("table", body)
            if saved is not None:
                _note_unchanged_value(ctx, saved, pooled, bits)
            for batch, start in enumerate(starts):
                if batch:
                    with ctx.phase("setup"):
                        idx, weights = self._batch_inputs(ctx, start, count, rows, first=False)
                fetched = _fetched(ctx, idx, rows) if batch == 0 else idx
                with ctx.phase("compute"):
                    out = packing.embedding_bag(packed, bits, fetched, offsets, weights)
                if batch == 0:
                    ctx.fault("output", out)
                in_pool = None if batch == 0 and copied else start  # a copy's S_exp is gathered
                with ctx.phase("check"):
                    bad, expected, detail = self._check(bits, out, idx, lengths, bounds, in_pool, weights)
                    fingerprint.tensor(out)
                # A wait for the device per batch (the realistic check waits anyway): tens of
                # microseconds against the milliseconds of a batch worth repeating.
                found = int(bad.sum())
                bad_bags += found
                counters = {key: counters.get(key, 0) + value for key, value in detail.items()}
                if found and len(mismatches) < MAX_RECORDED:
                    label = None if p["repeats"] == 1 else batch
                    room = MAX_RECORDED - len(mismatches)
                    mismatches += _mismatches(bad, expected, out, p["mode"], bits, label)[:room]
            digest = fingerprint.hexdigest()
        finally:
            if saved is not None:
                pooled.copy_(saved)  # a table fault must not leak into later cases
        return Outcome(
            status=STATUS_MISMATCH if bad_bags else STATUS_OK,
            digest=digest,
            mismatches=mismatches,
            ops=float(count * len(starts)),
            ops_unit="lookup",
            detail={
                "mode": p["mode"],
                "bits": bits,
                "dim": p["dim"],  # elements pooled per lookup: what sdcscan.proof counts
                "rows": rows,
                "bad_bags": bad_bags,
                "rows_checked": p["bags"] * len(starts),
                **counters,
            },
        )

    def _case_draws(self, ctx: Context, case: Case) -> tuple[torch.Tensor, list[int]]:
        """The case's (bags,) int32 pooling sizes on the CPU, used by every batch, and each batch's
        offset in the id pool: all drawn from the case seed before any lookup, in that order (with one
        batch, the same draws as before `repeats` existed)."""
        p, g = self.p, ctx.generator(case.seed)
        lo, hi = p["pooling"]
        lengths = torch.randint(lo, hi + 1, (p["bags"],), generator=g, dtype=torch.int32)
        count = int(lengths.sum())
        starts = torch.randint(self.ids.numel() - count + 1, (p["repeats"],), generator=g)
        return lengths, starts.tolist()

    def _batch_inputs(
        self, ctx: Context, start: int, count: int, rows: int, *, first: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One batch's row ids (int32) and per-sample weights if enabled: views of the pools at `start`.

        The `indices` site (batch 0 only) corrupts a raw 64-bit id before it is hashed to a row
        (`% rows`, as DLRM does), so the lookup and the checksum both use the corrupted row: the
        negative control.
        """
        idx = self.ids[start : start + count]
        if first and ctx.armed_at("indices"):
            raw = ctx.fault("indices", idx.to(torch.int64))
            idx = torch.remainder(raw, rows).to(torch.int32)
        weights = None if self.weights is None else self.weights[start : start + count]
        return idx, weights

    def _check(
        self,
        bits: int,
        out: torch.Tensor,
        idx: torch.Tensor,
        lengths: torch.Tensor,
        bounds: torch.Tensor,
        start: int | None,
        weights: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, int]]:
        """(B,) bool of bags the mode's check condemns, (B,) fp64 S_exp, and the check's counters.

        Exact mode reads S_exp off the pool's prefix sums when the ids are the pool's view at `start`,
        and gathers the row sums at `idx` otherwise (start None).
        """
        if self.p["mode"] == "exact":
            if start is not None:
                expected = id_pool.expected_at(self.prefix[bits], start, bounds)
            else:
                expected = exact.exact_expected(self.row_sums[bits], idx.long(), lengths.long(), weights)
            return exact.exact_bad_bags(out, expected, self.scratch), expected * packing.UNIT, {}
        verdict = realistic.realistic_check(
            out, self.tables[bits], self.stats[bits], idx.long(), lengths.long(), weights
        )
        counters = {"flagged_bags": verdict.flagged, "corrupt_rows": verdict.corrupt_rows}
        return verdict.bad, verdict.expected, counters


def memory_share(device: torch.device) -> int | None:
    """Bytes this worker may use: a share of MemAvailable per CPU (every CPU unit builds its own tables),
    or a share of its GPU's free memory (one worker per GPU); None where that is unknown."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0]) // GPU_MEMORY_SHARE
    available = _mem_available()
    return None if available is None else available // (MEMORY_SHARE * (os.cpu_count() or 1))


def _fixed_bytes(p: Mapping[str, Any], pool_ids: int) -> int:
    """Bytes a worker needs whatever its table rows: the id pool (with its weights), and in exact mode
    the pool's prefix sums per bit width and the check's three output-sized buffers."""
    pool = pool_ids * (8 if p["weighted"] else 4)
    if p["mode"] != "exact":
        return pool
    return pool + 4 * (pool_ids + 1) * len(set(p["bits"])) + 12 * p["bags"] * p["dim"]  # (buffers: at most)


def fit_rows(rows: int, bytes_per_row: int, share: int | None, fixed_bytes: int = 0) -> int:
    """Rows that fit a worker's `share` of memory after the `fixed_bytes` it needs whatever the rows
    (its id pool); all of them where the share is unknown."""
    if share is None:
        return rows
    return max(1, min(rows, (share - fixed_bytes) // bytes_per_row))


def exact_table(g: torch.Generator, rows: int, dim: int, bits: int) -> torch.Tensor:
    """Dyadic table: uniform q, scale 2^-7, bias k·2^-7 with k in [-(2^bits − 1), 0], and each row's sum
    of q made to carry the parity of its index's popcount (by toggling the lowest bit of its first
    value where needed), so that a fetch of row r XOR 2^k changes the bag sum's parity: every wrong-row
    fetch of one index bit is caught, not only those between rows of different sums."""
    q_max = packing.layout(bits).q_max
    q = torch.randint(0, q_max + 1, (rows, dim), generator=g, dtype=torch.uint8)
    wanted = _popcount_parity(torch.arange(rows))
    q[:, 0] ^= ((q.sum(1, dtype=torch.int64) & 1) != wanted).to(torch.uint8)
    bias_units = torch.randint(-q_max, 1, (rows,), generator=g)
    return packing.dyadic_pack(q, bias_units, bits)


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
    lay = packing.layout(bits)
    return dim // lay.per_byte + lay.meta_bytes


def _fetched(ctx: Context, idx: torch.Tensor, rows: int) -> torch.Tensor:
    """The row ids the op reads: `idx` itself unless a fault strikes the `fetch` site, which corrupts a
    copy of the batch's ids (one lookup for a bit flip, several bags' for `wrong_rows`; a clean case
    copies nothing); the check keeps `idx`."""
    if idx.numel() == 0 or not ctx.armed_at("fetch"):  # nothing is fetched, or nothing goes wrong
        return idx
    wide = idx.to(torch.int64)  # a copy, with the high bits of a 64-bit id to flip
    ctx.fault("fetch", wide)
    if ctx.injected is None or ctx.injected["site"] != "fetch":
        return idx
    wrapped = torch.remainder(wide, rows)  # a flipped high bit must still name a row (else the op raises)
    if torch.equal(wrapped, idx.to(torch.int64)):
        ctx.injected["value_changed"] = False  # the flip wrapped back onto the intended row
    return wrapped.to(idx.dtype)


def _note_unchanged_value(ctx: Context, saved: torch.Tensor, pooled: torch.Tensor, bits: int) -> None:
    """A flipped q byte of a row with scale 0 (FBGEMM's 8-bit form of a constant row) changes no value:
    record it as unchanged, like +0.0 → −0.0, so the selftest does not count it as a miss."""
    if ctx.injected is None or ctx.injected["site"] != "table" or not ctx.injected["value_changed"]:
        return
    before = packing.split_packed(saved.unsqueeze(0), bits)
    after = packing.split_packed(pooled.unsqueeze(0), bits)
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
    bad: torch.Tensor, expected: torch.Tensor, out: torch.Tensor, mode: str, bits: int, batch: int | None
) -> list[Mismatch]:
    """One record per bad bag of a batch (up to MAX_RECORDED): the checksum of the intended rows versus
    the sum of the bag's output. `batch` is named in each record unless it is None (one batch a case)."""
    found = []
    for b in bad.nonzero().flatten()[:MAX_RECORDED].tolist():
        actual = float(out[b].sum(dtype=torch.float64))
        bag = f"bag {b}" if batch is None else f"batch {batch}, bag {b}"
        if mode == "exact" and actual == float(expected[b]):
            where = f"{bits}-bit {bag} (an element is off the 2^-7 grid)"
        elif mode == "exact":
            where = f"{bits}-bit {bag} sum"
        else:
            where = f"{bits}-bit {bag} (an element beyond its rounding bound, or a row changed in memory)"
        found.append(Mismatch(f"embbag_{mode}", where, repr(float(expected[b])), repr(actual)))
    return found
