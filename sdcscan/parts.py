"""The physical part behind a unit, for the person who replaces it: a CPU's socket, physical core, SMT
siblings, microcode and PPIN; a GPU's UUID, serial, VBIOS and PCI bus id.

A unit id (`cpu:3`, `cuda:1`) names a logical CPU or a CUDA ordinal, which change with SMT, cpusets
and CUDA_VISIBLE_DEVICES; a return to the vendor (RMA) needs what is printed on or burnt into the part.
OpenDCDiag's report names socket, core and microcode, DCGM's names the GPU's serial and UUID: sdcscan's
report does too. Every field is read where the host allows and left out where it does not (a PPIN is
root-only, NVML may be missing): identity is evidence beside the verdict, never a reason for one.

Torch-free: the parent process reads it while the workers run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import TypeVar, cast

from sdcscan.report.document import Part
from sdcscan.units import read_cpuinfo

CPU_SYSFS = Path("/sys/devices/system/cpu")
CPUINFO = Path("/proc/cpuinfo")

_Value = TypeVar("_Value")


def parts_of(units: Sequence[tuple[str, int, str | None]]) -> list[Part]:
    """The part behind each unit `(kind, index, pci)`: `cpu_part`, or `gpu_parts` in one NVML session."""
    gpus = iter(gpu_parts([pci for kind, _, pci in units if kind != "cpu"]))
    return [cpu_part(index) if kind == "cpu" else next(gpus) for kind, index, _ in units]


def cpu_part(cpu: int, *, sysfs: Path = CPU_SYSFS, cpuinfo: Path = CPUINFO) -> Part:
    """Logical CPU `cpu`'s socket, physical core, SMT siblings (itself included), microcode and PPIN.

    From the kernel's topology files (sysfs) and /proc/cpuinfo's microcode line; the PPIN (Protected
    Processor Inventory Number, a per-package serial on Intel and AMD server parts) from
    `topology/ppin`, which Linux 6.4+ offers to root only.
    """
    topology = sysfs / f"cpu{cpu}" / "topology"
    part: Part = {}
    socket, core = _read_int(topology / "physical_package_id"), _read_int(topology / "core_id")
    if socket is not None:
        part["socket"] = socket
    if core is not None:
        part["core"] = core
    siblings = _read_text(topology / "thread_siblings_list")
    if siblings:
        part["smt_siblings"] = cpu_list(siblings)
    microcode = _read_text(sysfs / f"cpu{cpu}" / "microcode" / "version") or _cpuinfo_field(
        cpuinfo, cpu, "microcode"
    )
    if microcode:
        part["microcode"] = microcode
    ppin = _read_text(topology / "ppin")
    if ppin and _is_hex(ppin) and int(ppin, 16) != 0:  # 0: the kernel read no PPIN (not enabled)
        part["ppin"] = ppin
    return part


def gpu_parts(pcis: Sequence[str | None], *, nvml: ModuleType | None = None) -> list[Part]:
    """Each GPU's UUID, serial, VBIOS and board part number through NVML, found by its PCI bus id (what
    CUDA and NVML agree on whatever the device order or CUDA_VISIBLE_DEVICES).

    A GPU without a bus id gets nothing from NVML: guessing by index could name another board's serial,
    which would send the wrong part back. Without NVML (the optional `gpu` extra) only the bus id is known.
    """
    parts: list[Part] = [{"pci": pci} if pci else {} for pci in pcis]
    nv = nvml if nvml is not None else _import_nvml()
    if nv is None or not any(pcis):
        return parts
    try:
        nv.nvmlInit()
    except Exception:  # no driver, no permission: identity stays what torch gave
        return parts
    try:
        for pci, part in zip(pcis, parts, strict=True):
            handle = _handle_of(nv, pci) if pci else None
            if handle is not None:
                part.update(_board(nv, handle))
    finally:
        _ask(nv.nvmlShutdown)
    return parts


def _handle_of(nv: ModuleType, pci: str) -> object | None:
    return _ask(lambda: nv.nvmlDeviceGetHandleByPciBusId(pci))


def _board(nv: ModuleType, handle: object) -> Part:
    """What NVML says of one board; an unsupported query (consumer boards have no serial) is left out."""
    fields = {
        "uuid": _text(_ask(lambda: nv.nvmlDeviceGetUUID(handle))),
        "serial": _text(_ask(lambda: nv.nvmlDeviceGetSerial(handle))),
        "vbios": _text(_ask(lambda: nv.nvmlDeviceGetVbiosVersion(handle))),
        "board_part": _text(_ask(lambda: nv.nvmlDeviceGetBoardPartNumber(handle))),
    }
    return cast(Part, {key: value for key, value in fields.items() if value})


def describe(kind: str, part: Part) -> str:
    """The part in one phrase, for a finding: `GPU serial 1321…, UUID GPU-…, PCI 0000:3b:00.0`; empty when
    nothing is known."""
    if kind == "cuda":
        words = [
            f"{label} {value}"
            for label, value in (
                ("serial", part.get("serial")),
                ("UUID", part.get("uuid")),
                ("PCI", part.get("pci")),
                ("VBIOS", part.get("vbios")),
            )
            if value
        ]
        return "GPU " + ", ".join(words) if words else ""
    siblings = ",".join(str(c) for c in part.get("smt_siblings", []))
    words = [
        f"{label} {value}"
        for label, value in (
            ("socket", part.get("socket")),
            ("physical core", part.get("core")),
            ("logical CPUs", siblings),
            ("PPIN", part.get("ppin")),
            ("microcode", part.get("microcode")),
        )
        if value is not None and value != ""
    ]
    return "CPU " + ", ".join(words) if words else ""


def cpu_list(text: str) -> list[int]:
    """The kernel's CPU list format (`0-3,8,10-11`) as numbers."""
    cpus: list[int] = []
    for piece in text.strip().split(","):
        first, _, last = piece.partition("-")
        if first.strip().isdigit() and (not last or last.strip().isdigit()):
            cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def _cpuinfo_field(cpuinfo: Path, cpu: int, key: str) -> str | None:
    """`key`'s value in /proc/cpuinfo's block of processor `cpu`."""
    return _cpuinfo(cpuinfo).get(cpu, {}).get(key) or None


@lru_cache(maxsize=4)
def _cpuinfo(path: Path) -> dict[int, dict[str, str]]:
    """`units.read_cpuinfo`, once per file: a 192-CPU host's report asks 192 times."""
    return read_cpuinfo(path)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip() or None
    except OSError:  # absent, or root-only (ppin)
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    return int(text) if text and text.lstrip("-").isdigit() and int(text) >= 0 else None


def _is_hex(text: str) -> bool:
    digits = text[2:] if text.lower().startswith("0x") else text
    return bool(digits) and all(c in "0123456789abcdefABCDEF" for c in digits)


def _text(value: object) -> str | None:
    """NVML strings arrive as str or bytes by pynvml's version; blank or NUL-padded means unknown."""
    if isinstance(value, bytes):
        value = value.decode("ascii", errors="replace")
    if not isinstance(value, str):
        return None
    return value.strip().strip("\x00").strip() or None


def _ask(query: Callable[[], _Value]) -> _Value | None:
    """One NVML query; an unsupported one (consumer boards have no serial) is simply unknown."""
    try:
        return query()
    except Exception:
        return None


def _import_nvml() -> ModuleType | None:
    try:
        import pynvml  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        return None
    return cast(ModuleType, pynvml)
