"""Overhead of the ABFT checks: median seconds of the plain vs the checked operation, timed in the same run.

Usage: python scripts/bench_abft.py --json [--samples N] [--threads N]

Each record says where its shape comes from in `source`:
  profile    the `burnin` profile's parameters merged over the workload's defaults, as a run merges them
             (read from the built-in profile at run time, so the bench follows the profile);
  paper      a shape a paper reports its overhead at: V-ABFT (Gao, Hua, Chen; ../shared/seeds/004_*)
             bf16 (128, 1024, 256); Li et al.'s DLRM int8 GEMM and EmbeddingBag (../shared/seeds/000_*);
  reference  square fp32/fp64 GEMMs of 512³–2048³ that no paper reports an overhead at, kept as
             a scale across which the check's O(n²) cost falls against the O(n³) GEMM.

gemm_fp (what sdcscan/workloads/gemm_fp/workload.py `run` does per case): plain = `repeats` × `a @ b`; checked =
the same GEMMs plus the expectations once per operand pair, `vabft.verify` (row AND column check) and
`RepeatDigest` over each block of repeats' outputs, and one read of the totals at the end. Profile
records take the expectations as the workload does, from statistics of its operand pool taken once
(`vabft.permuted_expected`, timed as `setup_s`); paper and reference records take them from the
operands (`vabft.expected`, timed as check), as a check of one GEMM must. Profile records use the profile's repeats;
paper and reference records one GEMM per check (repeats 1), as the V-ABFT paper checks each GEMM. B's
encoding ("offline" in the paper, once per operand pool in the workload) is reported as `encode_s`,
outside `checked_s`. The threshold's cost does not depend on e_max, so a fixed one is used.

Every record: plain_s, checked_s (medians of interleaved samples, after one warm-up each), overhead =
checked_s / plain_s − 1, and the split of the checked run into compute_s, check_s and digest_s (medians
of each part), so a reader sees which part costs. Records of gemm_int8 and embbag_int8 come from
scripts/bench_abft_int8.py. Dev-only: never imported by sdcscan.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from sdcscan.calibration import measure as calibration
from sdcscan.checks import tile_verdicts, vabft
from sdcscan.checks.digest import RepeatDigest
from sdcscan.profile import load_profile
from sdcscan.workloads import SPECS
from sdcscan.workloads.base import check_block
from sdcscan.workloads.gemm_fp.workload import RepeatTally

PROFILE = "burnin"
PAPER_FP = [("bfloat16", "float32", (128, 1024, 256))]  # V-ABFT's Ascend tile (seeds/004, §6.8)
REFERENCE_FP = [
    ("float32", "float32", [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048)]),
    ("float32", "float64", [(512, 512, 512), (1024, 1024, 1024)]),
    ("float64", "float64", [(512, 512, 512), (1024, 1024, 1024)]),
]
E_MAX = 1e-6  # any value: the threshold's cost does not depend on it
SAMPLE_BUDGET_S = 1.5  # seconds of plain + checked calls per record (at least MIN_SAMPLES pairs)
WORKLOADS = ("gemm_fp", "gemm_int8", "embbag_int8")
MIN_SAMPLES, MAX_SAMPLES = 3, 41


class Split:
    """Wall time of a run split into named parts: `lap(part)` charges the time since the last lap."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = defaultdict(float)
        self._last = time.perf_counter()

    def lap(self, part: str) -> None:
        now = time.perf_counter()
        self.parts[part] += now - self._last
        self._last = now


Timed = Callable[[Split], Any]  # one call of the measured operation, lapping its parts


def profile_params(workload: str, profile: str = PROFILE) -> list[dict[str, Any]]:
    """The parameters a CPU unit runs `workload` with under `profile`: one dict per profile entry.

    Raises:
        ProfileError: the profile cannot be loaded.
    """
    entries = [w for w in load_profile(profile).workloads if w.name == workload]
    return [{**SPECS[workload].defaults, **w.params_for("cpu")} for w in entries]


def measure(
    plain: Timed, checked: Timed, *, before: Callable[[], Any] | None = None, samples: int | None = None
) -> dict[str, float]:
    """Medians of interleaved plain and checked calls (drift on a shared machine hits both alike).

    `before` runs untimed ahead of every call (e.g. a cache flush). Without `samples`, pairs are timed
    until SAMPLE_BUDGET_S is spent, within MIN_SAMPLES..MAX_SAMPLES.
    """
    for fn in (plain, checked):  # warm-up: first calls allocate and pick kernels
        if before:
            before()
        fn(Split())
    plain_s: list[float] = []
    parts: dict[str, list[float]] = defaultdict(list)
    totals: list[float] = []
    spent = 0.0
    while len(totals) < (samples or MAX_SAMPLES):
        for fn, into in ((plain, None), (checked, parts)):
            if before:
                before()
            split = Split()
            fn(split)
            total = sum(split.parts.values())
            spent += total
            if into is None:
                plain_s.append(total)
            else:
                totals.append(total)
                for part in ("compute", "check", "digest", *split.parts):
                    into[part].append(split.parts.get(part, 0.0))
        if samples is None and len(totals) >= MIN_SAMPLES and spent > SAMPLE_BUDGET_S:
            break
    p, c = statistics.median(plain_s), statistics.median(totals)
    split_s = {f"{part}_s": statistics.median(v) for part, v in parts.items()}
    return {"plain_s": p, "checked_s": c, "overhead": c / p - 1.0, **split_s, "samples": len(totals)}


def record(workload: str, variant: str, shape: list[int], source: str, **fields: Any) -> dict[str, Any]:
    return {
        "workload": workload,
        "variant": variant,
        "shape": shape,
        "source": source,
        **fields,
        "threads": torch.get_num_threads(),
    }


# --- gemm_fp ------------------------------------------------------------------------------------


def gemm_fp_records(samples: int | None) -> list[dict[str, Any]]:
    out = []
    for p in profile_params("gemm_fp"):
        for dtype, chk, shape, repeats in zip(
            p["dtypes"], p["checkers"], p["shapes"], p["repeats"], strict=True
        ):
            out.append(_gemm_fp_record(dtype, chk, tuple(shape), repeats, p["c"], "profile", samples))
    for dtype, chk, shape in PAPER_FP:
        out.append(_gemm_fp_record(dtype, chk, shape, 1, vabft.SIGMA_C, "paper", samples))
    for dtype, chk, shapes in REFERENCE_FP:
        for shape in shapes:
            out.append(_gemm_fp_record(dtype, chk, shape, 1, vabft.SIGMA_C, "reference", samples))
    return out


def _gemm_fp_record(
    dtype: str,
    checker: str,
    shape: tuple[int, ...],
    repeats: int,
    c: float,
    source: str,
    samples: int | None,
) -> dict[str, Any]:
    dt, chk = calibration.DTYPES[dtype], calibration.DTYPES[checker]
    m, k, n = shape
    g = torch.Generator().manual_seed(0)
    a = calibration.sample("abs_normal", (m, k), g, dt)
    b = calibration.sample("abs_normal", (k, n), g, dt)
    enc = vabft.encode(b, chk)
    stats = vabft.pool_stats(a, b, chk, E_MAX, c)  # once per worker in the workload: outside the timing
    identity = (torch.arange(m), torch.arange(k), torch.arange(n))

    def plain(split: Split) -> None:
        for _ in range(repeats):
            a @ b
        split.lap("compute")

    def expect(split: Split) -> vabft.Expected:
        if source == "profile":  # the workload's set-up: checksums of the case's operands, pool thresholds
            found = vabft.permuted_expected(stats, a, b, identity)
            split.lap("setup")
        else:  # the paper checks each GEMM on its own: A's statistics are taken with its checksums
            found = vabft.expected(a, b, enc, chk, E_MAX, c)
            split.lap("check")
        return found

    def checked(split: Split) -> None:
        _gemm_fp_case(a, b, expect(split), repeats, split)

    def encode(split: Split) -> None:
        vabft.encode(b, chk)
        split.lap("compute")

    timing = measure(plain, checked, samples=samples)
    encode_s = measure(encode, encode, samples=3)["plain_s"]
    return record(
        "gemm_fp",
        f"{dtype}/{checker} checker",
        [m, k, n],
        source,
        repeats=repeats,
        **timing,
        encode_s=encode_s,
    )


def _gemm_fp_case(
    a: torch.Tensor, b: torch.Tensor, expect: vabft.Expected, repeats: int, split: Split
) -> bool:
    """The checked part of a gemm_fp case, as the workload runs it (no fault sites, no localisation):
    the repeats written block by block, each block checked and fingerprinted whole, one read at the end."""
    m, n = a.shape[0], b.shape[1]
    block = check_block(a.device, repeats, m * n * a.element_size())
    outputs = torch.empty((block, m, n), dtype=a.dtype, device=a.device)
    split.lap("check")
    tally, digest = RepeatTally(a.device), RepeatDigest()
    for first in range(0, repeats, block):
        outs = outputs[: min(block, repeats - first)]
        for out in outs:
            torch.matmul(a, b, out=out)
        split.lap("compute")
        tally.add(first, outs, tile_verdicts.by_torch(outs, expect))
        split.lap("check")
        digest.add_stack(outs)
        split.lap("digest")
    _, bad_rows, bad_cols, _ = tally.read()
    split.lap("check")
    digest.hexdigest()
    split.lap("digest")
    return bool(bad_rows or bad_cols)


# --- int8 workloads -----------------------------------------------------------------------------


def int8_records(samples: int | None, workloads: Sequence[str]) -> list[dict[str, Any]]:
    """gemm_int8 and embbag_int8 records (those named in `workloads`) from scripts/bench_abft_int8.py."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_abft_int8 import records  # type: ignore[import-not-found]

    return list(records(samples, workloads=workloads))


def cpu_description() -> dict[str, Any]:
    """What the numbers ran on: the CPU model (Linux), torch's CPU capability (ISA) and torch version."""
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        pass
    return {
        "cpu": model,
        "capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
    }


def table(records: list[Mapping[str, Any]]) -> str:
    lines = []
    for r in records:
        shape = "x".join(map(str, r["shape"]))
        times = f"{r['plain_s'] * 1e3:9.3f} ms {r['checked_s'] * 1e3:9.3f} ms {r['overhead']:+7.1%}"
        split = f"check {r['check_s'] * 1e3:8.3f} ms  digest {r['digest_s'] * 1e3:8.3f} ms"
        lines.append(f"{r['workload']:11} {r['variant']:28} {shape:20} {r['source']:9} {times}  {split}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the records as JSON on stdout")
    parser.add_argument("--samples", type=int, default=None, help="timed pairs per record (default: by time)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (units run on one)")
    parser.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help=f"comma-separated, of {', '.join(WORKLOADS)} (default: all)",
    )
    args = parser.parse_args()
    chosen = args.workloads.split(",")
    if unknown := set(chosen) - set(WORKLOADS):
        parser.error(f"--workloads: unknown {', '.join(sorted(unknown))}")
    torch.set_num_threads(args.threads)
    records = gemm_fp_records(args.samples) if "gemm_fp" in chosen else []
    records += int8_records(args.samples, chosen)
    machine = cpu_description()
    records = [{**r, **machine} for r in records]
    if args.json:
        print(json.dumps(records, indent=1))
    else:
        print(json.dumps(machine))
        print(table(records))


if __name__ == "__main__":
    main()
