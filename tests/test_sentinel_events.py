"""sdcscan.sentinel.kernel_events: kernel messages about crashes, machine checks and Xids, parsed exactly or skipped."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdcscan.sentinel.kernel_events import (
    KINDS,
    KernelEvent,
    ParseStats,
    normalise_pci,
    parse_message,
    parse_messages,
)

LOGS = Path(__file__).parent / "data" / "kernel_logs"
SEGV = (
    "python3[12345]: segfault at 7f3a0 ip 00007f3a12 sp 00007ffd error 4 in libc.so.6[7f3a00+195000] "
    "likely on CPU 7 (core 3, socket 0)"
)
TRAP = "traps: a.out[1234] trap invalid opcode ip:401136 sp:7ffc error:0 in a.out[401000+1000]"
MCE = "mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 5: be00000000800400"
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
VALID = (SEGV, TRAP, MCE, XID)

# variants.txt, in file order: (kind, comm, pid, cpu, core, socket, binary, detail, pci, xid) per event.
VARIANT_EVENTS = [
    ("segfault", "a.out", 25311, None, None, None, "a.out", "error 4", None, None),
    ("segfault", "chrome", 4242, None, None, None, "chrome", "error 4", None, None),
    ("segfault", "Web Content", 3120, 11, 5, 0, "libxul.so", "error 6", None, None),
    ("segfault", "kworker/u8:2", 187, 2, 2, 0, None, "error 14", None, None),
    ("segfault", "bash", 5555, 3, 1, 0, "bash", "error 4", None, None),
    ("segfault", "python3", 32328, 1, 1, 0, "libc.so.6", "error 4", None, None),  # recorded on Linux 6.18
    ("segfault", "[weird] name", 42, 0, 0, 0, "lib[x].so", "error 4", None, None),
    ("segfault", "java", 99, None, None, None, "libjvm.so", "error 4", None, None),
    ("segfault", "python3", 12345, 7, 3, 0, "libc.so.6", "error 4", None, None),
    ("trap", "a.out", 1234, None, None, None, "a.out", "invalid opcode", None, None),
    ("trap", "foo", 12, None, None, None, "foo", "divide error", None, None),
    ("trap", "java", 99, 4, 4, 0, "libjvm.so", "general protection fault", None, None),
    ("trap", "cetapp", 321, None, None, None, "cetapp", "control protection", None, None),
    ("mce", None, None, 3, None, None, None, "bank 5 status 0xbe00000000800400", None, None),
    ("mce", None, None, 0, None, None, None, "bank 4 status 0xb200000000070f0f", None, None),
    ("mce", None, None, 2, None, None, None, "bank 4 status 0x9c000000000011c1", None, None),
    ("xid", "python", 1234, None, None, None, None, "xid 79: GPU has fallen off the bus", "0000:3b:00.0", 79),
    (
        "xid", None, None, None, None, None, None,
        "xid 13: 0003 00000000 0000a097 00001b0c 00000000 00000000", "0000:03:00.0", 13,
    ),
    (
        "xid", None, None, None, None, None, None,
        "xid 119: Timeout after 6s of waiting for RPC response from GPU0 GSP! "
        "Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4)", "0000:1b:00.0", 119,
    ),
    (
        "xid", "nccl-test", 2222, None, None, None, None,
        "xid 48: An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
        "at partition 1, subpartition 0", "0000:b1:00.0", 48,
    ),
]  # fmt: skip


def _fields(e: KernelEvent) -> tuple[Any, ...]:
    """The fields VARIANT_EVENTS lists, in its order."""
    return (e.kind, e.comm, e.pid, e.cpu, e.core, e.socket, e.binary, e.detail, e.pci, e.xid)


def test_segfault_with_likely_cpu_is_parsed_field_by_field() -> None:
    """A Linux 6.2+ segfault gives program, pid, mapping, CPU, core and socket, with the time and source."""
    event = parse_message(SEGV, time=1700000000.5, source="journal")
    assert event == KernelEvent(
        kind="segfault", time=1700000000.5, cpu=7, comm="python3", pid=12345, binary="libc.so.6",
        detail="error 4", core=3, socket=0, source="journal",
    )  # fmt: skip


def test_segfault_without_mapping_or_cpu_part_has_none_there() -> None:
    """Older kernels print no `likely on CPU`, and an anonymous mapping prints no ` in X[…]`: None, not a guess."""
    event = parse_message("a.out[7]: segfault at 0 ip 0000000000400546 sp 00007fff2fb08610 error 4")
    assert isinstance(event, KernelEvent)
    assert (event.kind, event.comm, event.pid, event.cpu, event.binary) == (
        "segfault",
        "a.out",
        7,
        None,
        None,
    )


def test_trap_is_parsed_with_its_kind_and_no_cpu() -> None:
    """`traps:` lines name the trap; without `likely on CPU` the CPU is unknown."""
    event = parse_message(TRAP, time=5.0, source="dmesg")
    assert event == KernelEvent(
        kind="trap", time=5.0, cpu=None, comm="a.out", pid=1234, binary="a.out", detail="invalid opcode",
        source="dmesg",
    )  # fmt: skip


def test_machine_check_gives_cpu_bank_and_status() -> None:
    """__print_mce's header line names the CPU, the bank and the status register (as 16 hex digits)."""
    event = parse_message(MCE, source="kmsg")
    assert event == KernelEvent(
        kind="mce", time=None, cpu=3, detail="bank 5 status 0xbe00000000800400", source="kmsg"
    )
    short = parse_message("mce: CPU 2: Machine Check: 0 Bank 4: 175")
    assert isinstance(short, KernelEvent)
    assert short.detail == "bank 4 status 0x0000000000000175"


def test_xid_gives_normalised_pci_number_process_and_text() -> None:
    """An Xid names the GPU by bus id, normalised to domain:bus:device.function."""
    event = parse_message(XID, time=1.0, source="journal")
    assert event == KernelEvent(
        kind="xid", time=1.0, cpu=None, comm="python", pid=1234, detail="xid 79: GPU has fallen off the bus",
        pci="0000:3b:00.0", xid=79, source="journal",
    )  # fmt: skip


def test_every_variant_line_of_other_kernels_and_drivers_is_read_exactly() -> None:
    """variants.txt: old and new kernels, odd program names, old and new Xid formats, follow-up lines."""
    lines = (LOGS / "variants.txt").read_text().splitlines()
    events, stats = parse_messages(((None, line) for line in lines), source="dmesg")
    assert [_fields(e) for e in events] == VARIANT_EVENTS
    assert stats == ParseStats(lines=len(lines), events=len(VARIANT_EVENTS), skipped=0)
    assert {e.source for e in events} == {"dmesg"}


def test_follow_up_and_unrelated_lines_are_not_events_and_not_skipped() -> None:
    """TSC/ADDR/PROCESSOR lines, 'events logged', thermal throttling, coredump and audit lines are None."""
    for text in (
        "mce: [Hardware Error]: TSC 0 ADDR 1ffffb0000 MISC 9001",
        "mce: [Hardware Error]: PROCESSOR 0:50654 TIME 1700000200 SOCKET 0 APIC 4 microcode 2006e05",
        "mce: [Hardware Error]: Machine check events logged",
        "mce: CPU0: Core temperature above threshold, cpu clock throttled (total events = 1)",
        "usb 1-1: new high-speed USB device number 2 using xhci_hcd",
        "",
    ):
        assert parse_message(text) is None, text


def test_garbled_and_truncated_lines_of_our_formats_are_skipped() -> None:
    """garbage.txt: the 9 lines that start like ours but are cut short or corrupt are 'skip', the rest None."""
    lines = (LOGS / "garbage.txt").read_text().splitlines()
    results = [parse_message(line) for line in lines]
    assert results[:9] == ["skip"] * 9
    assert results[9:] == [None] * (len(lines) - 9)
    events, stats = parse_messages(((0.0, line) for line in lines), source="kmsg")
    assert (events, stats) == ([], ParseStats(lines=len(lines), events=0, skipped=9))


@pytest.mark.parametrize("line", VALID)
def test_every_truncation_of_a_valid_line_is_an_event_none_or_skip(line: str) -> None:
    """A line cut at any point (rate limits, lost continuations) never raises and never invents a field."""
    full = parse_message(line)
    assert isinstance(full, KernelEvent)
    for cut in range(len(line)):
        result = parse_message(line[:cut])
        assert result is None or result == "skip" or result.kind == full.kind
        if isinstance(result, KernelEvent) and result.cpu is not None:
            assert str(result.cpu) in line


def test_hostile_records_are_skipped_and_counted() -> None:
    """Records of the wrong shape or types (not a pair, non-str text, NaN or bool time) are counted as skipped."""
    records: list[Any] = [
        (1.0, SEGV), (None, MCE), ("x", SEGV), (math.nan, SEGV), (True, SEGV), (1.0, None), (1.0, b"bytes"),
        (1.0,), "not a tuple", None, (1, 2, 3), (math.inf, XID), (2, TRAP),
    ]  # fmt: skip
    events, stats = parse_messages(records, source="journal")
    assert [(e.kind, e.time) for e in events] == [("segfault", 1.0), ("mce", None), ("trap", 2.0)]
    assert stats == ParseStats(lines=13, events=3, skipped=10)


def test_overlong_lines_are_skipped_when_they_look_like_ours_and_none_otherwise() -> None:
    """No kernel message is megabytes long: such a line is cheap to reject, whatever it holds."""
    assert parse_message(SEGV + " x" * 500_000) == "skip"
    assert parse_message("[" * 1_000_000 + "]: segfault at ") == "skip"
    assert parse_message("a" * 1_000_000) is None


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parse_message_never_raises_on_any_text(text: str) -> None:
    """Any str gives an event of a known kind, None or 'skip'."""
    result = parse_message(text)
    assert result is None or result == "skip" or result.kind in KINDS


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_parse_message_never_raises_on_bytes_decoded_with_replacement(raw: bytes) -> None:
    """Ring-buffer corruption decoded with errors='replace' is handled like any text."""
    result = parse_message(raw.decode("utf-8", errors="replace"))
    assert result is None or result == "skip" or result.kind in KINDS


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(VALID), st.integers(min_value=0, max_value=200), st.text(max_size=20))
def test_parse_message_never_raises_on_valid_lines_with_text_spliced_in(
    line: str, at: int, junk: str
) -> None:
    """Random text spliced into a real line: still an event, None or 'skip'."""
    result = parse_message(line[:at] + junk + line[at:])
    assert result is None or result == "skip" or result.kind in KINDS


def test_to_dict_holds_every_field_by_name() -> None:
    """to_dict is JSON-ready and complete: the fields of the dataclass, no more, no fewer."""
    event = parse_message(XID, time=2.0, source="kmsg")
    assert isinstance(event, KernelEvent)
    assert event.to_dict() == {
        "kind": "xid", "time": 2.0, "cpu": None, "comm": "python", "pid": 1234, "binary": None,
        "detail": "xid 79: GPU has fallen off the bus", "core": None, "socket": None,
        "pci": "0000:3b:00.0", "xid": 79, "source": "kmsg",
    }  # fmt: skip
    assert ParseStats(3, 2, 1).plus(ParseStats(1, 1, 0)).to_dict() == {"lines": 4, "events": 3, "skipped": 1}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0000:3b:00", "0000:3b:00.0"),
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("3b:00.1", "0000:3b:00.1"),
        ("0001:b1:1f.7", "0001:b1:1f.7"),
        ("0000:3b:20.0", None),
        ("0000:3b:00.8", None),
        ("GPU-5a6b", None),
        ("", None),
    ],
)
def test_normalise_pci_accepts_xid_nvml_and_lspci_spellings(text: str, expected: str | None) -> None:
    """Xid, NVML and lspci spellings of one bus id meet in one form; what is not a bus id is None."""
    assert normalise_pci(text) == expected
