"""Telemetry sources: psutil (CPU), Linux EDAC, machine checks, NVML (GPU).

Each source's `read()` returns {scope: {metric: value or None}} where scope is "host" or a unit id.
A source that does not exist on this machine raises `SourceUnavailable` with a sentence saying
why; one that exists but lacks a metric (no temperature sensors, power not supported on this GPU)
returns None for it and may leave a note in `notes`. Paths and modules are injectable for tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TypeVar

Reading = dict[str, dict[str, float | None]]
_Metric = TypeVar("_Metric")  # what one psutil or os query returns

# Counters whose rise during a run is hardware evidence (a finding) or worth reporting.
UNCORRECTABLE = (
    "edac_ue_count",
    "mce_count",
    "ecc_uncorrected",
    "retired_pages_dbe",
    "remapped_rows_uncorrectable",
)
CORRECTED = ("edac_ce_count", "ecc_corrected", "retired_pages_sbe", "remapped_rows_correctable")
CPU_TEMP_CHIPS = ("coretemp", "k10temp", "zenpower", "cpu_thermal", "cpu-thermal", "soc_thermal")


class SourceUnavailable(Exception):
    """This source does not exist here; the message says why, for the report's notes."""


class Source:
    """Base of the sources: a name, `read()`, and the shape of an all-null reading."""

    name = "source"
    host_metrics: tuple[str, ...] = ()
    unit_metrics: tuple[str, ...] = ()
    unit_prefix = ""

    def __init__(self) -> None:
        self.notes: dict[str, str] = {}

    def read(self) -> Reading:
        raise NotImplementedError

    def empty(self, unit_ids: Sequence[str]) -> Reading:
        """Null values for every metric this source would give: a missing source is null, not absent."""
        out: Reading = {}
        if self.host_metrics:
            out["host"] = dict.fromkeys(self.host_metrics)
        for unit in unit_ids:
            if self.unit_metrics and unit.startswith(self.unit_prefix):
                out[unit] = dict.fromkeys(self.unit_metrics)
        return out


class CpuSource(Source):
    """Per logical CPU frequency and load; host load average and CPU temperature (psutil)."""

    name = "cpu"
    host_metrics = ("load_1m", "cpu_temp_c")
    unit_metrics = ("freq_mhz", "load_pct")
    unit_prefix = "cpu:"

    def __init__(self, cpus: Sequence[int], *, psutil_module: ModuleType | None = None) -> None:
        super().__init__()
        self.cpus = list(cpus)
        self._ps = psutil_module
        self._primed = False

    def read(self) -> Reading:
        ps = self._ps or _import_psutil()
        freqs = _safe(lambda: ps.cpu_freq(percpu=True)) or []
        # cpu_percent compares with the previous call: the first call's numbers mean nothing.
        loads = _safe(lambda: ps.cpu_percent(interval=None, percpu=True)) or []
        loads, self._primed = (loads if self._primed else []), True
        if not freqs:
            self.notes["freq"] = "cpu: the kernel exposes no CPU frequency (cpufreq missing, common in VMs)"
        out: Reading = {"host": {"load_1m": _safe(lambda: os.getloadavg()[0]), "cpu_temp_c": self._temp(ps)}}
        for cpu in self.cpus:
            # Some VMs report one frequency for the whole machine.
            freq = freqs[cpu] if cpu < len(freqs) else (freqs[0] if len(freqs) == 1 else None)
            out[f"cpu:{cpu}"] = {
                "freq_mhz": round(freq.current, 1) if freq is not None and freq.current else None,
                "load_pct": loads[cpu] if cpu < len(loads) else None,
            }
        return out

    def _temp(self, ps: ModuleType) -> float | None:
        sensors = _safe(lambda: ps.sensors_temperatures()) if hasattr(ps, "sensors_temperatures") else None
        if not sensors:
            self.notes["temp"] = "cpu: no temperature sensors exposed (no hwmon driver, or a VM/container)"
            return None
        chips = [c for c in CPU_TEMP_CHIPS if c in sensors] or list(sensors)
        temps = [t.current for c in chips for t in sensors[c] if t.current is not None]
        return max(temps) if temps else None


class EdacSource(Source):
    """Linux EDAC memory-controller error counts, summed over controllers (/sys/devices/system/edac/mc)."""

    name = "edac"
    host_metrics = ("edac_ce_count", "edac_ue_count")

    def __init__(self, sysfs: str | os.PathLike[str] = "/sys") -> None:
        super().__init__()
        self.root = Path(sysfs) / "devices/system/edac/mc"

    def read(self) -> Reading:
        mcs = sorted(self.root.glob("mc[0-9]*")) if self.root.is_dir() else []
        if not mcs:
            raise SourceUnavailable(
                "no memory controllers under /sys/devices/system/edac/mc "
                "(EDAC driver not loaded, not supported, or a VM): memory errors are not visible to sdcscan"
            )
        ce = [_read_int(mc / "ce_count") for mc in mcs]
        ue = [_read_int(mc / "ue_count") for mc in mcs]
        return {"host": {"edac_ce_count": _sum(ce), "edac_ue_count": _sum(ue)}}


class MceSource(Source):
    """Machine-check exceptions since boot, from the MCE line of /proc/interrupts.

    /sys/devices/system/machinecheck holds only configuration, not counts, so /proc/interrupts is
    the portable counter. It is reported for the host, summed over CPUs, because Intel broadcasts a
    machine check to every CPU: the per-CPU columns do not say which core erred.
    """

    name = "mce"
    host_metrics = ("mce_count",)

    def __init__(self, procfs: str | os.PathLike[str] = "/proc") -> None:
        super().__init__()
        self.path = Path(procfs) / "interrupts"

    def read(self) -> Reading:
        try:
            lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as err:
            raise SourceUnavailable(f"cannot read {self.path}: {err.strerror or err}") from None
        for line in lines:
            fields = line.split()
            if fields and fields[0] == "MCE:":
                counts = [int(f) for f in fields[1:] if f.isdigit()]
                return {"host": {"mce_count": float(sum(counts))}}
        raise SourceUnavailable("the kernel exposes no machine-check count (no MCE line in /proc/interrupts)")


def _import_psutil() -> ModuleType:
    try:
        import psutil
    except ImportError:
        raise SourceUnavailable("psutil is not installed") from None
    return psutil


def _safe(fn: Callable[[], _Metric]) -> _Metric | None:
    """One metric's failure (permission, unsupported platform) must not lose the others."""
    try:
        return fn()
    except Exception:
        return None


def _read_int(path: Path) -> float | None:
    try:
        return float(int(path.read_text(encoding="ascii").strip()))
    except (OSError, ValueError):
        return None


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(sum(known)) if known else None
