"""Overhead of the int8 ABFT checks: plain op versus op + check, timed in the same run (dev-only script).

    python scripts/bench_abft_int8.py [--json] [--threads N] [--samples N]

gemm_int8: checked = one case of the shipped workload (`GemmInt8.run`, its pools prepared beforehand as
in a worker), its compute, check and set-up phases as it times them; plain = `repeats` ×
`torch._int_mm(A, W.t())` into one buffer, on the same activations and weight without their checksum,
tag columns and rows. `repeats` = ops_per_case / 2mnk. W's encoding is per worker set-up in the workload
("offline" in the paper) and is reported as `encode_s`.
Profile records: the profile's shapes, scheme and ops_per_case. Paper record: (m, n, k) = (1, 800, 3200),
the one shape Li et al. (../shared/seeds/000_*, §VI-A1, overhead < 20% over 28 DLRM shapes) name in
the text, one GEMM per case (the paper checks each GEMM), in the paper's mod-127 and in mod 2^32.
Activations use the full u8 range (the workload restricts them to [0, 127] only where `_int_mm` saturates).

embbag_int8, as sdcscan/workloads/embbag_int8/workload.py runs a case: plain = the FBGEMM EmbeddingBag; checked =
the same op plus the mode's check (exact: the row-sum checksum of every bag; realistic: the trigger over
every bag, then the rigorous recompute of flagged bags) and the `Fingerprint` of every bag. Profile records:
the profile's rows, dim, bags, pooling and bits, each bit width in both modes (the profile runs one mode;
the other is timed at the same shape for comparison), tables built as the workload builds them for the
mode. Paper records: Table I of Li et al. (4M rows, D = 32..256, average pooling 100, batch 10, 8-bit,
cache flushed before every call, as the paper did; overhead < 26%); one dyadic table serves both modes
(`table` says which), since building the realistic mode's mixed tables at 4M × 256 takes minutes.

`records()` is imported by scripts/bench_abft.py, which merges the records of every ABFT workload.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_abft: the shared timing
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from bench_abft import Split, cpu_description, measure, profile_params, record, table  # type: ignore[import-not-found]

from sdcscan.checks import int8
from sdcscan.checks.digest import Fingerprint
from sdcscan.checks.embbag import exact, id_pool, packing, realistic, table_families
from sdcscan.outcomes import Case
from sdcscan.workloads.base import Context
from sdcscan.workloads.embbag_int8 import workload as embbag_int8
from sdcscan.workloads.gemm_int8 import workload as gemm_int8

PAPER_GEMM = [(1, 3200, 800)]  # [m, k, n]: Li et al.'s (m, n, k) = (1, 800, 3200)
PAPER_SCHEMES = ("mod127", "mod2_32")
PAPER_EMBBAG = {"rows": 4_000_000, "dims": (32, 64, 128, 256), "pooling": 100, "bags": 10, "bits": 8}
MIN_FLUSH_BYTES = 64 << 20


# --- gemm_int8 ----------------------------------------------------------------------------------


def gemm_records(samples: int | None) -> list[dict[str, Any]]:
    out = []
    for p in profile_params("gemm_int8"):
        for shape in p["shapes"]:
            out.append(_gemm_record(tuple(shape), p["scheme"], p["ops_per_case"], "profile", samples))
    for shape in PAPER_GEMM:
        for scheme in PAPER_SCHEMES:
            out.append(_gemm_record(shape, scheme, 1.0, "paper", samples))
    return out


def _gemm_record(
    shape: tuple[int, ...], scheme: str, ops_per_case: float, source: str, samples: int | None
) -> dict[str, Any]:
    m, k, n = shape
    params = {"scheme": scheme, "shapes": [[m, k, n]], "ops_per_case": ops_per_case, "path": "auto"}
    workload = gemm_int8.GemmInt8(params)
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=1, params=params)
    workload.prepare(ctx)  # pools and encoded weights: per worker, outside the timing as in a run
    repeats = gemm_int8.repeats_of(workload.p, shape)
    views, _, weight = workload._operands(ctx, Case(0, "gemm_int8", 1, 0), (m, k, n), repeats)
    # The plain side multiplies the same data: the views' k data columns and the weight's n data rows.
    a = [view[:, :k].contiguous() for view in views]
    w = weight.w_ext[:n, :k].contiguous()
    buffer = torch.empty((m, n), dtype=torch.int32)

    def plain(split: Split) -> None:
        for r in range(repeats):
            torch._int_mm(a[r], w.t(), out=buffer)
        split.lap("compute")

    def checked(split: Split) -> None:
        """One case of the shipped workload, its phases as it times them (the digest is in `check`)."""
        ctx.begin_case(None)
        workload.run(ctx, Case(0, "gemm_int8", 1, 0))
        split.parts.update(ctx.phases)

    def encode(split: Split) -> None:
        int8.encode_weight(w, scheme, workload.activations[k].tags)
        split.lap("compute")

    timing = measure(plain, checked, samples=samples)
    encode_s = measure(encode, encode, samples=3)["plain_s"]
    return record("gemm_int8", scheme, [m, k, n], source, repeats=repeats, **timing, encode_s=encode_s)


# --- embbag_int8 --------------------------------------------------------------------------------


def embbag_records(samples: int | None) -> list[dict[str, Any]]:
    out = []
    for p in profile_params("embbag_int8"):
        out += _embbag_profile_records(p, samples)
    out += _embbag_paper_records(samples)
    return out


def _embbag_profile_records(p: dict[str, Any], samples: int | None) -> list[dict[str, Any]]:
    widths = sorted(set(p["bits"]), reverse=True)
    rows = _rows_that_fit(p["rows"], p["dim"], widths)
    out = []
    for mode in embbag_int8.MODES:
        g = torch.Generator().manual_seed(2)
        if mode == "exact":
            tables = {b: embbag_int8.exact_table(g.initial_seed(), rows, p["dim"], b) for b in widths}
        else:
            tables = table_families.mixed_tables(
                g, rows, p["dim"], widths, chunk_rows=embbag_int8.BUILD_CHUNK_ROWS
            )
        for bits in p["bits"]:
            lengths = torch.randint(p["pooling"][0], p["pooling"][1] + 1, (p["bags"],), generator=g)
            timing = _embbag_timing(tables[bits], bits, mode, lengths, p["weighted"], g, samples, pooled=True)
            shape = [rows, p["dim"], p["bags"], *p["pooling"]]
            note = {"rows_scaled_from": p["rows"]} if rows < p["rows"] else {}
            table_kind = "dyadic" if mode == "exact" else "mixed"
            variant = f"{mode}/{bits}-bit" + (" (profile mode)" if mode == p["mode"] else "")
            out.append(record("embbag_int8", variant, shape, "profile", table=table_kind, **note, **timing))
        del tables
    return out


def _embbag_paper_records(samples: int | None) -> list[dict[str, Any]]:
    paper, out = PAPER_EMBBAG, []
    flush = partial(torch.Tensor.add_, torch.zeros(_flush_bytes() // 4), 1.0)
    for dim in paper["dims"]:
        g = torch.Generator().manual_seed(3)
        rows = _rows_that_fit(paper["rows"], dim, [paper["bits"]])
        packed = embbag_int8.exact_table(g.initial_seed(), rows, dim, paper["bits"])
        lengths = torch.full((paper["bags"],), paper["pooling"], dtype=torch.int64)
        for mode in embbag_int8.MODES:
            timing = _embbag_timing(
                packed, paper["bits"], mode, lengths, False, g, samples, pooled=False, before=flush
            )
            shape = [rows, dim, paper["bags"], paper["pooling"], paper["pooling"]]
            note = {"rows_scaled_from": paper["rows"]} if rows < paper["rows"] else {}
            variant = f"{mode}/{paper['bits']}-bit"
            out.append(
                record(
                    "embbag_int8", variant, shape, "paper", table="dyadic", cache="flushed", **note, **timing
                )
            )
        del packed
    return out


def _embbag_timing(
    packed: torch.Tensor,
    bits: int,
    mode: str,
    lengths: torch.Tensor,
    weighted: bool,
    g: torch.Generator,
    samples: int | None,
    *,
    pooled: bool,
    before: Any = None,
) -> dict[str, float]:
    """Plain op vs op + the mode's check + digest, on one case's inputs drawn as EmbbagInt8 draws them.

    `pooled`: the ids are a view of a pool fixed for the worker, as in the workload, so exact mode reads
    S_exp off prefix sums taken once (not timed); otherwise it gathers row sums per lookup, as the
    papers' setting (new ids every batch) must.
    """
    rows = packed.shape[0]
    # int32 ids and offsets, as the workload's pool views (which cost it nothing per case)
    idx = torch.randint(0, rows, (int(lengths.sum()),), generator=g, dtype=torch.int32)
    lengths = lengths.to(torch.int32)
    weights = psw = None
    if weighted:
        weights = (
            torch.randint(1, 4, idx.shape, generator=g).float()
            if mode == "exact"
            else torch.rand(idx.shape, generator=g) + 0.5
        )
        psw = weights
    offsets = torch.cumsum(lengths, 0, dtype=torch.int32) - lengths
    sums: Any = (
        exact.exact_row_sums(packed, bits)
        if mode == "exact"
        else realistic.row_stats(packed, bits, weighted=weighted)
    )
    prefix = bounds = fp32_table = None
    if mode == "exact" and pooled:
        prefix = id_pool.pool_prefix(sums, idx, weights)
        ends = torch.cumsum(lengths.long(), 0)
        bounds = torch.cat([ends.new_zeros(1), ends])
    elif mode == "exact" and exact.fp32_sums_exact(  # the cheapest per-lookup gather, where exact
        int(sums.abs().max()), int(lengths.max()), 3 if weighted else 1
    ):
        fp32_table = sums.float().unsqueeze(1)

    scratch = exact.Scratch(embbag_int8.EXACT_BLOCK_BYTES.get("cpu"))  # as a CPU worker checks

    def plain(split: Split) -> None:
        packing.embedding_bag(packed, bits, idx, offsets, psw)
        split.lap("compute")

    def checked(split: Split) -> bool:
        out = packing.embedding_bag(packed, bits, idx, offsets, psw)
        split.lap("compute")
        if prefix is not None:
            bad = exact.exact_bad_bags(out, id_pool.expected_at(prefix, 0, bounds), scratch)
        elif fp32_table is not None:
            expected = exact.exact_expected_fp32(fp32_table, idx, offsets, weights)
            bad = exact.exact_bad_bags(out, expected, scratch)
        elif mode == "exact":
            expected = exact.exact_expected(sums, idx.long(), lengths.long(), weights)
            bad = exact.exact_bad_bags(out, expected, scratch)
        else:
            bad = realistic.realistic_check(out, packed, sums, idx.long(), lengths.long(), weights).bad
        found = bool(bad.any())
        split.lap("check")
        Fingerprint().tensor(out).hexdigest()
        split.lap("digest")
        return found

    return measure(plain, checked, before=before, samples=samples)


def _rows_that_fit(rows: int, dim: int, widths: list[int]) -> int:
    """`rows`, or fewer where one process's tables would not fit in MemAvailable (as the workload scales)."""
    row_bytes = sum(dim * b // 8 + packing.layout(b).meta_bytes for b in widths)
    row_bytes += embbag_int8.CHECK_BYTES_PER_ROW * len(widths)
    return embbag_int8.fit_rows(rows, row_bytes, _mem_available(), 1)


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            line = next((x for x in f if x.startswith("MemAvailable:")), None)
    except OSError:
        return None
    return int(line.split()[1]) * 1024 if line else None


def _flush_bytes() -> int:
    """Twice the last-level cache (Linux sysfs), at least MIN_FLUSH_BYTES: writing it evicts the table."""
    size = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")
    try:
        text = size.read_text().strip().upper()
        units = {"K": 1 << 10, "M": 1 << 20}
        llc = int(text.rstrip("KM")) * units.get(text[-1], 1)
    except (OSError, ValueError):
        llc = 0
    return max(MIN_FLUSH_BYTES, 2 * llc)


def records(
    samples: int | None = None,
    threads: int | None = None,
    workloads: Sequence[str] = ("gemm_int8", "embbag_int8"),
) -> list[dict[str, Any]]:
    """Benchmark records for gemm_int8 and embbag_int8, or those of `workloads` (`threads`: set torch's,
    else leave it)."""
    if threads is not None:
        torch.set_num_threads(threads)
    found = gemm_records(samples) if "gemm_int8" in workloads else []
    return found + (embbag_records(samples) if "embbag_int8" in workloads else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the records as JSON on stdout")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--samples", type=int, default=None, help="timed pairs per record (default: by time)")
    args = parser.parse_args()
    machine = cpu_description()
    recs = [{**r, **machine} for r in records(args.samples, args.threads)]
    print(json.dumps(recs, indent=1) if args.json else table(recs))


if __name__ == "__main__":
    main()
