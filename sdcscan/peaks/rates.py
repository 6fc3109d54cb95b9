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

Which ops a workload runs is stated in `sdcscan.peaks.plain_ops`.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from sdcscan.checks import fp8, tf32
from sdcscan.checks.limits import TF32_SLOT
from sdcscan.errors import ReportError
from sdcscan.files import default_state_dir, make_state_dir, read_json, write_json_atomic
from sdcscan.peaks.plain_ops import PeakOp, WorkloadPeak, combined_rate, plain_ops
from sdcscan.workloads.workload_spec import PlainOp

CACHE_SCHEMA = "sdcscan-peak/1"
MAX_CACHE_BYTES = 64 * 1024
WARMUP_CALLS = 2
TIMED_CALLS = 5
TIMED_BUDGET_S = 0.25  # timed calls stop once they took this long together (at least one is timed)
SEED = 0x9EA4


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


def _matmul_call(op: PlainOp, device: torch.device) -> tuple[Callable[[], object], float]:
    m, k, n = op.shape
    g = _generator(device)
    a = torch.rand((m, k), generator=g, device=device)
    b = torch.rand((k, n), generator=g, device=device)
    if op.dtype in fp8.OPERANDS:  # matmul_golden's fp8 slots: the scaled product into fp32
        a8, b8 = fp8.operands(a, b, op.dtype)
        return (lambda: fp8.scaled_mm(a8, b8)), 2.0 * m * k * n
    if op.dtype == TF32_SLOT:  # matmul_golden's TF32 slot: fp32 operands, TF32 allowed

        def tf32_product() -> torch.Tensor:
            with tf32.products(device):
                return a @ b

        return tf32_product, 2.0 * m * k * n
    dt = _DTYPES[op.dtype]
    a, b = a.to(dt), b.to(dt)
    return (lambda: a @ b), 2.0 * m * k * n


def _int_mm_call(op: PlainOp, device: torch.device) -> tuple[Callable[[], object], float]:
    m, k, n = op.shape
    g = _generator(device)
    low, dt = (-128, torch.int8) if op.dtype == "int8" else (0, torch.uint8)
    a = torch.randint(low, low + 256, (m, k), generator=g, device=device, dtype=dt)
    w = torch.randint(-128, 128, (n, k), generator=g, device=device, dtype=torch.int8)
    return (lambda: torch._int_mm(a, w.t())), 2.0 * m * k * n


def _embedding_bag_call(op: PlainOp, device: torch.device) -> tuple[Callable[[], object], float]:
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
    call: Callable[[], object], device: torch.device, clock: Callable[[], float] = time.perf_counter
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

# No unit comes near this: an H200's dense int8 peak is about 2e15 op/s by its datasheet.
MAX_PLAUSIBLE_OPS_PER_S = 1e17


def peaks_dir() -> Path:
    """Where measured peaks are cached, one file per device fingerprint and op."""
    return default_state_dir() / "peaks"


def fingerprint(device: torch.device) -> dict[str, object]:
    """What a plain op's rate depends on besides the op: the fields gemm_fp's calibration keys on
    (device model, torch, BLAS, ISA capability, threads), without its dtype and checker."""
    from sdcscan.calibration.measure import fingerprint as calibration_fingerprint

    found = calibration_fingerprint(device, "", "")
    return {k: v for k, v in found.items() if k not in ("dtype", "checker")}


def _cache_file(directory: Path, fp: Mapping[str, object], op: PlainOp) -> Path:
    key = json.dumps({"fingerprint": fp, **op.key()}, sort_keys=True)
    return directory / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def read_cached(path: Path, fp: Mapping[str, object], op: PlainOp) -> float | None:
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
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= MAX_PLAUSIBLE_OPS_PER_S:
        return None  # 1e308 from a damaged or hand-edited file would make every efficiency 0
    return float(rate)


def write_cached(path: Path, fp: Mapping[str, object], op: PlainOp, rate: float) -> str:
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


def workload_peak(source: PeakSource, workload: str, params: Mapping[str, object]) -> WorkloadPeak:
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
    rows: list[PeakOp] = []
    weighted: list[tuple[float, float | None]] = []
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
    device: torch.device, workloads: Mapping[str, Mapping[str, object]], source: PeakSource | None = None
) -> tuple[dict[str, WorkloadPeak], list[str]]:
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


def host_peaks(device: torch.device, workloads: Mapping[str, Mapping[str, object]]) -> dict[str, object]:
    """`sdcscan info --peaks` for one device: the fingerprint and, per workload, its ops and peak."""
    source = PeakSource(device)
    peaks, notes = unit_peaks(device, workloads, source)
    return {"device": str(device), "fingerprint": source.fp, "workloads": peaks, "notes": notes}
