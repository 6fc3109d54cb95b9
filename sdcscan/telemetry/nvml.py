"""GPU telemetry through NVML (`nvidia-ml-py`, the optional `gpu` extra): utilisation, temperature, clocks,
power against the enforced limit, ECC counts, retired pages, remapped rows and throttle reasons, per
`cuda:N` unit.

A metric the GPU does not support (power on some boards, ECC on consumer parts) is None; NVML
missing altogether makes the whole source unavailable with a note, never a failure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import SupportsFloat, SupportsIndex, TypeVar, cast

from sdcscan.telemetry.sources import Reading, Source, SourceUnavailable

_Answer = TypeVar("_Answer")  # what an NVML query returns

GPU_METRICS = (
    "util_pct",
    "power_limit_w",
    "temp_c",
    "clock_sm_mhz",
    "clock_mem_mhz",
    "power_w",
    "ecc_corrected",
    "ecc_uncorrected",
    "retired_pages_sbe",
    "retired_pages_dbe",
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "remapped_rows_pending",
    "remapped_rows_failure",
    "throttle_reasons",
)


class NvmlSource(Source):
    """Per-GPU NVML readings. `nvml` is the pynvml module (injectable so tests can fake it).

    pynvml ships no types: its functions and constants are untyped attributes of the module, and a
    device handle is an opaque value (`object` here) that is only passed back to them.
    """

    name = "nvml"
    unit_metrics = GPU_METRICS
    unit_prefix = "cuda:"

    def __init__(self, gpus: Sequence[int], *, nvml: ModuleType | None = None) -> None:
        super().__init__()
        self.gpus = list(gpus)
        self._nvml = nvml
        self._handles: dict[int, object] | None = None

    def _init(self) -> dict[int, object]:
        if self._handles is not None:
            return self._handles
        if self._nvml is None:
            self._nvml = _import_pynvml()
        nv = self._nvml
        try:
            nv.nvmlInit()
            self._handles = {g: _handle(nv, g) for g in self.gpus}
        except Exception as err:
            raise SourceUnavailable(f"NVML could not start: {err}") from None
        if os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID" and nv.nvmlDeviceGetCount() > 1:
            self.notes["order"] = (
                "nvml: GPUs matched to cuda:N by index; "
                "set CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA and NVML number them alike"
            )
        return self._handles

    def read(self) -> Reading:
        handles = self._init()
        nv = self._nvml
        assert nv is not None  # _init imported it
        return {f"cuda:{g}": _gpu_metrics(nv, h) for g, h in handles.items()}


def _handle(nv: ModuleType, gpu: int) -> object:
    """NVML handle of CUDA ordinal `gpu`, honouring CUDA_VISIBLE_DEVICES (indices or GPU-UUIDs)."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if gpu < len(visible):
        token = visible[gpu]
        if token.isdigit():
            return nv.nvmlDeviceGetHandleByIndex(int(token))
        return nv.nvmlDeviceGetHandleByUUID(token)
    return nv.nvmlDeviceGetHandleByIndex(gpu)


def _gpu_metrics(nv: ModuleType, h: object) -> dict[str, float | None]:
    # (correctable, uncorrectable, pending, failed)
    remapped: tuple[object, ...] | None = _call(lambda: nv.nvmlDeviceGetRemappedRows(h))
    return {
        "util_pct": _try(lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu),  # % of time a kernel ran
        "power_limit_w": _try(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),  # mW -> W
        "temp_c": _try(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
        "clock_sm_mhz": _try(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
        "clock_mem_mhz": _try(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
        "power_w": _try(lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),  # mW -> W
        "ecc_corrected": _try(lambda: _ecc(nv, h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED)),
        "ecc_uncorrected": _try(lambda: _ecc(nv, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)),
        "retired_pages_sbe": _try(
            lambda: len(
                nv.nvmlDeviceGetRetiredPages(h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
            )
        ),
        "retired_pages_dbe": _try(
            lambda: len(nv.nvmlDeviceGetRetiredPages(h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR))
        ),
        "remapped_rows_correctable": _num(remapped[0]) if remapped else None,
        "remapped_rows_uncorrectable": _num(remapped[1]) if remapped else None,
        "remapped_rows_pending": _num(remapped[2]) if remapped else None,
        "remapped_rows_failure": _num(remapped[3]) if remapped else None,
        "throttle_reasons": _try(lambda: _throttle(nv, h)),
    }


def _ecc(nv: ModuleType, h: object, kind: int) -> object:
    # Volatile: since the driver loaded. Aggregate counts would hide which errors happened during this run
    # only if the driver reloaded; we report the before/after delta either way.
    return nv.nvmlDeviceGetTotalEccErrors(h, kind, nv.NVML_VOLATILE_ECC)


def _throttle(nv: ModuleType, h: object) -> object:
    # Renamed "clocks event reasons" in newer NVML; older bindings only have the throttle name.
    fn = (
        getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    return fn(h)


def _import_pynvml() -> ModuleType:
    try:
        import pynvml  # provided by nvidia-ml-py
    except ImportError:
        raise SourceUnavailable("NVML bindings missing: pip install 'sdcscan[gpu]' (nvidia-ml-py)") from None
    return cast(ModuleType, pynvml)


def _try(fn: Callable[[], object]) -> float | None:
    """NVMLError_NotSupported and friends -> None: the metric does not exist on this GPU."""
    return _num(_call(fn))


def _call(fn: Callable[[], _Answer]) -> _Answer | None:
    """An NVML query's raw answer, or None where this GPU does not support it."""
    try:
        return fn()
    except Exception:
        return None


def _num(value: object) -> float | None:
    if value is None or isinstance(value, str):
        return None
    if not isinstance(value, SupportsFloat | SupportsIndex | bytes | bytearray):
        # what float() refuses, refused as float() does (NVML answers numbers)
        raise TypeError(f"float() argument must be a string or a real number, not '{type(value).__name__}'")
    return float(value)
