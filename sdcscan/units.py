"""Units (logical CPUs and GPUs), host inventory and cohort keys.

A cohort is the set of units whose digests must agree bit for bit: same device model and the same
software stack, thread count and ISA pins (docs/abft.md §4). Digests are only ever
compared inside a cohort.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sdcscan.errors import UsageError
from sdcscan.report.document import Host, UnitKind

if TYPE_CHECKING:  # the parent imports this module, and must not import torch
    from types import ModuleType

    import torch

# Environment variables that change which kernels run, and so the bits (docs/abft.md §4.2).
ISA_PINS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "FBGEMM_ENABLE_INSTRUCTIONS")


@dataclass(frozen=True, slots=True)
class Unit:
    """One thing a verdict is about: `cpu:N` (a logical CPU, pinned) or `cuda:N` (a GPU)."""

    id: str
    kind: UnitKind
    index: int
    model: str
    pci: str | None = None  # a GPU's PCI bus id, "0000:3b:00.0": how NVML and the kernel log name it

    def to_dict(self) -> dict[str, object]:
        doc: dict[str, object] = {"id": self.id, "kind": self.kind, "index": self.index, "model": self.model}
        return {**doc, "pci": self.pci} if self.pci else doc


@cache
def _cpuinfo() -> dict[int, dict[str, str]]:
    """Per logical CPU, the fields of /proc/cpuinfo (empty where the file does not exist)."""
    return read_cpuinfo(Path("/proc/cpuinfo"))


def read_cpuinfo(path: Path) -> dict[int, dict[str, str]]:
    """Per logical CPU, the fields of a /proc/cpuinfo file (empty where it cannot be read)."""
    cpus: dict[int, dict[str, str]] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return cpus
    for block in text.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        if "processor" in fields and fields["processor"].isdigit():
            cpus[int(fields["processor"])] = fields
    return cpus


def cpu_model(cpu: int | None = None) -> str:
    """The model name of a logical CPU (or of the first one)."""
    info = _cpuinfo()
    fields = info.get(cpu if cpu is not None else min(info, default=0), {})
    return fields.get("model name") or fields.get("Model") or platform.processor() or "unknown CPU"


def cpu_flags() -> list[str]:
    info = _cpuinfo()
    fields = info.get(min(info, default=0), {})
    return sorted((fields.get("flags") or fields.get("Features") or "").split())


def device_model(device: torch.device | str) -> str:
    """A stable name for the model of a torch device, used to key calibration tables and cohorts."""
    if getattr(device, "type", str(device)) == "cuda":
        import torch

        return str(torch.cuda.get_device_name(device))
    return cpu_model()


def cpu_units() -> list[Unit]:
    """Every logical CPU this process may run on (respects taskset and cgroup cpusets)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = list(range(os.cpu_count() or 1))
    return [Unit(f"cpu:{c}", "cpu", c, cpu_model(c)) for c in cpus]


def _may_have_gpus() -> bool:
    """Cheap check before importing torch: NVIDIA's driver exposes these when a GPU is present."""
    return (
        os.path.exists("/proc/driver/nvidia/gpus")
        or os.path.exists("/dev/nvidia0")
        or os.path.exists("/dev/kfd")
    )


def gpu_units() -> list[Unit]:
    """Every CUDA device torch sees (none when torch has no CUDA)."""
    if not _may_have_gpus():
        return []  # spares the parent process a torch import on CPU-only hosts
    import torch

    if not torch.cuda.is_available():
        return []
    return [
        Unit(f"cuda:{i}", "cuda", i, str(torch.cuda.get_device_name(i)), _pci_bus_id(torch, i))
        for i in range(torch.cuda.device_count())
    ]


def _pci_bus_id(torch: ModuleType, index: int) -> str | None:
    """CUDA device `index`'s PCI location as the kernel and NVML write it, or None (an old torch)."""
    props = torch.cuda.get_device_properties(index)
    try:
        return f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except (AttributeError, TypeError, ValueError):
        return None


def discover_units() -> list[Unit]:
    return cpu_units() + gpu_units()


def parse_units_spec(spec: str, *, what: str = "--units") -> list[str]:
    """The parts of a unit selection: `["all"]`, or names such as `cpu`, `cuda`, `cpu:3`.

    Checked on its own, before any unit is looked up, so that the command line can refuse a blank
    selection before any work starts: `--units ''` must not silently mean every unit.

    Raises:
        UsageError: `spec` is blank or only commas (`''`, `,`, ` , `): it names no unit.
    """
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise UsageError(
            f"{what} {spec!r} names no unit (give all, cpu, cuda, or a list such as cpu:0,cpu:3)"
        )
    return parts


def select_units(available: list[Unit], spec: str) -> list[Unit]:
    """Units named by `spec`: `all`, `cpu`, `cuda`, or a list such as `cpu:0,cpu:3,cuda:1`.

    Raises:
        UsageError: `spec` names no unit, a named unit does not exist on this host, or the selection
            is empty (`cuda` on a host without GPUs).
    """
    parts = parse_units_spec(spec)
    by_id = {u.id: u for u in available}
    if parts == ["all"]:
        chosen = list(available)
    else:
        chosen = []
        for part in parts:
            if part in ("cpu", "cuda"):
                chosen.extend(u for u in available if u.kind == part)
            elif part in by_id:
                chosen.append(by_id[part])
            else:
                known = ", ".join(u.id for u in available[:8]) + (", …" if len(available) > 8 else "")
                raise UsageError(f"unknown unit {part!r} (this host has: {known})")
    unique = list(dict.fromkeys(chosen))
    if not unique:
        raise UsageError(f"--units {spec!r} selects no unit")
    return unique


def cohort_fields(unit: Unit, threads: int) -> dict[str, object]:
    """Everything that must match for two units to produce identical digests."""
    import torch

    fields: dict[str, object] = {
        "kind": unit.kind,
        "model": unit.model,
        "torch": str(
            torch.__version__
        ),  # a str subclass: pickled as such, it would import torch in the parent
        "threads": threads,
        "pins": {k: os.environ[k] for k in ISA_PINS if k in os.environ},
    }
    fields["class"] = unit_class(unit)  # the plan's case sizes depend on it (profile `class_params`)
    if unit.kind == "cpu":
        fields["capability"] = torch.backends.cpu.get_cpu_capability()
        fields["flags_sha256"] = hashlib.sha256(" ".join(cpu_flags()).encode()).hexdigest()[:16]
    else:
        props = torch.cuda.get_device_properties(unit.index)
        fields["sm_count"] = props.multi_processor_count
        fields["cuda"] = torch.version.cuda
        fields["cudnn"] = torch.backends.cudnn.version()
    return fields


# CPU unit classes, slowest first: what sets a case's duration on a CPU is whether bf16 and int8
# products have units of their own (AVX-512 BF16, AMX) or are emulated (on AVX2, 100-1000x slower).
CPU_CLASSES = ("baseline", "avx2", "avx512", "avx512-bf16", "amx")
# oneDNN ISA pins (`ONEDNN_MAX_CPU_ISA`) that hold a unit below its hardware's class.
_ONEDNN_CAPS = {
    "SSE41": "baseline",
    "AVX": "baseline",
    "AVX2": "avx2",
    "AVX2_VNNI": "avx2",
    "AVX2_VNNI_2": "avx2",
    "AVX512_CORE": "avx512",
    "AVX512_CORE_VNNI": "avx512",
    "AVX512_CORE_BF16": "avx512-bf16",
    "AVX10_1_512": "avx512-bf16",
}


def cpu_class(capability: str, flags: Sequence[str], onednn_isa: str | None = None) -> str:
    """The class of a CPU unit, from torch's ISA (which `ATEN_CPU_CAPABILITY` lowers), the CPU's flags and
    a oneDNN pin: one of `CPU_CLASSES`. Anything that is neither AVX2 nor AVX-512 x86 is `baseline`."""
    cap = capability.lower()
    if cap == "avx2":
        found = "avx2"
    elif not cap.startswith("avx512"):
        found = "baseline"
    elif {"amx_bf16", "amx_int8"} <= set(flags):
        found = "amx"
    elif "avx512_bf16" in flags:
        found = "avx512-bf16"
    else:
        found = "avx512"
    pinned = _ONEDNN_CAPS.get((onednn_isa or "").upper())
    if pinned is not None and CPU_CLASSES.index(pinned) < CPU_CLASSES.index(found):
        return pinned
    return found


def unit_class(unit: Unit) -> str:
    """What a unit's plan is sized for: a CPU class (`cpu_class`) or a GPU's compute capability (`sm90`)."""
    import torch

    if unit.kind == "cpu":
        return cpu_class(
            torch.backends.cpu.get_cpu_capability(), cpu_flags(), os.environ.get("ONEDNN_MAX_CPU_ISA")
        )
    major, minor = torch.cuda.get_device_capability(unit.index)
    return f"sm{major}{minor}"


def cohort_key(fields: Mapping[str, object]) -> str:
    """A short stable id for a cohort: the hash of its fields."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")  # systemd, then D-Bus (same value)


def machine_id(paths: tuple[str, ...] = MACHINE_ID_FILES) -> str | None:
    """A short hash of the machine's boot-independent identity, or None when it cannot be read.

    `sdcscan compare` uses it to keep apart two machines that share a hostname. The raw id is never
    written: it is a secret-ish value systemd asks not to expose (machine-id(5)), so only 16 hex digits
    of a salted SHA-256 leave the host.
    """
    for path in paths:
        try:
            raw = Path(path).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if raw and raw != "uninitialized":
            return hashlib.sha256(b"sdcscan machine id\0" + raw.encode()).hexdigest()[:16]
    return None


def host_inventory() -> Host:
    """Facts about the host for the report (no torch needed)."""
    try:
        mem_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        mem_bytes = None
    return {
        "hostname": socket.gethostname(),
        "machine_id": machine_id(),
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "memory_bytes": mem_bytes,
        "os": platform.system(),
        "kernel": platform.release(),
        "machine": platform.machine(),
    }


def software_versions() -> dict[str, object]:
    import torch

    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "pins": {k: os.environ[k] for k in ISA_PINS if k in os.environ},
    }
