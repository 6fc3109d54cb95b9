"""Calibration of V-ABFT's e_max: measure it on a device, write it to a table, look it up for `gemm_fp`.

e_max depends on the device's GEMM kernels (blocking, split-K, FMA, accumulation precision), the dtype
and the checker's precision, so it is measured per platform (docs/abft.md §3.2): many clean
rows per inner dimension K over several input distributions, e_max = margin × max_rows |D_i| / T_i(e=1).
The measurement uses the very functions `gemm_fp` checks with, so the two cannot drift apart.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from sdcscan.checks import vabft
from sdcscan.errors import ReportError, UsageError
from sdcscan.files import parse_json, read_json, write_json_atomic
from sdcscan.timefmt import iso_utc
from sdcscan.workloads.calibration_table import MAX_TABLE_BYTES, SCHEMA, check_schema

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
# Checker precisions per GEMM dtype (docs/abft.md §3.2): fp32 in fp32 (cheap) or fp64; low precision in
# fp32 from the exact low-precision operands.
CHECKERS = {
    "float32": ["float32", "float64"],
    "float64": ["float64"],
    "bfloat16": ["float32"],
    "float16": ["float32"],
}
DEFAULT_K = (256, 1024, 4096)
DEFAULT_ROWS = 10_000
DEFAULT_MARGIN = 3.0
DEFAULT_MN = 256  # rows and columns of each calibration GEMM


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


# (shape, generator, dtype) -> a matrix of GEMM operands; not telemetry's Sampler
OperandSampler = Callable[[tuple[int, int], torch.Generator, torch.dtype], torch.Tensor]
DISTRIBUTIONS: dict[str, OperandSampler] = {
    "abs_normal": lambda s, g, dt: (
        torch.randn(s, generator=g, dtype=dt).abs() + 0.5
    ),  # the artifact's default
    "normal": lambda s, g, dt: torch.randn(s, generator=g, dtype=dt),
    "shifted_normal": lambda s, g, dt: torch.randn(s, generator=g, dtype=dt) + 1.0,
    "uniform": lambda s, g, dt: torch.rand(s, generator=g, dtype=dt) * 2.0 - 1.0,
    "student_t3": _student_t3,
    "llm_like": _llm_like,
}


def sample(dist: str, shape: tuple[int, int], g: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """A (rows, cols) CPU matrix from a named distribution, rounded once to `dtype`."""
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    return DISTRIBUTIONS[dist](shape, g, wide).to(dtype)


def needed_e_max(a: torch.Tensor, b: torch.Tensor, c_out: torch.Tensor, checker: torch.dtype) -> float:
    """max_i |D_i| / T_i(e_max = 1) for one clean GEMM: the e_max this case needed."""
    return vabft.row_check(a, c_out, vabft.encode(b, checker), 1.0).ratio()


def calibrate_dtype(
    dtype_name: str,
    *,
    device: torch.device,
    rows: int,
    k_values: tuple[int, ...],
    mn: int = DEFAULT_MN,
    seed: int = 0,
) -> tuple[dict[str, dict[int, float]], int]:
    """Needed e_max per checker and K for one GEMM dtype over every distribution.

    Args:
        dtype_name: key of DTYPES.  device: where the GEMM runs.  rows: clean rows in total (≥ this many).
        k_values: inner dimensions.  mn: M = N of each GEMM.  seed: input seed.
    Returns:
        ({checker: {K: needed e_max}}, number of clean rows measured).
    """
    dtype = DTYPES[dtype_name]
    m = min(mn, max(1, rows))
    cells = len(k_values) * len(DISTRIBUTIONS)
    trials = max(1, math.ceil(rows / (cells * m)))
    g = torch.Generator().manual_seed(seed)
    out: dict[str, dict[int, float]] = {chk: {} for chk in CHECKERS[dtype_name]}
    for k in k_values:
        for dist in DISTRIBUTIONS:
            for _ in range(trials):
                a = sample(dist, (m, k), g, dtype).to(device)
                b = sample(dist, (k, mn), g, dtype).to(device)
                c_out = a @ b
                for chk in out:
                    need = needed_e_max(a, b, c_out, DTYPES[chk])
                    out[chk][k] = max(out[chk].get(k, 0.0), need)
    return out, trials * cells * m


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
            needed = max(per_k.values())
            entries.append(_entry(model, device, name, chk, per_k, needed, margin, n_rows))
    return {"schema": SCHEMA, "c": vabft.SIGMA_C, "entries": entries}


def _entry(
    model: str,
    device: torch.device,
    dtype: str,
    chk: str,
    per_k: dict[int, float],
    needed: float,
    margin: float,
    rows: int,
) -> dict[str, Any]:
    """One table row: the key fields first, then how it was measured."""
    return {
        "device_model": model,
        "torch": torch.__version__,
        "dtype": dtype,
        "checker": chk,
        "e_max": float(f"{needed * margin:.3g}"),
        "needed": needed,
        "margin": margin,
        "k_max": max(per_k),
        "needed_per_k": {str(k): v for k, v in sorted(per_k.items())},
        "rows": rows,
        "distributions": list(DISTRIBUTIONS),
        "device_kind": device.type,
        "cpu_capability": torch.backends.cpu.get_cpu_capability() if device.type == "cpu" else None,
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "measured_utc": iso_utc(time.time()),
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
            text = resources.files("sdcscan").joinpath("data/calibration.json").read_text(encoding="utf-8")
            data = parse_json(text, what="calibration table", label=label)
    except ReportError as err:
        raise UsageError(str(err)) from None  # a bad --calibration is a usage error (exit 2)
    # The schema only: `calibrate -o` merges into files whose other entries it need not use. A run checks
    # every entry before its workers start (calibration_table.check_table_file).
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
