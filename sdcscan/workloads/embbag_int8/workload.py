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

from sdcscan.checks import counter_rng, limits
from sdcscan.checks.digest import Fingerprint
from sdcscan.checks.embbag import exact, exact_fused, id_pool, packing, realistic, table_families
from sdcscan.checks.masks import count_true
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome
from sdcscan.workloads.base import Context, register, takes_fused_kernel
from sdcscan.workloads.embbag_int8.selftest_spec import SelftestMixin
from sdcscan.workloads.embbag_int8.spec import FOUR_BIT_DIM_MULTIPLE, MAX_POOLING, MODES, SPEC
from sdcscan.workloads.readout import float_of, read_once
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
LENGTHS_ROOM = 1 << 16  # bag lengths in their pool beyond one batch's: where the cases' windows start


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
        if not p["bits"] or any(b not in limits.BITS for b in p["bits"]):
            raise ValueError(f"embbag_int8: bits must be a non-empty list of {limits.BITS}")
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
        # Exact mode's second checksum: odd column weights, each row's weighted sum, the pool's prefix.
        self.column_weights = torch.empty(0, dtype=torch.int32)
        self.weighted_sums: dict[int, torch.Tensor] = {}
        self.weighted_prefix: dict[int, torch.Tensor] = {}
        self.stats: dict[int, realistic.RowStats] = {}  # realistic mode
        self.ids = torch.empty(0, dtype=torch.int32)  # the pool of row ids, built by prepare
        self.weights: torch.Tensor | None = None  # the pool of per-sample weights, when weighted
        self.prefix: dict[int, torch.Tensor] = {}  # exact mode: the pool's S_exp prefix sums per bit width
        self.scratch = exact.Scratch()  # exact mode's buffers, reused by every batch (blocks set by prepare)
        self.fused = False  # exact mode's check by the fused kernel (triton_kernels.choose)
        # The pool of bag lengths (int32, on the device) and its running sums on the host, so that a
        # case's lookup count is known without reading the device (built by prepare).
        self.lengths = torch.empty(0, dtype=torch.int32)
        self.length_ends: list[int] = []

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
        if p["mode"] == "exact":
            self.fused = takes_fused_kernel(
                ctx, p["check_kernel"], self.name, lambda: exact_fused.agrees_on_a_small_output(ctx.device)
            )
            # drawn on the unit's device by the counter generator: no host work
            tables = {
                b: exact_table(ctx.run_seed ^ 0xE3BA6 ^ b, rows, p["dim"], b, ctx.device) for b in widths
            }
            self.row_sums = {b: exact.exact_row_sums(t, b) for b, t in tables.items()}
            self.column_weights = exact.column_weights(p["dim"], ctx.run_seed ^ 0xC01, ctx.device)
            self.weighted_sums = {
                b: exact.weighted_row_sums(t, b, self.column_weights) for b, t in tables.items()
            }
        else:  # shaped like trained embeddings: float draws on the host (the same bits on every device)
            g = ctx.generator(ctx.run_seed ^ 0xE3BA6)
            tables = table_families.mixed_tables(g, rows, p["dim"], widths, chunk_rows=BUILD_CHUNK_ROWS)
        for bits, packed in tables.items():
            self.tables[bits] = packed.to(ctx.device)
            if p["mode"] != "exact":
                self.stats[bits] = realistic.row_stats(packed, bits, weighted=p["weighted"]).to(ctx.device)
        seed = ctx.run_seed ^ 0x1D5
        self.ids = counter_rng.fill_below(seed, pool_ids, rows, torch.int32, ctx.device)
        if p["weighted"]:
            if p["mode"] == "exact":  # small integers 1..EXACT_MAX_WEIGHT keep every sum exact
                weights = counter_rng.below(seed ^ 0x3E16, pool_ids, EXACT_MAX_WEIGHT, ctx.device) + 1
            else:
                weights = torch.rand(pool_ids, generator=ctx.generator(seed ^ 0x3E16)) + 0.5
            self.weights = weights.to(ctx.device, torch.float32)
        for bits, row_sums in self.row_sums.items():  # exact mode
            self.prefix[bits] = id_pool.pool_prefix(row_sums, self.ids, self.weights)
            self.weighted_prefix[bits] = id_pool.pool_prefix(self.weighted_sums[bits], self.ids, self.weights)
        lo, hi = p["pooling"]
        seed = ctx.run_seed ^ 0x1E9
        lengths = counter_rng.below(seed, p["bags"] + LENGTHS_ROOM, hi - lo + 1, "cpu") + lo
        self.length_ends = [0, *torch.cumsum(lengths, 0).tolist()]
        self.lengths = lengths.to(torch.int32).to(ctx.device)

    def run(self, ctx: Context, case: Case) -> Outcome:
        p = self.p
        bits = p["bits"][case.occurrence % len(p["bits"])]
        packed = self.tables.get(bits)
        assert packed is not None, "prepare() was not called"
        rows = packed.shape[0]
        with ctx.phase("setup"):
            lengths, count, starts = self._case_draws(case)
            copied = ctx.armed_at("indices")  # batch 0's ids will be a corrupted copy, not the pool's
            idx, weights = self._batch_inputs(ctx, starts[0], count, rows, first=True)
            ends = torch.cumsum(lengths, 0, dtype=torch.int64)
            offsets = (ends - lengths).to(idx.dtype)  # the op wants the ids' dtype
            bounds = torch.cat([ends.new_zeros(1), ends])  # where each bag starts in the batch, and the end
            lengths = lengths.long()
        # The table fault strikes a row bag 0 of batch 0 reads (a view of the shared table); the row stays
        # corrupted for the rest of the case (later batches that read it see it too) and is restored after.
        pooled = packed[int(idx[0])] if ctx.armed_at("table") and idx.numel() else packed[0]
        saved = pooled.clone() if ctx.armed_at("table") else None
        fingerprint = Fingerprint()  # every bag of every batch, in order
        tally = _BadBags(len(starts), ctx.device)
        counters: list[dict[str, torch.Tensor]] = []  # the check's, per batch (realistic mode)
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
                    bad, expected, detail, printed = self._check(
                        bits, out, idx, lengths, bounds, in_pool, weights
                    )
                    tally.add(batch, bad, expected, out)
                    if printed is None:
                        fingerprint.tensor(out)
                    else:  # the fused check took the output's fingerprint as it read it
                        fingerprint.summed(out, printed)
                counters.append(detail)
            with ctx.phase("check"):
                names = sorted(counters[0])
                found, sums, counted = read_once(  # the case's one wait for the device
                    [tally.device_results(), fingerprint.sums(), _stacked(counters, names)]
                )
            digest = fingerprint.hexdigest_of(sums)
        finally:
            if saved is not None:
                pooled.copy_(saved)  # a table fault must not leak into later cases
        bad_bags, mismatches = tally.findings(found, p["mode"], bits, batched=p["repeats"] > 1)
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
                **{name: int(sum(counted[i :: len(names)])) for i, name in enumerate(names)},
            },
        )

    def _case_draws(self, case: Case) -> tuple[torch.Tensor, int, list[int]]:
        """The case's (bags,) int32 pooling sizes on the device (a window of the lengths pool), used by
        every batch, their total, and each batch's offset in the id pool: all from the case seed by the
        counter generator, computed on the host as numbers (no wait for the device, no host tensors)."""
        bags = self.p["bags"]
        window = counter_rng.host_below(case.seed, 0, LENGTHS_ROOM + 1)
        count = self.length_ends[window + bags] - self.length_ends[window]
        room = self.ids.numel() - count + 1
        starts = [counter_rng.host_below(case.seed, 1 + batch, room) for batch in range(self.p["repeats"])]
        return self.lengths[window : window + bags], count, starts

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
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor], torch.Tensor | None]:
        """(B,) bool of bags the mode's check condemns, (B,) fp64 S_exp, the check's counters (0-dim
        device tensors), and the output's fingerprint sum where the fused kernel took it (else None).

        Exact mode reads S_exp off the pool's prefix sums when the ids are the pool's view at `start`,
        and gathers the row sums at `idx` otherwise (start None).
        """
        if self.p["mode"] == "exact":
            if start is not None:
                expected = id_pool.expected_at(self.prefix[bits], start, bounds)
                weighted = id_pool.expected_at(self.weighted_prefix[bits], start, bounds)
            else:
                expected = exact.exact_expected(self.row_sums[bits], idx.long(), lengths, weights)
                weighted = exact.exact_expected(self.weighted_sums[bits], idx.long(), lengths, weights)
            if self.fused:
                bad, printed = exact_fused.bad_bags(out, expected, self.column_weights, weighted)
                return bad, expected * packing.UNIT, {}, printed
            bad = exact.exact_bad_bags(out, expected, self.scratch, (self.column_weights, weighted))
            return bad, expected * packing.UNIT, {}, None
        verdict = realistic.realistic_check(
            out, self.tables[bits], self.stats[bits], idx.long(), lengths, weights
        )
        counters = {"flagged_bags": verdict.flagged, "corrupt_rows": verdict.corrupt_rows}
        return verdict.bad, verdict.expected, {k: torch.as_tensor(v) for k, v in counters.items()}, None


class _BadBags:
    """The bags a case's batches condemn, kept on the device until the case's one read: each batch's
    count, and its first MAX_RECORDED bad bags with their expected and actual sums."""

    def __init__(self, batches: int, device: torch.device) -> None:
        self.counts = torch.zeros(batches, dtype=torch.int64, device=device)
        self.bags = torch.zeros((batches, MAX_RECORDED), dtype=torch.int64, device=device)
        self.sums = torch.zeros((batches, 2, MAX_RECORDED), dtype=torch.float64, device=device)

    def add(self, batch: int, bad: torch.Tensor, expected: torch.Tensor, out: torch.Tensor) -> None:
        """Fold in one batch: (B,) bad flags, (B,) expected sums and its (B, D) output; no wait."""
        count_true(bad, out=self.counts[batch])  # no int64 copy of the flags (checks/masks.py)
        keep = min(MAX_RECORDED, bad.shape[0])
        if not keep:
            return
        order = torch.arange(bad.shape[0], device=bad.device)
        # Bad bags first, in order; bag B stands in where fewer are bad (findings drops them).
        first = torch.topk(torch.where(bad, order, bad.shape[0]), keep, largest=False).values
        self.bags[batch, :keep] = first
        at = first.clamp(max=bad.shape[0] - 1)
        self.sums[batch, 0, :keep] = expected.index_select(0, at).double()
        self.sums[batch, 1, :keep] = out.index_select(0, at).sum(1, dtype=torch.float64)

    def device_results(self) -> torch.Tensor:
        """Everything `findings` needs, as one float64 tensor on the device (bags and counts exact)."""
        return torch.cat([self.counts.double(), self.bags.double().flatten(), self.sums.flatten()])

    def findings(
        self, words: list[int], mode: str, bits: int, *, batched: bool
    ) -> tuple[int, list[Mismatch]]:
        """(bad bags in all batches, up to MAX_RECORDED records) from `device_results` as read."""
        values = [float_of(w) for w in words]
        batches = self.counts.shape[0]
        counts = [int(v) for v in values[:batches]]
        bags = values[batches : batches * (1 + MAX_RECORDED)]
        sums = values[batches * (1 + MAX_RECORDED) :]
        found: list[Mismatch] = []
        for batch, count in enumerate(counts):
            for i in range(min(count, MAX_RECORDED)):
                if len(found) == MAX_RECORDED:
                    break
                bag = int(bags[batch * MAX_RECORDED + i])
                base = batch * 2 * MAX_RECORDED + i
                label = f"batch {batch}, bag {bag}" if batched else f"bag {bag}"
                found.append(_mismatch(mode, bits, label, sums[base], sums[base + MAX_RECORDED]))
        return sum(counts), found


def _stacked(counters: list[dict[str, torch.Tensor]], names: list[str]) -> torch.Tensor:
    """The batches' counters, name by name within each batch, as one int64 tensor (empty when none)."""
    if not names:
        return torch.zeros(0, dtype=torch.int64)
    return torch.stack([c[name].to(torch.int64).reshape(()) for c in counters for name in names])


def memory_share(device: torch.device) -> int | None:
    """Bytes this worker may use: a share of MemAvailable per CPU (every CPU unit builds its own tables),
    or a share of its GPU's free memory (one worker per GPU); None where that is unknown."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0]) // GPU_MEMORY_SHARE
    if device.type == "meta":  # the cost model's device (sdcscan.costmodel): it holds no memory
        return None
    available = _mem_available()
    return None if available is None else available // (MEMORY_SHARE * (os.cpu_count() or 1))


def _fixed_bytes(p: Mapping[str, Any], pool_ids: int) -> int:
    """Bytes a worker needs whatever its table rows: the id pool (with its weights), and in exact mode
    the pool's prefix sums per bit width and the check's three output-sized buffers."""
    pool = pool_ids * (8 if p["weighted"] else 4)
    if p["mode"] != "exact":
        return pool
    return int(
        pool + 4 * (pool_ids + 1) * len(set(p["bits"])) + 12 * p["bags"] * p["dim"]
    )  # (buffers: at most)


def fit_rows(rows: int, bytes_per_row: int, share: int | None, fixed_bytes: int = 0) -> int:
    """Rows that fit a worker's `share` of memory after the `fixed_bytes` it needs whatever the rows
    (its id pool); all of them where the share is unknown."""
    if share is None:
        return rows
    return max(1, min(rows, (share - fixed_bytes) // bytes_per_row))


def exact_table(
    seed: int, rows: int, dim: int, bits: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Dyadic table drawn on `device` from `seed` by the counter generator: uniform q, scale 2^-7, bias
    k·2^-7 with k in [-(2^bits − 1), 0], and each row's sum of q made to carry the parity of its index's
    popcount (by toggling the lowest bit of its first value where needed), so that a fetch of row
    r XOR 2^k changes the bag sum's parity: every wrong-row fetch of one index bit is caught, not only
    those between rows of different sums."""
    q_max = packing.layout(bits).q_max
    q = counter_rng.fill_below(seed, rows * dim, q_max + 1, torch.uint8, device).view(rows, dim)
    wanted = _popcount_parity(torch.arange(rows, device=device))
    q[:, 0] ^= (_row_sum_parity(q) != wanted).to(torch.uint8)
    bias_units = -counter_rng.below(seed ^ 0xB1A5, rows, q_max + 1, device)
    return packing.dyadic_pack(q, bias_units, bits)


def _row_sum_parity(q: torch.Tensor) -> torch.Tensor:
    """(N,) int64 parity of each row's sum of (N, D) uint8 values: the parity of its odd values' count.

    Where D is a multiple of 8 (up to 2040), each row is read as D / 8 int64 words: their low bits summed
    lane by lane (a lane holds at most D / 8 < 256, no carry), each lane's parity added into the top
    byte by one multiply. On a CPU a row reduction of bytes into int64 took 1 s for a 1M-row table."""
    dim = q.shape[1]
    if dim % 8 or dim > 2040 or not q.is_contiguous():
        return q.sum(1, dtype=torch.int64) & 1
    lanes = (q.view(torch.int64) & 0x0101010101010101).sum(1)  # (N,) eight lane sums of low bits
    lanes &= 0x0101010101010101  # each lane's parity: the multiply below then carries nothing
    return ((lanes * 0x0101010101010101) >> 56) & 1  # the top byte: the eight parities added


def _popcount_parity(values: torch.Tensor) -> torch.Tensor:
    """(N,) int64 parity (0 or 1) of the number of set bits of each non-negative int64 value, by folding
    halves with XOR (no loop that asks the device when to stop)."""
    parity = values.clone()
    for shift in (32, 16, 8, 4, 2, 1):
        parity ^= parity >> shift
    return parity & 1


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


def _mismatch(mode: str, bits: int, bag: str, expected: float, actual: float) -> Mismatch:
    """One record of a bad bag: the checksum of the intended rows versus the sum of the bag's output."""
    if mode == "exact" and actual == expected:
        where = f"{bits}-bit {bag} (an element is off the 2^-7 grid)"
    elif mode == "exact":
        where = f"{bits}-bit {bag} sum"
    else:
        where = f"{bits}-bit {bag} (an element beyond its rounding bound, or a row changed in memory)"
    return Mismatch(f"embbag_{mode}", where, repr(expected), repr(actual))
