"""Kernel messages that are evidence about hardware, parsed into `KernelEvent`s; pure, no I/O.

Four formats, each written by one place in the kernel or a driver (cited at its parser):
user-space segfaults and traps (which name the program, and since Linux 6.2 the CPU it most
likely ran on), machine checks (which name the CPU whose bank reported the error) and NVIDIA Xid
errors (which name the GPU by PCI bus id). A message that is none of these is None; one that
starts like one of them but cannot be read (truncated, garbled) is "skip", to be counted, never
raised: kernel logs are full of lines cut short by rate limits, lost continuations and corrupted
ring buffers, and a parser that trips on them would hide the evidence in the rest.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

KINDS = ("segfault", "trap", "mce", "xid")
# printk limits one message to 1-2 KiB, depending on the version: a longer "message" is not one the
# kernel wrote, and is not worth running regular expressions over.
MAX_MESSAGE_CHARS = 4096
MAX_DETAIL_CHARS = 200  # an Xid's free text can be long; reports keep a bounded excerpt


@dataclass(frozen=True, slots=True)
class KernelEvent:
    """One hardware-relevant kernel message: what happened, when, on which CPU or GPU, to which program."""

    kind: str  # one of KINDS
    time: float | None  # seconds since the epoch, when the source gives it
    cpu: int | None  # logical CPU: segfault "likely on CPU N", MCE "CPU N"; None when the line has none
    comm: str | None = None  # process name (segfault/trap), or Xid's name= when given
    pid: int | None = None
    binary: str | None = None  # the mapping named in " in X[...]" (e.g. "libc.so.6"); None if absent
    detail: str = ""  # "error 4", trap kind, "bank 5 status 0x…", "xid 79: GPU has fallen off the bus"
    core: int | None = None  # "(core C, socket S)" when given
    socket: int | None = None
    pci: str | None = None  # Xid: "0000:3b:00.0" (domain:bus:device.function, lower case)
    xid: int | None = None
    source: str = ""  # "journal" | "kmsg" | "dmesg" | "rasdaemon"

    def to_dict(self) -> dict[str, object]:
        """Every field under its own name, JSON-ready."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class ParseStats:
    """How much of a log was looked at, how much was evidence, and how much could not be read."""

    lines: int = 0  # lines looked at
    events: int = 0  # events produced
    skipped: int = 0  # lines that start like one of our formats but could not be parsed

    def plus(self, other: ParseStats) -> ParseStats:
        """The counts of two logs (or two parts of one) together."""
        return ParseStats(self.lines + other.lines, self.events + other.events, self.skipped + other.skipped)

    def to_dict(self) -> dict[str, int]:
        """The three counts, JSON-ready."""
        return dataclasses.asdict(self)


_HEX = r"(?:0x)?[0-9a-fA-F]+"
# arch/x86/mm/fault.c, show_signal_msg(): "%s[%d]: segfault at %lx ip %px sp %px error %lx", then
# print_vma_addr() (mm/memory.c) and, since Linux 6.2, " likely on CPU %d (core %d, socket %d)".
# comm is TASK_COMM_LEN bytes of anything (spaces, slashes, brackets): the first "[pid]: segfault at"
# ends it. Pointers were hashed (%p) in 4.15-era kernels, which may print "(ptrval)".
_SEGV_START = re.compile(r".*?\[\d+\]: segfault at ", re.S | re.A)
_SEGV = re.compile(
    rf"(?P<comm>.*?)\[(?P<pid>\d+)\]: segfault at {_HEX} ip (?:{_HEX}|\(ptrval\)) "
    rf"sp (?:{_HEX}|\(ptrval\)) error (?P<err>[0-9a-fA-F]+)(?P<rest>.*)",
    re.S | re.A,
)
# arch/x86/kernel/traps.c, show_signal() under pr_fmt "traps: ": "%s[%d] %s%s ip:%lx sp:%lx error:%lx"
# where %s%s is "trap " + do_trap()'s name ("invalid opcode", "divide error") or "" + "general
# protection fault"; arch/x86/kernel/cet.c writes " ssp:%lx" and "error:%lx(%s)" for "control protection".
_TRAP_START = re.compile(r"traps: .*?\[\d+\] ", re.S | re.A)
_TRAP = re.compile(
    rf"traps: (?P<comm>.*?)\[(?P<pid>\d+)\] (?P<desc>[^\[\]]+?) ip:{_HEX} sp:{_HEX}(?: ssp:{_HEX})? "
    r"error:(?P<err>[0-9a-fA-F]+)(?:\([^()]*\))?(?P<rest>.*)",
    re.S | re.A,
)
# mm/memory.c, print_vma_addr(): " in %s[%lx+%lx]" (name, start, size); since 6.x " in %pD[%lx,%lx+%lx]"
# (offset, start, size). Older kernels printed d_path's basename, which may end in " (deleted)".
_VMA = re.compile(r" in (?P<bin>.*?)\[(?:[0-9a-fA-F]+,)?[0-9a-fA-F]+\+[0-9a-fA-F]+\]", re.S | re.A)
_CPU = re.compile(r" likely on CPU (?P<cpu>\d+)(?: \(core (?P<core>\d+), socket (?P<socket>\d+)\))?", re.A)
# arch/x86/kernel/cpu/mce/core.c, __print_mce() under pr_fmt "mce: " with HW_ERR "[Hardware Error]: ":
# "CPU %d: Machine Check%s: %Lx Bank %d: %016Lx" (%s is " Exception" when MCIP is set). Its
# follow-up lines (RIP, TSC, ADDR, PROCESSOR) and mce_notify_irq()'s "Machine check events logged"
# are not events of their own.
_MCE_START = re.compile(r"(?:mce: )?(?:\[Hardware Error\]: )?CPU \d+: Machine Check", re.A)
_MCE = re.compile(
    r"(?:mce: )?(?:\[Hardware Error\]: )?CPU (?P<cpu>\d+): Machine Check(?: Exception)?: "
    r"(?P<mcg>[0-9a-fA-F]+) Bank (?P<bank>\d+): (?P<status>[0-9a-fA-F]{1,16})\b",
    re.A,
)
# NVIDIA's "Xid Errors" documentation: "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, <text>";
# older drivers wrote "NVRM: Xid (0000:3b:00): 13, <text>" without pid/name, and newer ones write
# pid='<unknown>' and name=<unknown> when no process is to blame.
_XID_START = re.compile(r"NVRM: Xid\b", re.A)
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}(?:\.[0-7])?)\): "
    r"(?P<xid>\d{1,6})(?:, ?(?P<rest>.*))?",
    re.S | re.A,
)
_XID_PID = re.compile(r"pid='?(?P<pid>[^,']*)'?, ?", re.A)
_XID_NAME = re.compile(r"name=(?P<name>[^,]*),? ?", re.A)
_PCI = re.compile(
    r"(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-7]))?",
    re.A,
)
_MARKERS = ("]: segfault at", "traps:", "Machine Check", "NVRM: Xid")


def parse_message(
    text: str, *, time: float | None = None, source: str = ""
) -> KernelEvent | Literal["skip"] | None:
    """Read one kernel message (the text after any timestamp) as a `KernelEvent`.

    Args:
        text: the message as the kernel wrote it, e.g. `python3[12]: segfault at 0 ip … error 4 in …`.
        time: when it was logged, in seconds since the epoch, if the source says.
        source: where it was read ("journal", "kmsg", "dmesg"), carried into the event.

    Returns:
        The event; None for a message of no format of ours (most of them); "skip" for one that starts
        like a segfault, trap, machine check or Xid but cannot be read. Never raises, whatever `text` is.
    """
    if not isinstance(text, str):
        return "skip"
    text = text.strip()
    if len(text) > MAX_MESSAGE_CHARS:
        return "skip" if any(m in text for m in _MARKERS) else None
    for starts, parse in _PARSERS:
        if starts.match(text):
            event = parse(text, time, source)
            return "skip" if event is None else event
    return None


def parse_messages(
    records: Iterable[tuple[float | None, str]], *, source: str
) -> tuple[list[KernelEvent], ParseStats]:
    """Parse `(time, message)` records; records of the wrong shape or types are skipped and counted.

    Args:
        records: time in seconds since the epoch (or None) and the message text.
        source: where they were read, carried into each event.

    Returns:
        The events in the order of the records, and the counts of lines, events and skipped lines.
    """
    events: list[KernelEvent] = []
    lines = skipped = 0
    for record in records:
        lines += 1
        parsed = _parse_record(record, source)
        if parsed == "skip":
            skipped += 1
        elif parsed is not None:
            events.append(parsed)
    return events, ParseStats(lines=lines, events=len(events), skipped=skipped)


def _parse_record(record: object, source: str) -> KernelEvent | Literal["skip"] | None:
    """One record, checked for shape: a (time, text) pair with a finite or absent time."""
    if not isinstance(record, tuple) or len(record) != 2:
        return "skip"
    time, text = record
    if time is not None and (
        isinstance(time, bool) or not isinstance(time, int | float) or not math.isfinite(time)
    ):
        return "skip"
    return parse_message(text, time=None if time is None else float(time), source=source)


def normalise_pci(text: str) -> str | None:
    """A PCI bus id in any usual spelling -> `0000:3b:00.0`; None if it is not one.

    Xid messages write `0000:3b:00` (no function), NVML and nvidia-smi `00000000:3B:00.0`, lspci
    `3b:00.0` (no domain): one spelling lets Xid events meet the GPUs they name.
    """
    m = _PCI.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        return None
    dom, bus, dev = int(m["dom"] or "0", 16), int(m["bus"], 16), int(m["dev"], 16)
    if dev > 0x1F:  # five bits of device number on a PCI bus
        return None
    return f"{dom:04x}:{bus:02x}:{dev:02x}.{int(m['fn'] or '0')}"


def _segfault(text: str, time: float | None, source: str) -> KernelEvent | None:
    """arch/x86/mm/fault.c show_signal_msg(); None when garbled."""
    m = _SEGV.match(text)
    return None if m is None else _crash("segfault", m, f"error {m['err'].lower()}", time, source)


def _trap(text: str, time: float | None, source: str) -> KernelEvent | None:
    """arch/x86/kernel/traps.c show_signal(); None when garbled."""
    m = _TRAP.match(text)
    if m is None:
        return None
    desc = m["desc"].strip()
    return _crash("trap", m, desc[len("trap ") :] if desc.startswith("trap ") else desc, time, source)


def _crash(kind: str, m: re.Match[str], detail: str, time: float | None, source: str) -> KernelEvent | None:
    """A segfault or trap line's event: the process, then the mapping and likely CPU after `rest`."""
    tail = _tail(m["rest"])
    if tail is None:
        return None
    binary, cpu, core, socket = tail
    return KernelEvent(
        kind=kind, time=time, cpu=cpu, comm=m["comm"] or None, pid=int(m["pid"]), binary=binary,
        detail=detail, core=core, socket=socket, source=source,
    )  # fmt: skip


def _tail(rest: str) -> tuple[str | None, int | None, int | None, int | None] | None:
    """What follows the error code: the mapping's name and the likely CPU, each optional; None if garbled.

    A tail that starts " in " without a readable `[start+size]`, or says "likely on CPU" without a
    number, was cut short: the line is skipped rather than read as having no mapping or no CPU.
    """
    binary = None
    if rest.startswith(" in "):
        vma = _VMA.match(rest)
        if vma is None:
            return None
        binary = vma["bin"].removesuffix(" (deleted)").strip() or None
        rest = rest[vma.end() :]
    if " likely on CPU" not in rest:
        return binary, None, None, None
    cpu = _CPU.search(rest)
    if cpu is None:
        return None
    core, socket = cpu["core"], cpu["socket"]
    return binary, int(cpu["cpu"]), _int(core), _int(socket)


def _mce(text: str, time: float | None, source: str) -> KernelEvent | None:
    """arch/x86/kernel/cpu/mce/core.c __print_mce(); None when garbled."""
    m = _MCE.match(text)
    if m is None:
        return None
    status = int(m["status"], 16)
    return KernelEvent(
        kind="mce", time=time, cpu=int(m["cpu"]), detail=mce_detail(int(m["bank"]), status), source=source
    )


def mce_detail(bank: int | None, status: int | None) -> str:
    """`bank 5 status 0xbe00000000800400`, leaving out what is unknown (rasdaemon may lack a column)."""
    parts = [] if bank is None else [f"bank {bank}"]
    if status is not None:
        parts.append(f"status 0x{status & 0xFFFF_FFFF_FFFF_FFFF:016x}")
    return " ".join(parts)


def _xid(text: str, time: float | None, source: str) -> KernelEvent | None:
    """NVIDIA "Xid Errors": `NVRM: Xid (PCI:dddd:bb:dd): N, [pid=P, name=C, ]text`; None when garbled."""
    m = _XID.match(text)
    pci = normalise_pci(m["pci"]) if m else None
    if m is None or pci is None:
        return None
    rest, pid, name = m["rest"] or "", None, None
    if (p := _XID_PID.match(rest)) is not None:
        pid, rest = _int(p["pid"]), rest[p.end() :]
    if (n := _XID_NAME.match(rest)) is not None:
        name, rest = n["name"].strip(), rest[n.end() :]
    words = rest.strip().rstrip(".")
    detail = f"xid {int(m['xid'])}: {words}" if words else f"xid {int(m['xid'])}"
    return KernelEvent(
        kind="xid",
        time=time,
        cpu=None,
        comm=None if name in (None, "", "<unknown>") else name,
        pid=pid,
        detail=detail[:MAX_DETAIL_CHARS],
        pci=pci,
        xid=int(m["xid"]),
        source=source,
    )


def _int(text: str | None) -> int | None:
    """Decimal digits -> int; anything else (absent, `<unknown>`) -> None."""
    return int(text) if text is not None and text.isascii() and text.isdigit() and len(text) < 20 else None


_PARSERS = (
    (_SEGV_START, _segfault),
    (_TRAP_START, _trap),
    (_MCE_START, _mce),
    (_XID_START, _xid),
)
