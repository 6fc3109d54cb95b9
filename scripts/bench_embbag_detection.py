"""Detection and false positives of the EmbeddingBag checks, per bit width, mode, table family and fault.

Usage: python scripts/bench_embbag_detection.py [--bags N] [--rows N] [--dim D] [--seed S]

Prints JSON: one record per (bits, mode, family, indices, weights) configuration with its clean bags
(how many the trigger sent to the recompute, how many were confirmed: false positives) and, per fault
model, the value-changing trials, how many the check confirmed, and how many were below the
arithmetic's resolution (a change no larger than the rigorous rounding bound of the element it hits);
then a summary per (bits, mode, fault) over every family, and per family. About a minute of CPU on one
thread with the defaults. Dev-only: never imported by sdcscan.

Faults, one per bag, in the member at a random position of the bag:
    q_bit<b>: bit b of the quantized value of one element of the row the member reads (8-bit: b in
        0..7; 4-bit: 0..3 of the nibble), on the load path: the op reads a corrupted copy of the row
        while memory keeps the intended one (a row corrupted in memory is also caught by its fingerprint;
        this is the harder case).
    wrong_row: the op fetches row r XOR 2^k (k below log2(rows)) instead of the intended row r.
    out_relerr_<eps>: one output element multiplied by (1 + eps).
Exact mode runs the workload's dyadic tables with integer weights; realistic mode every family of
sdcscan/checks/embbag/table_families.py and the mixed table the workload builds. Indices are uniform or zipf
(hot rows repeat inside a bag); per-sample weights are off or on.
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sdcscan.checks.embbag import exact, packing, realistic
from sdcscan.checks.embbag import table_families as tables
from sdcscan.workloads.embbag_int8.workload import exact_table

POOLING = (20, 100)
INDEX_KINDS = ("uniform", "zipf")
RELERRS = (1e-2, 1e-3, 1e-4)


@dataclass
class Batch:
    """One configuration's table, bags, check and the rigorous rounding bound of every clean element."""

    g: torch.Generator
    bits: int
    mode: str
    packed: torch.Tensor
    idx: torch.Tensor
    lengths: torch.Tensor
    offsets: torch.Tensor
    weights: torch.Tensor | None
    member: torch.Tensor  # (B,) the position, in idx, of the member each bag's fault strikes
    bound: torch.Tensor  # (B, D) rigorous rounding bound of the clean output
    sums: torch.Tensor | None = None  # exact mode: plain row sums, column weights, weighted row sums
    column_weights: torch.Tensor | None = None
    weighted_sums: torch.Tensor | None = None
    stats: realistic.RowStats | None = None  # realistic mode

    def check(self, out: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(B,) confirmed bags and the number the trigger flagged, as the workload runs the check."""
        if self.mode == "exact":
            assert (
                self.sums is not None and self.column_weights is not None and self.weighted_sums is not None
            )
            expected = exact.exact_expected(self.sums, self.idx, self.lengths, self.weights)
            weighted = exact.exact_expected(self.weighted_sums, self.idx, self.lengths, self.weights)
            return exact.exact_bad_bags(out, expected, weighted=(self.column_weights, weighted)), 0
        assert self.stats is not None
        verdict = realistic.realistic_check(
            out, self.packed, self.stats, self.idx, self.lengths, self.weights
        )
        return verdict.bad, verdict.flagged

    def run(self, table: torch.Tensor, fetched: torch.Tensor) -> torch.Tensor:
        return packing.embedding_bag(table, self.bits, fetched, self.offsets, self.weights)

    def member_weights(self) -> torch.Tensor:
        if self.weights is None:
            return torch.ones(self.member.shape, dtype=torch.float64)
        return self.weights[self.member].double()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bags", type=int, default=512, help="bags per configuration (one fault each)")
    parser.add_argument("--rows", type=int, default=4096, help="table rows (a power of two)")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    records = []
    for bits in packing.BITS:
        for mode in ("exact", "realistic"):
            for family in ["dyadic"] if mode == "exact" else [*tables.FAMILIES, "mixed"]:
                for kind in INDEX_KINDS:
                    for weighted in (False, True):
                        config = (bits, mode, family, kind, weighted)
                        g = torch.Generator().manual_seed(zlib.crc32(repr((args.seed, config)).encode()))
                        records.append(run_config(g, config, args.rows, args.dim, args.bags))
    command = " ".join(["python", "scripts/bench_embbag_detection.py", *sys.argv[1:]])
    print(json.dumps({"command": command, "records": records, "summary": summary(records)}, indent=1))


def run_config(
    g: torch.Generator, config: tuple[int, str, str, str, bool], rows: int, dim: int, bags: int
) -> dict[str, Any]:
    bits, mode, family, kind, weighted = config
    batch = make_batch(g, bits, mode, family, kind, weighted, rows, dim, bags)
    clean = batch.run(batch.packed, batch.idx)
    bad, flagged = batch.check(clean)
    faults = {f"q_bit{b}": q_flip_trials(batch, b) for b in range(8 // packing.layout(bits).per_byte)}
    faults["wrong_row"] = wrong_row_trials(batch)
    for eps in RELERRS:
        faults[f"out_relerr_{eps:g}"] = relerr_trials(batch, clean, eps)
    return {
        "bits": bits,
        "mode": mode,
        "family": family,
        "indices": kind,
        "weighted": weighted,
        "clean_bags": bags,
        "clean_flagged": flagged,
        "clean_confirmed": int(bad.sum()),
        "faults": faults,
    }


def make_batch(
    g: torch.Generator,
    bits: int,
    mode: str,
    family: str,
    kind: str,
    weighted: bool,
    rows: int,
    dim: int,
    bags: int,
) -> Batch:
    packed = build_table(g, family, bits, rows, dim)
    lengths = torch.randint(POOLING[0], POOLING[1] + 1, (bags,), generator=g)
    total = int(lengths.sum())
    if kind == "uniform":
        idx = torch.randint(0, rows, (total,), generator=g)
    else:
        idx = tables.zipf_indices(total, rows, g)
    weights = None
    if weighted:  # small integers keep exact mode exact
        weights = (
            torch.randint(1, 4, (total,), generator=g).float()
            if mode == "exact"
            else torch.rand(total, generator=g) + 0.5
        )
    offsets = torch.cumsum(lengths, 0) - lengths
    member = offsets + (torch.rand(bags, generator=g) * lengths).long()
    members, present = realistic._members(offsets, lengths)
    _, bound = realistic.bag_reference(
        packed[idx[members].flatten()], bits, present, None if weights is None else weights[members]
    )
    batch = Batch(g, bits, mode, packed, idx, lengths, offsets, weights, member, bound)
    if mode == "exact":
        batch.sums = exact.exact_row_sums(packed, bits)
        batch.column_weights = exact.column_weights(dim, 0xC01, packed.device)
        batch.weighted_sums = exact.weighted_row_sums(packed, bits, batch.column_weights)
    else:
        batch.stats = realistic.row_stats(packed, bits, weighted=weighted)
    return batch


def build_table(g: torch.Generator, family: str, bits: int, rows: int, dim: int) -> torch.Tensor:
    if family == "dyadic":  # the workload's exact table (each row's sum carries its index's parity)
        return exact_table(g.initial_seed(), rows, dim, bits)
    if family == "mixed":
        return tables.mixed_tables(g, rows, dim, [bits])[bits]
    return tables.quantize(tables.float_table(family, rows, dim, g), bits)


def q_flip_trials(batch: Batch, bit: int) -> dict[str, int]:
    """Each bag reads, at its chosen member, a private copy of the row with one q bit flipped."""
    rows, bags = batch.packed.shape[0], batch.lengths.shape[0]
    dim = packing.packed_dim(batch.packed, batch.bits)
    copies = batch.packed[batch.idx[batch.member]].clone()
    element = torch.randint(0, dim, (bags,), generator=batch.g)
    per_byte = packing.layout(batch.bits).per_byte
    shift = (element % per_byte) * 4 + bit
    before = _element_values(copies, batch.bits, element)
    copies[torch.arange(bags), element // per_byte] ^= (1 << shift).to(torch.uint8)
    delta = (_element_values(copies, batch.bits, element) - before) * batch.member_weights()
    fetched = batch.idx.clone()
    fetched[batch.member] = rows + torch.arange(bags)
    bad, _ = batch.check(batch.run(torch.cat([batch.packed, copies]), fetched))
    return _tally(bad, delta != 0, delta.abs() <= batch.bound[torch.arange(bags), element])


def wrong_row_trials(batch: Batch) -> dict[str, int]:
    rows, bags = batch.packed.shape[0], batch.lengths.shape[0]
    k = torch.randint(0, max(1, rows.bit_length() - 1), (bags,), generator=batch.g)
    intended = batch.idx[batch.member]
    fetched = batch.idx.clone()
    fetched[batch.member] = intended ^ (1 << k)
    delta = (
        _row_values(batch, fetched[batch.member]) - _row_values(batch, intended)
    ) * batch.member_weights()[:, None]
    bad, _ = batch.check(batch.run(batch.packed, fetched))
    return _tally(bad, (delta != 0).any(1), (delta.abs() <= batch.bound).all(1))


def relerr_trials(batch: Batch, clean: torch.Tensor, eps: float) -> dict[str, int]:
    bags, dim = clean.shape
    element = torch.randint(0, dim, (bags,), generator=batch.g)
    rows = torch.arange(bags)
    corrupted = clean.clone()
    corrupted[rows, element] = clean[rows, element] * (1 + eps)
    delta = corrupted[rows, element].double() - clean[rows, element].double()
    bad, _ = batch.check(corrupted)
    return _tally(bad, delta != 0, delta.abs() <= batch.bound[rows, element])


def _tally(bad: torch.Tensor, changed: torch.Tensor, below: torch.Tensor) -> dict[str, int]:
    return {
        "trials": int(changed.sum()),
        "detected": int((bad & changed).sum()),
        "below_resolution": int((below & changed).sum()),
        "detected_above_resolution": int((bad & changed & ~below).sum()),
    }


def _element_values(rows: torch.Tensor, bits: int, element: torch.Tensor) -> torch.Tensor:
    q, scale, bias = packing.split_packed(rows, bits)
    return scale.double() * q[torch.arange(rows.shape[0]), element].double() + bias.double()


def _row_values(batch: Batch, which: torch.Tensor) -> torch.Tensor:
    q, scale, bias = packing.split_packed(batch.packed[which], batch.bits)
    return scale.double()[:, None] * q.double() + bias.double()[:, None]


def summary(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (bits, mode, fault) over every configuration, then per family: rates and clean costs."""
    rows = []
    for by_family in (False, True):
        faults: dict[tuple[Any, ...], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        clean: dict[tuple[Any, ...], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for r in records:
            key = (r["bits"], r["mode"], r["family"] if by_family else "all")
            for name in ("clean_bags", "clean_flagged", "clean_confirmed"):
                clean[key][name] += r[name]
            for fault, tally in r["faults"].items():
                fault_key = (*key, fault)
                for name, value in tally.items():
                    faults[fault_key][name] += value
        for (bits, mode, family, fault), acc in faults.items():
            costs = clean[(bits, mode, family)]
            above = acc["trials"] - acc["below_resolution"]
            rows.append(
                {
                    "bits": bits,
                    "mode": mode,
                    "family": family,
                    "fault": fault,
                    "trials": acc["trials"],
                    "rate": _ratio(acc["detected"], acc["trials"]),
                    "below_resolution": acc["below_resolution"],
                    "rate_above_resolution": _ratio(acc["detected_above_resolution"], above),
                    "clean_bags": costs["clean_bags"],
                    "clean_confirmed": costs["clean_confirmed"],
                    "trigger_rate": _ratio(costs["clean_flagged"], costs["clean_bags"]),
                }
            )
    return rows


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 5) if whole else None


if __name__ == "__main__":
    main()
