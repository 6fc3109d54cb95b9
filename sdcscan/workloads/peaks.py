"""The plain rate of the operation each workload runs, at its own shapes, on this unit's device.

A workload's achieved rate (ops / case seconds) says little alone: 11 GFLOP/s is most of an old core
and a few percent of a core with AMX. So each unit times the plain operation behind every workload
(fp32/fp64/bf16/fp16 matmul, int8 `torch._int_mm`, quantized EmbeddingBag lookups, the Linear layers
of `train`) at the workload's own shapes, unchecked and without set-up, and the report divides the
achieved rate by it: the efficiency.

Each op is timed in well under a second (a few warm-up calls, then the best of a few timed calls; on
CUDA the device is synchronised before the clock is read) and cached per device fingerprint and op
in the state directory, so a unit pays for it once per machine, not once per run. A damaged or
unwritable cache costs only the cache: the op is measured again.

Which ops a workload runs is stated here (`plain_ops`), keyed by workload name, so the workload
classes stay as they are.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sdcscan.errors import ReportError
from sdcscan.files import default_state_dir, make_state_dir, read_json, write_json_atomic
from sdcscan.workloads import SPECS

CACHE_SCHEMA = "sdcscan-peak/1"
MAX_CACHE_BYTES = 64 * 1024
WARMUP_CALLS = 2
TIMED_CALLS = 5
TIMED_BUDGET_S = 0.25  # timed calls stop once they took this long together (at least one is timed)
SEED = 0x9EA4


@dataclass(frozen=True)
class PlainOp:
    """One plain operation a workload runs, and how much of the workload's work goes through it.

    kind: "matmul" (dtype), "int_mm" (dtype "uint8" or "int8": A's type; B is int8) or
    "embedding_bag" (dtype "int8"/"int4": the table's bit width). shape: (m, k, n) for the GEMMs;
    (rows, dim, bags, min pooling, max pooling) for EmbeddingBag. weight: the workload's ops through
    this op per cycle of its cases, to combine several ops' peaks into one (see `combined_rate`).
    """

    kind: str
    dtype: str
    shape: tuple[int, ...]
    weight: float

    def key(self) -> dict[str, Any]:
        """What identifies the op in the cache (the weight is the workload's, not the op's)."""
        return {"op": self.kind, "dtype": self.dtype, "shape": list(self.shape)}

    def label(self) -> str:
        return f"{self.kind} {self.dtype} {'x'.join(map(str, self.shape))}"


def _params(workload: str, params: Mapping[str, Any]) -> dict[str, Any]:
    return {**SPECS[workload].defaults, **params}


def _matmul_golden_ops(p: dict[str, Any]) -> list[PlainOp]:
    m, k, n = p["m"], p["k"], p["n"]
    return [
        PlainOp("matmul", dt, (m, k, n), 2.0 * m * k * n * reps)
        for dt, reps in zip(p["dtypes"], p["repeats"], strict=True)
    ]


def _gemm_fp_ops(p: dict[str, Any]) -> list[PlainOp]:
    return [
        PlainOp("matmul", dt, tuple(shape), 2.0 * math.prod(shape) * reps)
        for dt, shape, reps in zip(p["dtypes"], p["shapes"], p["repeats"], strict=True)
    ]


def _gemm_int8_ops(p: dict[str, Any], device: torch.device) -> list[PlainOp]:
    # The workload's own A type: unsigned on CPUs (VNNI's u8 x s8), signed on GPUs (see GemmInt8.prepare).
    signed = p["path"] == "signed" or (p["path"] == "auto" and device.type == "cuda")
    ops = []
    for shape in p["shapes"]:
        per_gemm = 2.0 * math.prod(shape)
        repeats = max(1, math.ceil(p["ops_per_case"] / per_gemm))
        ops.append(PlainOp("int_mm", "int8" if signed else "uint8", tuple(shape), per_gemm * repeats))
    return ops


def _embbag_ops(p: dict[str, Any]) -> list[PlainOp]:
    low, high = p["pooling"]
    # Bit widths are cycled case by case with the same number of lookups: equal weights. The op is one
    # batch of `bags` bags: a case's `repeats` batches look up at that batch's rate.
    return [
        PlainOp("embedding_bag", f"int{bits}", (p["rows"], p["dim"], p["bags"], low, high), 1.0)
        for bits in p["bits"]
    ]


def _train_ops(p: dict[str, Any]) -> list[PlainOp]:
    # Each Linear layer: forward x·Wᵀ, backward dY·W and dYᵀ·x, 2·batch·in·out flops each.
    b, dt = p["batch"], p["dtype"]
    layers = [(p["inputs"], p["hidden"]), (p["hidden"], p["hidden"]), (p["hidden"], p["classes"])]
    ops = []
    for fan_in, fan_out in layers:
        flops = 2.0 * b * fan_in * fan_out
        ops += [
            PlainOp("matmul", dt, (b, fan_in, fan_out), flops),
            PlainOp("matmul", dt, (b, fan_out, fan_in), flops),
            PlainOp("matmul", dt, (fan_in, b, fan_out), flops),
        ]
    return ops


def plain_ops(workload: str, params: Mapping[str, Any], device: torch.device) -> list[PlainOp]:
    """The plain ops `workload` runs with `params` (the profile's, defaults filled in) on `device`.

    Raises:
        KeyError: a workload this module does not describe.
    """
    p = _params(workload, params)
    if workload == "gemm_int8":
        return _gemm_int8_ops(p, device)
    return {
        "matmul_golden": _matmul_golden_ops,
        "gemm_fp": _gemm_fp_ops,
        "embbag_int8": _embbag_ops,
        "train": _train_ops,
    }[workload](p)


def combined_rate(weighted: Sequence[tuple[float, float | None]]) -> float | None:
    """The rate of a workload whose ops go through several plain ops: total ops / total plain time.

    Args:
        weighted: (weight, rate) per op; the weight is the ops through it.
    Returns:
        Σ weight / Σ (weight / rate), or None when any rate is unknown (a partial peak would flatter).
    """
    if not weighted or any(rate is None or rate <= 0 for _, rate in weighted):
        return None
    total = sum(w for w, _ in weighted)
    return total / sum(w / rate for w, rate in weighted if rate)


# --- timing -------------------------------------------------------------------------------------


_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def _generator(device: torch.device) -> torch.Generator:
    # A generator on the op's device: operands of a GPU-sized GEMM are made there, not on the host.
    return torch.Generator(device=device).manual_seed(SEED)


def _matmul_call(op: PlainOp, device: torch.device) -> tuple[Callable[[], Any], float]:
    m, k, n = op.shape
    g, dt = _generator(device), _DTYPES[op.dtype]
    a = torch.rand((m, k), generator=g, device=device).to(dt)
    b = torch.rand((k, n), generator=g, device=device).to(dt)
    return (lambda: a @ b), 2.0 * m * k * n


def _int_mm_call(op: PlainOp, device: torch.device) -> tuple[Callable[[], Any], float]:
    m, k, n = op.shape
    g = _generator(device)
    low, dt = (-128, torch.int8) if op.dtype == "int8" else (0, torch.uint8)
    a = torch.randint(low, low + 256, (m, k), generator=g, device=device, dtype=dt)
    w = torch.randint(-128, 128, (n, k), generator=g, device=device, dtype=torch.int8)
    return (lambda: torch._int_mm(a, w.t())), 2.0 * m * k * n


def _embedding_bag_call(op: PlainOp, device: torch.device) -> tuple[Callable[[], Any], float]:
    from sdcscan.checks.embbag import packing

    rows, dim, bags, low, high = op.shape
    bits = int(op.dtype.removeprefix("int"))
    lay = packing.layout(bits)
    # Any bytes time the same; 0x3c3c… is a small finite scale and bias in fp32 and fp16 alike.
    packed = torch.full((rows, dim * bits // 8 + lay.meta_bytes), 0x3C, dtype=torch.uint8, device=device)
    g = _generator(device)
    lengths = torch.randint(low, high + 1, (bags,), generator=g, device=device)
    indices = torch.randint(0, rows, (int(lengths.sum()),), generator=g, device=device)
    offsets = torch.cumsum(lengths, 0) - lengths
    return (lambda: packing.embedding_bag(packed, bits, indices, offsets, None)), float(indices.numel())


_CALLS = {"matmul": _matmul_call, "int_mm": _int_mm_call, "embedding_bag": _embedding_bag_call}


def time_best(
    call: Callable[[], Any], device: torch.device, clock: Callable[[], float] = time.perf_counter
) -> float:
    """The shortest time of one call, after warm-up: the first calls allocate and pick kernels.

    A call slower than the whole timing budget gets one warm-up and one timed call, so no op class
    takes much more than a second however large its shape.
    """

    def timed() -> float:
        _sync(device)
        start = clock()
        call()
        _sync(device)  # GPU work is queued: only a synchronised clock measures it
        return clock() - start

    first = timed()
    for _ in range(WARMUP_CALLS - 1 if first < TIMED_BUDGET_S else 0):
        timed()
    best, spent = math.inf, 0.0
    for _ in range(TIMED_CALLS):
        seconds = timed()
        best, spent = min(best, seconds), spent + seconds
        if spent >= TIMED_BUDGET_S:
            break
    return best


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(op: PlainOp, device: torch.device) -> float:
    """The plain op's best rate on `device`, in the workload's ops per second.

    Raises:
        RuntimeError, ValueError: the op cannot run here at this shape (torch's own errors).
    """
    call, ops_per_call = _CALLS[op.kind](op, device)
    seconds = time_best(call, device)
    if not seconds > 0:
        raise RuntimeError(f"{op.label()}: timed at {seconds} s; the clock is too coarse for this op")
    return ops_per_call / seconds


# --- cache --------------------------------------------------------------------------------------


def peaks_dir() -> Path:
    """Where measured peaks are cached, one file per device fingerprint and op."""
    return default_state_dir() / "peaks"


def fingerprint(device: torch.device) -> dict[str, Any]:
    """What a plain op's rate depends on besides the op: the fields gemm_fp's calibration keys on
    (device model, torch, BLAS, ISA capability, threads), without its dtype and checker."""
    from sdcscan.calibration.measure import fingerprint as calibration_fingerprint

    found = calibration_fingerprint(device, "", "")
    return {k: v for k, v in found.items() if k not in ("dtype", "checker")}


def _cache_file(directory: Path, fp: Mapping[str, Any], op: PlainOp) -> Path:
    key = json.dumps({"fingerprint": fp, **op.key()}, sort_keys=True)
    return directory / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def read_cached(path: Path, fp: Mapping[str, Any], op: PlainOp) -> float | None:
    """The cached rate for this fingerprint and op, or None: missing, damaged or someone else's."""
    try:
        doc = read_json(path, what="peak cache", max_bytes=MAX_CACHE_BYTES)
    except (ReportError, OSError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != CACHE_SCHEMA:
        return None
    if doc.get("fingerprint") != dict(fp) or doc.get("op") != op.key():
        return None  # a hash collision or a hand-edited file: not this op's number
    rate = doc.get("ops_per_s")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not (math.isfinite(rate) and rate > 0):
        return None
    return float(rate)


def write_cached(path: Path, fp: Mapping[str, Any], op: PlainOp, rate: float) -> str:
    """Cache one rate atomically; '' on success, else why not (the measurement is still used)."""
    try:
        make_state_dir(path.parent)
        write_json_atomic(
            path, {"schema": CACHE_SCHEMA, "fingerprint": dict(fp), "op": op.key(), "ops_per_s": rate}
        )
    except (OSError, ReportError) as err:
        return (
            f"peaks: could not cache a measured peak in {path.parent} ({err}); it is measured again next run"
        )
    return ""


# --- per unit -----------------------------------------------------------------------------------


@dataclass
class PeakSource:
    """Reads a plain op's rate from the cache, or measures and caches it; each op once per instance."""

    device: torch.device
    directory: Path | None = None  # None: peaks_dir()
    measure_op: Callable[[PlainOp, torch.device], float] | None = None  # None: `measure`, looked up per call

    def __post_init__(self) -> None:
        self.fp = fingerprint(self.device)
        self.seen: dict[str, tuple[float, str]] = {}
        self.notes: list[str] = []

    def rate(self, op: PlainOp) -> tuple[float, str]:
        """(ops/s, "cache" or "fresh").

        Raises:
            Exception: whatever measuring the op raised (the caller decides what a failure costs).
        """
        key = json.dumps(op.key(), sort_keys=True)
        if key not in self.seen:
            path = _cache_file(self.directory or peaks_dir(), self.fp, op)
            cached = read_cached(path, self.fp, op)
            if cached is not None:
                self.seen[key] = (cached, "cache")
            else:
                fresh = (self.measure_op or measure)(op, self.device)
                problem = write_cached(path, self.fp, op, fresh)
                if problem and problem not in self.notes:
                    self.notes.append(problem)
                self.seen[key] = (fresh, "fresh")
        return self.seen[key]


def workload_peak(source: PeakSource, workload: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """One workload's peak, as plain data for the parent and the report.

    Returns:
        {"peak_ops_per_s": combined rate or None, "ops": [{op, dtype, shape, ops_per_s, source}],
        "error": None or why the peak is unknown}. Never raises: a peak that cannot be measured
        costs only the efficiency figure, never the unit's cases.
    """
    try:
        ops = plain_ops(workload, params, source.device)
    except KeyError:
        return {"peak_ops_per_s": None, "ops": [], "error": f"no plain op is described for {workload}"}
    rows, weighted = [], []
    try:
        for op in ops:
            rate, origin = source.rate(op)
            weighted.append((op.weight, rate))
            rows.append({**op.key(), "ops_per_s": round(rate, 1), "source": origin})
    except Exception as err:  # any torch failure: unsupported dtype or shape on this device, memory
        return {"peak_ops_per_s": None, "ops": rows, "error": f"{op.label()}: {type(err).__name__}: {err}"}
    peak = combined_rate(weighted)
    return {"peak_ops_per_s": None if peak is None else round(peak, 1), "ops": rows, "error": None}


def unit_peaks(
    device: torch.device, workloads: Mapping[str, Mapping[str, Any]], source: PeakSource | None = None
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The peak of every workload of a unit, and notes for the report (failures, an unwritable cache).

    Args:
        workloads: name -> the parameters the unit runs it with.
    """
    try:
        source = source or PeakSource(device)
    except Exception as err:  # the fingerprint itself failed: no peaks, the unit still runs
        note = f"peaks: not measured ({type(err).__name__}: {err}); efficiency is not reported"
        return {w: {"peak_ops_per_s": None, "ops": [], "error": note} for w in workloads}, [note]
    peaks = {w: workload_peak(source, w, p) for w, p in workloads.items()}
    notes = list(source.notes)
    notes += [
        f"peaks: {w}: {d['error']}; its efficiency is not reported" for w, d in peaks.items() if d["error"]
    ]
    return peaks, notes


def host_peaks(device: torch.device, workloads: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """`sdcscan info --peaks` for one device: the fingerprint and, per workload, its ops and peak."""
    source = PeakSource(device)
    peaks, notes = unit_peaks(device, workloads, source)
    return {"device": str(device), "fingerprint": source.fp, "workloads": peaks, "notes": notes}


def case_peak(workload: str, found: Mapping[str, Any], occurrence: int) -> float | None:
    """The plain rate for one case: the op of its slot (workloads cycle dtypes, shapes or bit widths
    by occurrence, in `plain_ops` order), or every op for `train`, which runs them all in each case.

    `found` is `workload_peak`'s result. A few cases do not cover every slot evenly, so a benchmark
    of few cases divides by this, not by the workload's combined peak.
    """
    ops = found.get("ops") or []
    if found.get("error") or not ops:
        return None
    if workload == "train":
        return found.get("peak_ops_per_s")
    rate = ops[occurrence % len(ops)]["ops_per_s"]
    return float(rate) if rate else None
