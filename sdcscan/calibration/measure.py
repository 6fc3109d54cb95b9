"""Calibration of V-ABFT's e_max: measure it on a device, cache it, look it up for `gemm_fp`.

e_max depends on the device's GEMM kernels (blocking, split-K, FMA, accumulation precision), the dtype
and the checker's precision, so it is measured per platform (docs/abft.md §3.2): many clean rows and
columns per inner dimension K over several input distributions, e_max = margin × max |D| / T(e=1).
The measurement uses the very functions `gemm_fp` checks with, so the two cannot drift apart.

No device goes uncalibrated: `resolve` takes e_max from a file the user named, else from the cache in
the state directory, else from the shipped table when its entry was measured on this very fingerprint,
else it measures now (0.2-1.7 s per dtype and shape on one AVX-512 core) and caches the result. Every e_max is held
against `e_max_ceiling`, which depends only on the arithmetic, so a unit cannot calibrate away its own
faults: a measurement above it is refused, and gemm_fp on that unit is an error, never a quiet pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from sdcscan.calibration.table import (
    CHECKERS,
    DEFAULT_MARGIN,
    DISTRIBUTION_NAMES,
    DTYPE_NAMES,
    MAX_TABLE_BYTES,
    OUT_OF_RANGE,
    PAIR_NAMES,
    SCHEMA,
    check_schema,
    check_table,
    gemm_e_max_ceiling,
)
from sdcscan.checks import limits, vabft
from sdcscan.checks.limits import tile_width
from sdcscan.errors import ReportError, UsageError
from sdcscan.files import calibration_cache_dir, make_state_dir, parse_json, read_json, write_json_atomic
from sdcscan.timefmt import iso_utc

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}
DEFAULT_K = (256, 1024, 4096)
DEFAULT_ROWS = 10_000
DEFAULT_MN = 256  # rows and columns of each calibration GEMM
SHIPPED_TABLE = "data/calibration.json"  # inside the sdcscan package


def _student_t3(shape: tuple[int, int], g: torch.Generator, dt: torch.dtype) -> torch.Tensor:
    """Student-t with 3 degrees of freedom: heavy tails, from normals only (the generator stays ours)."""
    z = torch.randn(shape, generator=g, dtype=dt)
    chi2 = torch.randn((3, *shape), generator=g, dtype=dt).square().sum(0)
    return z / torch.sqrt(chi2 / 3.0)


def _llm_like(shape: tuple[int, int], g: torch.Generator, dt: torch.dtype) -> torch.Tensor:
    """N(0,1) with a few outlier channels (every 50th column ×20), like LLM activations."""
    x = torch.randn(shape, generator=g, dtype=dt)
    x[:, ::50] *= 20.0
    return x


def _row_scales(shape: tuple[int, int], g: torch.Generator, dt: torch.dtype) -> torch.Tensor:
    """Zero-mean rows whose scales span three orders of magnitude, plus outlier channels (every 64th
    column ×10): trained weights and activations are like this, and small rows beside large ones are
    where a threshold calibrated on one scale fails."""
    scale = 10.0 ** (torch.rand((shape[0], 1), generator=g, dtype=dt) * -3.0)
    x = torch.randn(shape, generator=g, dtype=dt) * scale
    x[:, ::64] *= 10.0
    return x


def _numpy_rng(g: torch.Generator) -> np.random.Generator:
    """numpy's own generator (PCG64), seeded from torch's: distributions drawn by two unrelated
    generators, so e_max is not fitted to one generator's artefacts (issue 32)."""
    return np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=g)))


def _numpy_t(rng: np.random.Generator, dof: int, shape: tuple[int, ...]) -> np.ndarray:
    """Student-t with an integer number of degrees of freedom, z / sqrt(χ²/dof), from numpy's fast
    normal and exponential draws (χ²(2) = 2·Exp(1)), which are faster than `standard_t`."""
    chi2 = 2.0 * sum(rng.standard_exponential(shape) for _ in range(dof // 2))
    if dof % 2:
        chi2 = chi2 + rng.standard_normal(shape) ** 2
    return rng.standard_normal(shape) / np.sqrt(chi2 / dof)


def _student_t4(shape: tuple[int, int], g: torch.Generator, dt: torch.dtype) -> torch.Tensor:
    """Student-t with 4 degrees of freedom, drawn by numpy."""
    return torch.from_numpy(_numpy_t(_numpy_rng(g), 4, shape)).to(dt)


def _outlier_channels(shape: tuple[int, int], g: torch.Generator, dt: torch.dtype) -> torch.Tensor:
    """N(0,1) with one column in 128 (at random places, at least one) scaled by 10..100, drawn by numpy:
    the massive activations of a few channels of a transformer."""
    rng = _numpy_rng(g)
    x = rng.standard_normal(shape)
    cols = rng.choice(shape[1], size=max(1, shape[1] // 128), replace=False)
    x[:, cols] *= 10.0 ** rng.uniform(1.0, 2.0, cols.size)
    return torch.from_numpy(x).to(dt)


def _log_scales(shape: tuple[int, int], g: torch.Generator, dt: torch.dtype) -> torch.Tensor:
    """Zero-mean, each row and each column with its own scale, log-uniform over 10^-3..10^3; divided by
    its largest magnitude, so that products stay finite in fp16 (a threshold is relative: the spread of
    scales matters, not their overall size)."""
    rows = 10.0 ** (torch.rand((shape[0], 1), generator=g, dtype=dt) * 6.0 - 3.0)
    cols = 10.0 ** (torch.rand((1, shape[1]), generator=g, dtype=dt) * 6.0 - 3.0)
    x = torch.randn(shape, generator=g, dtype=dt) * rows * cols
    return x / x.abs().max()


def _activations(m: int, k: int, g: torch.Generator, dt: torch.dtype) -> torch.Tensor:
    """(M, K) activations of a linear layer: GELU of normals (mostly positive, so rows have a mean),
    per-token and per-channel scales over two decades, and one channel in 128 ×30 more."""
    tokens = 10.0 ** (torch.rand((m, 1), generator=g, dtype=dt) * 2.0 - 1.0)
    channels = 10.0 ** (torch.rand((1, k), generator=g, dtype=dt) * 2.0 - 1.0)
    channels[0, torch.randperm(k, generator=g)[: max(1, k // 128)]] *= 30.0
    return torch.nn.functional.gelu(torch.randn((m, k), generator=g, dtype=dt) * tokens * channels)


def _weights(k: int, n: int, g: torch.Generator, dt: torch.dtype) -> torch.Tensor:
    """(K, N) weights, drawn by numpy: Student-t(5) entries, per-input-row scales over a decade and a mean
    per output column of either sign. Those means cancel in each row's mean, which V-ABFT's threshold
    reads, but not in C (docs/abft.md §3.1a)."""
    rng = _numpy_rng(g)
    w = _numpy_t(rng, 5, (k, n)) * 10.0 ** rng.uniform(-0.5, 0.5, (k, 1))
    return torch.from_numpy((w + 3.0 * rng.standard_normal((1, n))) * 0.02).to(dt)


# (M, K, N), generator, dtype -> (A, B): operands that differ in kind, as a layer's inputs and weights do
PairSampler = Callable[
    [tuple[int, int, int], torch.Generator, torch.dtype], tuple[torch.Tensor, torch.Tensor]
]
PAIRS: dict[str, PairSampler] = {
    "activations_weights": lambda s, g, dt: (_activations(s[0], s[1], g, dt), _weights(s[1], s[2], g, dt)),
}

# (shape, generator, dtype) -> a matrix of GEMM operands; not telemetry's Sampler
OperandSampler = Callable[[tuple[int, int], torch.Generator, torch.dtype], torch.Tensor]
_SAMPLERS: dict[str, OperandSampler] = {
    "abs_normal": lambda s, g, dt: (
        torch.randn(s, generator=g, dtype=dt).abs() + 0.5
    ),  # the artifact's default
    "normal": lambda s, g, dt: torch.randn(s, generator=g, dtype=dt),
    "shifted_normal": lambda s, g, dt: torch.randn(s, generator=g, dtype=dt) + 1.0,
    "uniform": lambda s, g, dt: torch.rand(s, generator=g, dtype=dt) * 2.0 - 1.0,
    "student_t3": _student_t3,
    "llm_like": _llm_like,
    "row_scales": _row_scales,
    "student_t4": _student_t4,
    "outlier_channels": _outlier_channels,
    "log_scales": _log_scales,
}
DISTRIBUTIONS = {name: _SAMPLERS[name] for name in DISTRIBUTION_NAMES}  # table.py names them
assert tuple(PAIRS) == PAIR_NAMES


def sample(dist: str, shape: tuple[int, int], g: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """A (rows, cols) CPU matrix from a named distribution, rounded once to `dtype`."""
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    return DISTRIBUTIONS[dist](shape, g, wide).to(dtype)


def sample_pair(
    dist: str, shape: tuple[int, int, int], g: torch.Generator, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B) of a GEMM of `shape` = (M, K, N) from a named distribution or pair, rounded to `dtype`."""
    m, k, n = shape
    if dist in DISTRIBUTIONS:
        return sample(dist, (m, k), g, dtype), sample(dist, (k, n), g, dtype)
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    a, b = PAIRS[dist](shape, g, wide)
    return a.to(dtype), b.to(dtype)


def rounded_up(x: float) -> float:
    """`x` to 3 significant digits, rounded up: a written e_max never falls below the measured need times
    the margin (rounding to nearest could take 0.5% off it)."""
    if not math.isfinite(x) or x <= 0:
        return x
    step = 10.0 ** (math.floor(math.log10(x)) - 2)
    return float(f"{math.ceil(x / step - 1e-9) * step:.3g}")


def calibration_inputs(dtype: str = "") -> list[str]:
    """Every distribution and pair e_max is measured over for `dtype`, in the order they are drawn."""
    return [d for d in (*DISTRIBUTIONS, *PAIRS) if d not in OUT_OF_RANGE.get(dtype, ())]


FIT_TURNS = 3  # turns of `fit_need`: the coefficients change by under 1% after the third (fp32, bf16)


@dataclass(frozen=True, slots=True)
class Need:
    """What clean GEMMs needed of the threshold's two coefficients (`vabft.vabft_threshold`), before the
    margin: `moment` (e_max, of the second-moment term) and `mean` (e_mean, of the mean term)."""

    moment: float
    mean: float

    def worst(self, other: Need) -> Need:
        """Each coefficient's larger need of the two."""
        return Need(max(self.moment, other.moment), max(self.mean, other.mean))


def clean_terms(
    a: torch.Tensor, b: torch.Tensor, c_out: torch.Tensor, checker: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(|D|, mean term, second-moment term) of every checksum of the rows and the columns of one clean
    GEMM, flattened, float64 on the CPU: what `fit_need` fits the two coefficients to."""
    enc_b, enc_a = vabft.encode(b, checker), vabft.encode(a.t(), checker)
    d = torch.cat(
        [
            vabft.row_residual(a, c_out, enc_b.rowsum).flatten(),
            vabft.row_residual(b.t(), c_out.t(), enc_a.rowsum).flatten(),
        ]
    )
    rows, cols = vabft.threshold_terms(a, enc_b.summary), vabft.threshold_terms(b.t(), enc_a.summary)
    mean = torch.cat([rows[0].flatten(), cols[0].flatten()])
    moment = torch.cat([rows[1].flatten(), cols[1].flatten()])
    return d.double().abs().cpu(), mean.cpu(), moment.cpu()


def fit_need(d: torch.Tensor, mean: torch.Tensor, moment: torch.Tensor) -> Need:
    """The two coefficients clean checksums needed, fitted in turns: e_max from the checksums whose mean
    term is no larger than their second-moment term (zero-mean data, where e_max decides), less what
    the mean term covers of them; then e_mean as the most any checksum needs beyond e_max's part. The
    first turn takes e_mean as 0, an upper bound on e_max; each turn ends with every checksum given
    within e_mean·mean + e_max·moment. A non-finite |D| needs infinity."""
    if not bool(torch.isfinite(d).all()):
        return Need(math.inf, math.inf)
    small, has_mean = mean <= moment, mean > 0
    if not bool(small.any()):
        small = torch.ones_like(small)
    need = Need(math.inf, 0.0)
    for _ in range(FIT_TURNS):
        moment_need = float(
            ((d - need.mean * mean)[small].clamp_min(0.0) / moment[small].clamp_min(1e-300)).max()
        )
        rest = (d - moment_need * moment).clamp_min(0.0)
        need = Need(
            moment_need, float((rest[has_mean] / mean[has_mean]).max()) if bool(has_mean.any()) else 0.0
        )
    return need


def calibrate_dtype(
    dtype_name: str,
    *,
    device: torch.device,
    rows: int,
    k_values: tuple[int, ...],
    mn: int = DEFAULT_MN,
    seed: int = 0,
) -> tuple[dict[str, dict[int, Need]], int]:
    """Needed e_max per checker and K for one GEMM dtype over every distribution.

    Args:
        dtype_name: key of DTYPES.  device: where the GEMM runs.  rows: clean rows in total (≥ this many).
        k_values: inner dimensions.  mn: M = N of each GEMM.  seed: input seed.
    Returns:
        ({checker: {K: Need}}, number of clean rows measured).
    """
    m = min(mn, max(1, rows))
    trials = max(1, math.ceil(rows / (len(k_values) * len(calibration_inputs(dtype_name)) * m)))
    out: dict[str, dict[int, Need]] = {chk: {} for chk in CHECKERS[dtype_name]}
    for k in k_values:
        needed = measure_needed(
            dtype_name, list(out), device=device, shape=(m, k, mn), trials=trials, seed=seed
        )
        for chk, value in needed.items():
            out[chk][k] = value
    return out, trials * len(k_values) * len(calibration_inputs(dtype_name)) * m


def measure_needed(
    dtype_name: str,
    checkers: list[str],
    *,
    device: torch.device,
    shape: tuple[int, int, int],
    trials: int,
    seed: int = 0,
) -> dict[str, Need]:
    """What `trials` clean GEMMs of `shape` per distribution needed, per checker: the two coefficients
    fitted to all their checksums at once (`fit_need`).

    Deterministic in its arguments: correct units of one fingerprint measure the same numbers.
    """
    dtype, (m, k, n) = DTYPES[dtype_name], shape
    g = torch.Generator().manual_seed(seed)
    terms: dict[str, list[tuple[torch.Tensor, ...]]] = {chk: [] for chk in checkers}
    for dist in calibration_inputs(dtype_name):
        for _ in range(trials):
            a, b = (x.to(device) for x in sample_pair(dist, (m, k, n), g, dtype))
            c_out = a @ b
            if not bool(torch.isfinite(c_out).all()) and beyond_range(a, b, dtype):
                continue  # this draw measures the format's range, not its rounding
            for chk, found in terms.items():
                found.append(clean_terms(a, b, c_out, DTYPES[chk]))
    return {
        chk: fit_need(*(torch.cat(part) for part in zip(*found, strict=True))) if found else Need(0.0, 0.0)
        for chk, found in terms.items()
    }


def beyond_range(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the exact product A @ B has an element `dtype` cannot hold (or within 1% of its largest
    finite value, where rounding may carry it over).

    fp16 holds at most 65504: at K = 4096 the outlier-channel draws reach 17,200 in a (128, 4096, 256)
    product and, now and then, overflow (the burnin shape, measured 2026-11-27). Such a draw is left out
    of the measurement, so that one overflowing draw does not make e_max infinite and refuse fp16 on
    every correct unit. A non-finite output where the exact product is in range is kept: it is an error.
    gemm_fp holds its operand pool to the same test (a dtype whose pool overflows is refused).
    """
    limit = 0.99 * torch.finfo(dtype).max
    k = a.shape[-1]
    # |C_ij| <= K·max|a|·max|b|: within range by that bound (every fp32, fp64 and bf16 GEMM here), no product
    if float(a.abs().amax().double() * b.abs().amax().double()) * k <= limit:
        return False
    exact = a.double() @ b.double()  # on the operands' device: a GPU pool is 4096^3
    return bool((~torch.isfinite(exact) | (exact.abs() > limit)).any())


def calibrate(
    *,
    device: torch.device,
    model: str,
    dtypes: list[str],
    rows: int = DEFAULT_ROWS,
    k_values: tuple[int, ...] = DEFAULT_K,
    margin: float = DEFAULT_MARGIN,
    seed: int = 0,
) -> dict[str, Any]:
    """Measure e_max for each dtype and checker on `device` and return a calibration table.

    Args:
        device: the device to measure.  model: its model name (`units.device_model`), the table's key.
        dtypes: GEMM dtypes.  rows: clean rows per dtype.  k_values: inner dimensions measured.
        margin: safety factor on the largest needed e_max.  seed: input seed.
    Raises:
        UsageError: an unknown dtype, a non-positive row count or K.
    """
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or rows < 1 or not k_values or min(k_values) < 1 or margin < 1.0:
        raise UsageError(
            f"calibrate: dtypes must be from {', '.join(DTYPES)}; rows, K ≥ 1; margin ≥ 1 (got {bad or ''})"
        )
    entries = []
    for name in dtypes:
        measured, n_rows = calibrate_dtype(name, device=device, rows=rows, k_values=k_values, seed=seed)
        for chk, per_k in measured.items():
            entries.append(_entry(model, device, name, chk, per_k, margin, n_rows))
    return {"schema": SCHEMA, "c": limits.SIGMA_C, "entries": entries}


def _entry(
    model: str,
    device: torch.device,
    dtype: str,
    chk: str,
    per_k: dict[int, Need],
    margin: float,
    rows: int,
) -> dict[str, Any]:
    """One table row: the key fields first, then how it was measured."""
    needed = functools.reduce(Need.worst, per_k.values())
    return {
        "device_model": model,
        "torch": torch.__version__,
        "dtype": dtype,
        "checker": chk,
        **_coefficients(needed, margin),
        "margin": margin,
        "k_max": max(per_k),
        "checks": CHECKS,
        "method": METHOD,
        "needed_per_k": {str(k): v.moment for k, v in sorted(per_k.items())},
        "needed_mean_per_k": {str(k): v.mean for k, v in sorted(per_k.items())},
        "rows": rows,
        "distributions": calibration_inputs(dtype),
        "device_kind": device.type,
        "cpu_capability": torch.backends.cpu.get_cpu_capability() if device.type == "cpu" else None,
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "measured_utc": iso_utc(time.time()),
    }


def _coefficients(needed: Need, margin: float) -> dict[str, float]:
    """An entry's coefficients (the margin on what was needed) and what was needed."""
    return {
        "e_max": rounded_up(needed.moment * margin),
        "e_mean": rounded_up(needed.mean * margin),
        "needed": needed.moment,
        "needed_mean": needed.mean,
    }


def merge(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """New entries replace old ones with the same (device model, torch, dtype, checker); others are kept."""

    def key(e: dict[str, Any]) -> tuple[str, str, str, str]:
        return (e["device_model"], e["torch"], e["dtype"], e["checker"])

    fresh = {key(e) for e in new["entries"]}
    kept = [e for e in (old or {}).get("entries", []) if key(e) not in fresh]
    return {**new, "entries": kept + new["entries"]}


def load_table(path: str = "") -> dict[str, Any]:
    """Read a calibration file; "" means the table shipped with sdcscan.

    Raises:
        UsageError: the file is missing, not JSON, or not a calibration table.
    """
    label = path or "the shipped calibration table"
    try:
        if path:
            data = read_json(path, what="calibration table", max_bytes=MAX_TABLE_BYTES)
        else:
            text = resources.files("sdcscan").joinpath(SHIPPED_TABLE).read_text(encoding="utf-8")
            data = parse_json(text, what="calibration table", label=label)
    except ReportError as err:
        raise UsageError(str(err)) from None  # a bad --calibration is a usage error (exit 2)
    # The schema only: `calibrate -o` merges into files whose other entries it need not use. A run checks
    # every entry before its workers start (calibration.table.check_table_file).
    return check_schema(data, label=f"calibration {label}")


def save_table(path: str | os.PathLike[str], table: dict[str, Any]) -> None:
    """Merge `table` into the file at `path` (other devices' entries are kept) and write it atomically.

    Raises:
        UsageError: an existing file is not a calibration table (it is left untouched).
        ReportError: the file could not be written.
    """
    old = load_table(str(path)) if Path(path).exists() else None
    write_json_atomic(path, merge(old, table), indent=2)  # indented: people read and diff these files


def lookup(table: dict[str, Any], model: str, dtype: str, checker: str) -> dict[str, Any] | None:
    """The entry for (device model, dtype, checker), preferring one measured with this torch version."""
    found = [
        e
        for e in table["entries"]
        if e.get("device_model") == model and e.get("dtype") == dtype and e.get("checker") == checker
    ]
    found.sort(key=lambda e: e.get("torch") != torch.__version__)
    return found[0] if found else None


def measure_on(
    device: str,
    *,
    dtypes: list[str],
    rows: int = DEFAULT_ROWS,
    k_values: tuple[int, ...] = DEFAULT_K,
    margin: float = DEFAULT_MARGIN,
    seed: int = 0,
) -> dict[str, Any]:
    """`calibrate` on a device named as on the command line (`cpu`, `cuda:N`), as `sdcscan calibrate` runs it.

    CPU measurements use one thread, as per-core units do: e_max depends on the GEMM's blocking, which
    depends on the thread count. The caller's thread count is restored afterwards.

    Raises:
        UsageError: a malformed or absent device, or bad `calibrate` arguments.
    """
    from sdcscan.units import device_model

    dev = _parse_device(device)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return calibrate(
            device=dev, model=device_model(dev), dtypes=dtypes, rows=rows, k_values=k_values,
            margin=margin, seed=seed,
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)


def _parse_device(text: str) -> torch.device:
    if text != "cpu" and not (text.startswith("cuda:") and text[5:].isdigit()):
        raise UsageError(f"--device {text!r}: expected cpu or cuda:N")
    if text.startswith("cuda") and not (
        torch.cuda.is_available() and int(text[5:]) < torch.cuda.device_count()
    ):
        raise UsageError(f"--device {text}: no such CUDA device here")
    return torch.device(text)


# --- Self-calibration: every device gets an e_max, from a file, the cache, the shipped table or a fresh
# measurement, held against a ceiling the arithmetic sets.

SELF_MAX_MN = 256  # rows and columns of a self-calibration GEMM at most: seconds per dtype, not minutes
SELF_ROWS = 512  # clean rows (and as many columns) per distribution: 5,632 of each over the 11 inputs
SOURCES = ("file", "cache", "shipped", "fresh")
CHECKS = ["rows", "columns"]  # what a measurement covered; entries without it predate the column check
# How e_max is measured and applied: 2 = the column-mean term of the threshold, contiguous checksum
# products and the issue-32 distributions (docs/abft.md §3.1a); 3 = checksums over tiles of 8 and the
# whole line, a second-moment term, two coefficients (e_max, e_mean) (§3.1b). Part of the cache key, and
# an entry of another method is not used: a coefficient fits the threshold it was measured with.
METHOD = 3


@dataclass(frozen=True, slots=True)
class Threshold:
    """Where one (dtype, checker, K) of a unit gets its e_max.

    e_max: the value to use, already scaled to K; None when `refused` says why there is none.
    source: one of SOURCES.  needed: what the measurement behind it needed (before the margin).
    ceiling: `ceiling_for` at this shape; e_max never exceeds it.
    """

    e_max: float | None
    source: str
    needed: float | None
    ceiling: float
    refused: str = ""
    cache_note: str = ""  # why a fresh measurement could not be cached, if it could not
    cache: str = ""  # the cache file's name (in `calibration_cache_dir()`) it was read from or written to
    file_note: str = ""  # why the named calibration file's entry was not used, if it was not
    e_mean: float | None = None  # the mean term's coefficient (vabft.vabft_threshold), with e_max


def ceiling_for(dtype: str, checker: str, shape: tuple[int, int, int]) -> float:
    """`table.gemm_e_max_ceiling` for a GEMM of `shape` = (M, K, N) in `dtype` checked in `checker`."""
    m, k, n = shape
    return gemm_e_max_ceiling(dtype, checker, k=k, width=max(tile_width(m), tile_width(n)))


def fingerprint(device: torch.device, dtype: str, checker: str) -> dict[str, Any]:
    """What e_max depends on besides the shape: device model, torch and BLAS build, ISA, threads, dtypes."""
    from sdcscan.units import device_model

    found: dict[str, Any] = {
        "device_model": device_model(device),
        "device_kind": device.type,
        "torch": str(torch.__version__),
        "dtype": dtype,
        "checker": checker,
    }
    if device.type == "cuda":
        found["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        found["cuda"] = str(torch.version.cuda)
    else:
        found["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        found["threads"] = torch.get_num_threads()
        found["blas"] = _blas_info()
    return found


def _blas_info() -> str:
    """BLAS_INFO of torch's build (e.g. "mkl", "open"): a different BLAS blocks and sums differently."""
    for part in torch.__config__.show().replace("\n", ",").split(","):
        if part.strip().startswith("BLAS_INFO="):
            return part.strip().removeprefix("BLAS_INFO=")
    return "unknown"


def resolve(
    device: torch.device, dtype: str, checker: str, shape: tuple[int, int, int], path: str = ""
) -> Threshold:
    """The e_max gemm_fp uses for one (dtype, checker, shape) on `device`, and where it came from.

    Order: the file at `path` (an entry for this device model, unless it was measured for another
    METHOD), the cache (this exact fingerprint and K), the shipped table (an entry measured on this exact fingerprint), a fresh measurement (cached).
    An entry measured at a smaller K is scaled by sqrt(K / k_max), as the V-ABFT artifact does.

    Raises:
        UsageError: the file at `path` is not a calibration table.
    """
    k, ceiling = shape[1], ceiling_for(dtype, checker, shape)
    fp = fingerprint(device, dtype, checker)
    file_note = ""
    if path:
        entry = lookup(load_table(path), fp["device_model"], dtype, checker)
        if entry is not None and entry.get("method", METHOD) != METHOD:
            file_note = (
                f"{path}: its {dtype} ({checker} checker) entry was measured for another threshold (method "
                f"{entry.get('method')}, this sdcscan's is {METHOD}), so it is not used; measure the table "
                "again with `sdcscan calibrate`"
            )
        elif entry is not None:  # a measured entry fits its method; a hand-written one is taken as written
            return _held(entry, "file", k, ceiling)
    return dataclasses.replace(_unfiled(device, fp, shape, ceiling), file_note=file_note)


def _unfiled(
    device: torch.device, fp: dict[str, Any], shape: tuple[int, int, int], ceiling: float
) -> Threshold:
    """`resolve` without a file: the cache, the shipped table, or a fresh measurement (cached)."""
    k = shape[1]
    cache = _cache_file(fp, shape)
    entry = _read_cached(cache)
    if entry is not None:
        return dataclasses.replace(_held(entry, "cache", k, ceiling), cache=cache.name)
    entry = _shipped_match(fp, k)
    if entry is not None:
        return _held(entry, "shipped", k, ceiling)
    entry = fresh_entry(device, fp, shape)
    threshold = _held(entry, "fresh", k, ceiling)
    if threshold.refused:
        return threshold  # never cache a refused measurement: the next run measures again
    note = _write_cached(cache, entry)
    return dataclasses.replace(threshold, cache_note=note, cache="" if note else cache.name)


def fresh_entry(device: torch.device, fp: dict[str, Any], shape: tuple[int, int, int]) -> dict[str, Any]:
    """Measure e_max now at (min(M, 256), K, min(N, 256)) over every distribution; a table entry."""
    m, k, n = min(shape[0], SELF_MAX_MN), shape[1], min(shape[2], SELF_MAX_MN)
    trials = max(1, math.ceil(SELF_ROWS / m))
    needed = measure_needed(fp["dtype"], [fp["checker"]], device=device, shape=(m, k, n), trials=trials)
    return {
        **fp,
        **_coefficients(needed[fp["checker"]], DEFAULT_MARGIN),
        "margin": DEFAULT_MARGIN,
        "k_max": k,
        "checks": CHECKS,
        "method": METHOD,
        "shape": [m, k, n],
        "rows": trials * m * len(calibration_inputs(fp["dtype"])),
        "distributions": calibration_inputs(fp["dtype"]),
        "fingerprint": fp,
        "measured_utc": iso_utc(time.time()),
    }


def discard_cached(name: str) -> None:
    """Remove a cache file by its name (`Threshold.cache`): a unit found its e_max too tight."""
    if name and "/" not in name:
        with contextlib.suppress(OSError):
            (calibration_cache_dir() / name).unlink()


def _held(entry: dict[str, Any], source: str, k: int, ceiling: float) -> Threshold:
    """The entry's coefficients scaled to K, refused when either is above the ceiling (or e_max is not a
    positive number). An entry without e_mean (written by hand) uses e_max for both terms."""
    e_max, k_max = float(entry["e_max"]), int(entry["k_max"])
    e_mean = float(entry.get("e_mean", e_max))
    if k > k_max:  # the coefficients grow with K
        e_max, e_mean = (e * math.sqrt(k / k_max) for e in (e_max, e_mean))
    raw = entry.get("needed")
    needed = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else None
    for name, value, least in (("e_max", e_max, 0.0), ("e_mean", e_mean, -1.0)):
        if not least < value <= ceiling:
            why = (
                f"the {source} {name} {value:.3g} is above {ceiling:.3g}, the most any correct device can "
                f"need at this shape: the measurement saw errors, not rounding"
            )
            return Threshold(None, source, needed, ceiling, refused=why)
    return Threshold(e_max, source, needed, ceiling, e_mean=e_mean)


def _cache_file(fp: dict[str, Any], shape: tuple[int, int, int]) -> Path:
    m, k, n = min(shape[0], SELF_MAX_MN), shape[1], min(shape[2], SELF_MAX_MN)
    key = json.dumps({**fp, "shape": [m, k, n], "method": METHOD}, sort_keys=True)
    return calibration_cache_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def _read_cached(path: Path) -> dict[str, Any] | None:
    """The one entry of a cache file; None when there is none or it is not a usable table (it is then
    measured again and replaced)."""
    if not path.exists():
        return None
    try:
        table = check_table(
            read_json(path, what="calibration table", max_bytes=MAX_TABLE_BYTES), label=str(path)
        )
    except (ReportError, UsageError):
        return None
    entries = table["entries"]
    return entries[0] if len(entries) == 1 else None


def _write_cached(path: Path, entry: dict[str, Any]) -> str:
    """Write the cache file atomically; '' on success, else why not (the run goes on with the value)."""
    try:
        make_state_dir(path.parent)
        write_json_atomic(path, {"schema": SCHEMA, "c": limits.SIGMA_C, "entries": [entry]}, indent=2)
    except (OSError, ReportError) as err:
        return f"could not cache the calibration in {path.parent} ({err}); it is measured again next run"
    return ""


def _shipped_match(fp: dict[str, Any], k: int) -> dict[str, Any] | None:
    """A shipped entry measured on this fingerprint (model, torch, ISA, threads) at K ≥ k, over rows and
    columns, else None: a table measured on another CPU of the same name, or for the row check alone,
    must not be trusted here."""
    try:
        shipped = load_table()["entries"]
    except (OSError, UsageError):  # no shipped table (a trimmed install): calibrate here instead
        return None
    for entry in shipped:
        same = all(entry.get(key) == fp.get(key) for key in ("device_model", "torch", "dtype", "checker"))
        if fp["device_kind"] == "cpu":
            same = (
                same
                and entry.get("cpu_capability") == fp["cpu_capability"]
                and entry.get("threads") == fp["threads"]
            )
        else:
            same = same and entry.get("compute_capability") == fp.get("compute_capability")
        if (
            same
            and entry.get("checks") == CHECKS
            and entry.get("method") == METHOD
            and int(entry["k_max"]) >= k
        ):
            return cast(dict[str, Any], entry)
    return None
