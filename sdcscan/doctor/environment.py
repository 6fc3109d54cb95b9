"""The doctor's first step: what this stack is, and which optional evidence sources can be read.

Versions (sdcscan, Python, torch, CUDA, the NVIDIA driver), the CPU's ISA as torch dispatches it and
as the CPU reports it, the units found, and each optional source: NVML, EDAC, machine-check counts,
the kernel log, the state directory and the history database. A source that cannot be read is not a
failure (a VM has no EDAC); it is listed with what to grant or install.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from typing_extensions import TypedDict

from sdcscan import __version__
from sdcscan.errors import SdcscanError
from sdcscan.files import default_state_dir
from sdcscan.outputs import history
from sdcscan.sentinel.kernel_log import read_kernel_log
from sdcscan.telemetry.sampler import default_sources
from sdcscan.telemetry.sources import SourceUnavailable
from sdcscan.units import Unit, cpu_flags, cpu_model, software_versions

# The CPU features that decide which kernels torch and oneDNN pick (and so the bits of a float result).
ISA_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)
KERNEL_LOG_WINDOW_S = 60.0


class SourceState(TypedDict):
    """Whether an optional evidence source can be read, and what it said (or what to grant)."""

    readable: bool
    note: str | None


def describe(found: Sequence[Unit], chosen: Sequence[Unit]) -> dict[str, object]:
    """Versions, ISA, units and sources, as the summary shows them."""
    software = software_versions()
    flags = set(cpu_flags())
    return {
        "versions": {
            "sdcscan": __version__,
            "python": software["python"],
            "torch": software["torch"],
            "cuda": software["cuda"],
            "driver": _driver_version() if any(u.kind == "cuda" for u in found) else None,
        },
        "isa": {
            "cpu_model": cpu_model(),
            "torch_cpu_capability": software["cpu_capability"],
            "flags": [f for f in ISA_FLAGS if f in flags],
            "pins": software["pins"],
        },
        "units_found": {kind: sum(u.kind == kind for u in found) for kind in ("cpu", "cuda")},
        "units": [{"id": u.id, "model": u.model} for u in chosen],
        "sources": sources([u.id for u in chosen]),
    }


def sources(unit_ids: Sequence[str]) -> dict[str, SourceState]:
    """Each optional source: whether it is readable, what it said or what to grant."""
    out: dict[str, SourceState] = {}
    for source in default_sources(unit_ids):
        if source.name == "cpu":
            continue  # psutil is a dependency: always there
        try:
            source.read()
            out[source.name] = {"readable": True, "note": "; ".join(source.notes.values()) or None}
        except SourceUnavailable as err:
            out[source.name] = {"readable": False, "note": str(err)}
    out["kernel_log"] = _kernel_log()
    out["state_dir"] = _state_dir()
    out["history"] = _history()
    return out


def _kernel_log() -> SourceState:
    now = time.time()
    read = read_kernel_log(now - KERNEL_LOG_WINDOW_S, now)
    return {"readable": bool(read.sources), "note": "; ".join([*read.sources, *read.notes]) or None}


def _state_dir() -> SourceState:
    path = default_state_dir()
    existing = next((p for p in (path, *path.parents) if p.exists()), path)
    writable = os.access(existing, os.W_OK | os.X_OK)
    note = (
        f"{path}" if writable else f"{existing} is not writable: set XDG_STATE_HOME to a writable directory"
    )
    return {"readable": writable, "note": note}


def _history() -> SourceState:
    path = history.default_history_path()
    try:
        history.check_health(path)
    except SdcscanError as err:
        return {"readable": False, "note": str(err)}
    return {"readable": True, "note": f"{path}" if path.exists() else f"{path} (created by the first run)"}


def _driver_version() -> str | None:
    """The NVIDIA driver's version through NVML, or None without it (no context is created)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
    except Exception:  # NVML missing or refusing: the sources list says why
        return None
    return version.decode() if isinstance(version, bytes) else str(version)
