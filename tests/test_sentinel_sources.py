"""sdcscan.sentinel.kernel_log: the kernel log for a window from journal, kmsg or dmesg, plus rasdaemon."""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sdcscan.errors import UsageError
from sdcscan.sentinel import kernel_log as sources
from sdcscan.sentinel.kernel_events import KernelEvent, ParseStats
from sdcscan.sentinel.kernel_log import PERMISSION_HINT, LogRead, boot_time, read_kernel_log, read_rasdaemon

LOGS = Path(__file__).parent / "data" / "kernel_logs"
SINCE, UNTIL = 1700000000.0, 1700003600.0  # one hour; the fixtures' boot time is SINCE - 1000
BTIME = 1699999000
RAS_COLUMNS = (  # rasdaemon's mce_record (ras-record.c), in its order
    "id INTEGER PRIMARY KEY, timestamp TEXT, mcgcap INTEGER, mcgstatus INTEGER, status INTEGER, "
    "addr INTEGER, misc INTEGER, ip INTEGER, tsc INTEGER, walltime INTEGER, cpu INTEGER, cpuid INTEGER, "
    "apicid INTEGER, socketid INTEGER, cs INTEGER, bank INTEGER, cpuvendor INTEGER, bank_name TEXT, "
    "error_msg TEXT, mcgstatus_msg TEXT, mcistatus_msg TEXT, mcastatus_msg TEXT, user_action TEXT, "
    "mc_location TEXT"
)


def _script(tmp_path: Path, name: str, body: str) -> str:
    """An executable shell script standing in for journalctl or dmesg; it records its argv in NAME.argv."""
    path = tmp_path / name
    path.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{tmp_path / name}.argv"\n{body}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _proc_stat(tmp_path: Path, btime: int | None = BTIME) -> str:
    """A /proc/stat with the given boot time (or none)."""
    path = tmp_path / f"stat-{btime}"
    lines = (
        ["cpu  1 2 3 4 5 6 7 0 0 0", "intr 1 2 3"] + ([f"btime {btime}"] if btime else []) + ["processes 9"]
    )
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _read(tmp_path: Path, **kw: Any) -> LogRead:
    """read_kernel_log over the fixture window, every source off unless given, a fake /proc/stat."""
    options: dict[str, Any] = {"journalctl": None, "kmsg": None, "dmesg": None, "rasdaemon_db": None}
    options["proc_stat"] = _proc_stat(tmp_path)
    options.update(kw)
    return read_kernel_log(SINCE, UNTIL, **options)


def _brief(read: LogRead) -> list[tuple[Any, ...]]:
    """(kind, time, cpu, comm, binary, detail, source) of each event."""
    return [(e.kind, e.time, e.cpu, e.comm, e.binary, e.detail, e.source) for e in read.events]


def test_journal_is_asked_for_the_window_and_read_exactly(tmp_path: Path) -> None:
    """journalctl -k -o json: str and byte-list MESSAGEs, µs times; out-of-window and malformed lines dropped."""
    journal = _script(tmp_path, "journalctl", f'cat "{LOGS / "journal.json"}"')
    read = _read(tmp_path, journalctl=journal)
    argv = (tmp_path / "journalctl.argv").read_text().split()
    assert argv == ["-k", "-o", "json", "--since", "@1700000000", "--until", "@1700003600", "--no-pager"]
    assert read.sources == ["journal"]
    assert _brief(read) == [
        ("segfault", 1700000100.000001, 7, "python3", "libc.so.6", "error 4", "journal"),
        ("trap", 1700000200.5, None, "a.out", "a.out", "invalid opcode", "journal"),
        ("mce", 1700000300.0, 3, None, None, "bank 5 status 0xbe00000000800400", "journal"),
        ("xid", 1700000400.0, None, "python", None, "xid 79: GPU has fallen off the bus", "journal"),
        ("segfault", 1700000500.0, 5, "b\ufffdd", "libbad.so", "error 4", "journal"),
    ]
    assert read.events[3].pci == "0000:3b:00.0"
    # 8 entries in the window + 3 malformed (cut JSON, no MESSAGE, MESSAGE a number); 1 truncated segfault
    assert read.stats == ParseStats(lines=11, events=5, skipped=4)
    assert read.notes == ["journal: 3 malformed line(s) skipped"]
    assert (read.since, read.until) == (SINCE, UNTIL)


def test_journal_window_is_widened_to_whole_seconds_and_filtered_exactly(tmp_path: Path) -> None:
    """journalctl takes whole seconds: the window is widened for it and cut exactly afterwards."""
    journal = _script(tmp_path, "journalctl", f'cat "{LOGS / "journal.json"}"')
    read = read_kernel_log(
        1700000100.5, 1700000299.5, journalctl=journal, kmsg=None, dmesg=None, rasdaemon_db=None
    )
    argv = (tmp_path / "journalctl.argv").read_text().split()
    assert argv[3:7] == ["--since", "@1700000100", "--until", "@1700000300"]
    assert [(e.kind, e.time) for e in read.events] == [("trap", 1700000200.5)]


def test_journal_permission_denied_is_a_note_and_kmsg_is_read_instead(tmp_path: Path) -> None:
    """Without adm/systemd-journal, journalctl fails: a note says what to grant; the next source is used."""
    journal = _script(
        tmp_path,
        "journalctl",
        'echo "No journal files were opened due to insufficient permissions." >&2; exit 1',
    )
    read = _read(tmp_path, journalctl=journal, kmsg=str(LOGS / "kmsg.txt"))
    assert read.sources == ["kmsg"]
    assert read.notes[0] == (
        "journal: No journal files were opened due to insufficient permissions.; " + PERMISSION_HINT
    )
    assert "adm / systemd-journal" in read.notes[0] and "CAP_SYSLOG" in read.notes[0]


def test_journal_hint_for_a_user_without_the_system_journal_is_permission_denied(tmp_path: Path) -> None:
    """As a plain user journalctl exits 0 with a Hint and no kernel lines: that is denial, not a quiet host."""
    hint = "Hint: You are currently not seeing messages from other users and the system."
    journal = _script(tmp_path, "journalctl", f'echo "{hint}" >&2; exit 0')
    read = _read(tmp_path, journalctl=journal)
    assert read.sources == [] and read.events == []
    assert (
        read.notes[0].startswith("journal: Hint: You are currently not seeing")
        and PERMISSION_HINT in read.notes[0]
    )


def test_kmsg_records_are_timed_from_boot_and_filtered_to_the_window(tmp_path: Path) -> None:
    """kmsg: btime + µs since boot; continuation lines and user-space facilities left out; escapes decoded."""
    read = _read(tmp_path, kmsg=str(LOGS / "kmsg.txt"))
    assert read.sources == ["kmsg"]
    assert _brief(read) == [
        ("segfault", 1700000100.0, 7, "python3", "libc.so.6", "error 4", "kmsg"),
        ("mce", 1700000200.0, 2, None, None, "bank 4 status 0xf200000000000175", "kmsg"),
        ("trap", 1700000400.0, None, "java", "libjvm.so", "general protection fault", "kmsg"),
        ("xid", 1700000500.0, None, "train.py", None, read.events[3].detail, "kmsg"),
        ("segfault", 1700000600.0, 1, "odd\\name", None, "error 6", "kmsg"),
    ]
    assert read.events[3].pci == "0000:b1:00.0" and read.events[3].xid == 13
    # in the window: 6 kernel records; plus 2 malformed (no header, µs not a number)
    assert read.stats == ParseStats(lines=8, events=5, skipped=2)
    assert read.notes == ["kmsg: 2 malformed record(s) skipped"]


def test_kmsg_says_when_the_window_starts_before_what_the_ring_buffer_holds(tmp_path: Path) -> None:
    """kmsg holds one boot: a window reaching further back gets a note, not silence."""
    read = read_kernel_log(
        SINCE - 86400, UNTIL, journalctl=None, kmsg=str(LOGS / "kmsg.txt"), dmesg=None,
        rasdaemon_db=None, proc_stat=_proc_stat(tmp_path),
    )  # fmt: skip
    assert any(n.startswith("kmsg: holds only this boot's messages") for n in read.notes)
    assert len(read.events) == 5


def test_kmsg_permission_denied_is_a_note_naming_cap_syslog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kernel.dmesg_restrict=1 makes opening /dev/kmsg fail with EPERM: a note, then dmesg is tried."""
    real_open = os.open
    kmsg = str(tmp_path / "kmsg")

    def deny(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        if str(path) == kmsg:
            raise PermissionError(errno.EPERM, "Operation not permitted", kmsg)
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(sources.os, "open", deny)
    dmesg = _script(tmp_path, "dmesg", f'cat "{LOGS / "dmesg.txt"}"')
    read = _read(tmp_path, kmsg=kmsg, dmesg=dmesg)
    assert read.notes[0] == f"kmsg: {kmsg}: Operation not permitted; {PERMISSION_HINT}"
    assert read.sources == ["dmesg"]


def test_dmesg_lines_are_timed_from_boot_and_filtered_to_the_window(tmp_path: Path) -> None:
    """dmesg: `[secs] message`; untimed lines noted; a cut segfault skipped; outside the window dropped."""
    dmesg = _script(tmp_path, "dmesg", f'cat "{LOGS / "dmesg.txt"}"')
    read = _read(tmp_path, dmesg=dmesg)
    assert read.sources == ["dmesg"]
    assert _brief(read) == [
        ("segfault", 1700000100.25, 7, "python3", "libc.so.6", "error 4", "dmesg"),
        ("trap", 1700000200.0, None, "foo", "foo", "divide error", "dmesg"),
        ("mce", 1700000300.0, 0, None, None, "bank 4 status 0xb200000000070f0f", "dmesg"),
    ]
    assert read.stats == ParseStats(lines=4, events=3, skipped=1)
    assert read.notes == ["dmesg: 1 line(s) without a timestamp left out"]


def test_dmesg_not_permitted_and_missing_tools_leave_no_source_and_say_why(tmp_path: Path) -> None:
    """Nothing readable: no exception, empty sources and events, one note per source and a summary."""
    dmesg = _script(
        tmp_path, "dmesg", 'echo "dmesg: read kernel buffer failed: Operation not permitted" >&2; exit 1'
    )
    read = _read(
        tmp_path, journalctl=str(tmp_path / "no-journalctl"), kmsg=str(tmp_path / "no-kmsg"), dmesg=dmesg,
        rasdaemon_db=str(tmp_path / "no.db"),
    )  # fmt: skip
    assert (read.sources, read.events, read.stats) == ([], [], ParseStats())
    assert read.notes == [
        f"journal: {tmp_path / 'no-journalctl'} is not installed (not found on PATH)",
        f"kmsg: {tmp_path / 'no-kmsg'} does not exist (no such device here, e.g. in a container)",
        f"dmesg: dmesg: read kernel buffer failed: Operation not permitted; {PERMISSION_HINT}",
        f"no kernel log could be read (tried {tmp_path / 'no-journalctl'}, {tmp_path / 'no-kmsg'}, {dmesg}); "
        "see the notes above",
    ]


def test_a_command_that_hangs_or_fails_is_a_note(tmp_path: Path) -> None:
    """A timeout or a non-zero exit without a permission message becomes a note naming the command."""

    def hang(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        assert kw["timeout"] == sources.SUBPROCESS_TIMEOUT_S
        raise subprocess.TimeoutExpired(argv, kw["timeout"])

    def broken(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        return subprocess.CompletedProcess(argv, 2, b"", b"Failed to seek: Bad message\n")

    read = _read(tmp_path, journalctl="journalctl", runner=hang)
    assert read.notes[0] == "journal: journalctl did not finish within 30 s"
    read = _read(tmp_path, journalctl="journalctl", runner=broken)
    assert read.notes[0] == "journal: journalctl exited with status 2: Failed to seek: Bad message"
    assert read.sources == []


def test_a_quiet_window_in_a_working_journal_is_a_read_with_no_events(tmp_path: Path) -> None:
    """Nothing in the window, but the journal holds kernel lines: it worked; the next source is not tried."""
    last_line = f'head -n 1 "{LOGS / "journal.json"}"'
    quiet = _script(tmp_path, "journalctl", f'case "$*" in *"-n 1"*) {last_line};; esac')
    read = _read(tmp_path, journalctl=quiet, kmsg=str(LOGS / "kmsg.txt"))
    assert (read.sources, read.events, read.notes) == (["journal"], [], [])
    assert read.stats == ParseStats()


def test_a_journal_without_any_kernel_line_does_not_count_as_read(tmp_path: Path) -> None:
    """journalctl exits 0 silently where no journal exists: that is no source, and kmsg is read instead."""
    empty = _script(tmp_path, "journalctl", "exit 0")
    read = _read(tmp_path, journalctl=empty, kmsg=str(LOGS / "kmsg.txt"))
    assert read.sources == ["kmsg"] and len(read.events) == 5
    assert read.notes[0] == (
        "journal: holds no kernel messages at all (no journal files, or journald keeps no kernel log)"
    )
    assert (tmp_path / "journalctl.argv").read_text().split() == ["-k", "-o", "json", "-n", "1", "--no-pager"]


def test_without_a_boot_time_kmsg_cannot_be_placed_in_time(tmp_path: Path) -> None:
    """No btime in /proc/stat: kmsg's times since boot are meaningless, so the source is refused with a note."""
    read = _read(tmp_path, kmsg=str(LOGS / "kmsg.txt"), proc_stat=_proc_stat(tmp_path, btime=None))
    assert read.sources == []
    assert read.notes[0].startswith("kmsg: no boot time (btime) in ")
    assert boot_time(str(tmp_path / "missing")) is None
    assert boot_time(_proc_stat(tmp_path)) == float(BTIME)


def test_a_window_that_is_not_two_ordered_finite_times_is_a_usage_error() -> None:
    """since after until, NaN or infinity: UsageError (exit 2), before anything is read."""
    for since, until in ((2.0, 1.0), (float("nan"), 1.0), (0.0, float("inf"))):
        with pytest.raises(UsageError, match="kernel log window"):
            read_kernel_log(since, until, journalctl=None, kmsg=None, dmesg=None, rasdaemon_db=None)


def _ras_db(path: Path, columns: str, rows: list[dict[str, Any]]) -> str:
    """A rasdaemon-like database with one mce_record table of the given columns and rows."""
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TABLE mce_record ({columns})")
        for row in rows:
            names = ", ".join(row)
            db.execute(
                f"INSERT INTO mce_record ({names}) VALUES ({', '.join('?' * len(row))})", list(row.values())
            )
    return str(path)


RAS_ROWS: list[dict[str, Any]] = [
    # status as rasdaemon stores a u64 with the top bit set: a negative int64
    {"timestamp": "2023-11-14 23:15:00 +0100", "walltime": 1700000100, "cpu": 6, "bank": 5,
     "status": 0xBE00000000800400 - (1 << 64)},
    {"timestamp": "2023-11-14 23:20:00 +0100", "walltime": 0, "cpu": 2, "bank": 4, "status": 0x9C000000000011C1 - (1 << 64)},
    {"timestamp": "2023-11-15 23:20:00 +0100", "walltime": 1700086400, "cpu": 1, "bank": 1, "status": 1},
    {"timestamp": "2023-11-14 23:16:00 +0100", "walltime": 1700000160, "cpu": "six", "bank": 5, "status": 1},
    {"timestamp": "yesterday", "walltime": None, "cpu": 1, "bank": 1, "status": 1},
]  # fmt: skip


def test_rasdaemon_machine_checks_in_the_window_are_read_by_column_name(tmp_path: Path) -> None:
    """walltime first, else the local-time text; u64 status restored; bad rows skipped; out-of-window dropped."""
    db = _ras_db(tmp_path / "ras-mc_ctx.db", RAS_COLUMNS, RAS_ROWS)
    events, stats, notes = read_rasdaemon(db, SINCE, UNTIL)
    assert events == [
        KernelEvent("mce", 1700000100.0, 6, detail="bank 5 status 0xbe00000000800400", source="rasdaemon"),
        KernelEvent("mce", 1700000400.0, 2, detail="bank 4 status 0x9c000000000011c1", source="rasdaemon"),
    ]
    assert stats == ParseStats(lines=5, events=2, skipped=2)
    assert notes == ["rasdaemon: 2 unreadable mce_record row(s) skipped"]


def test_rasdaemon_adds_to_a_kernel_log_and_tolerates_missing_columns(tmp_path: Path) -> None:
    """An older table without walltime or bank is read for what it has, beside the journal's events."""
    db = _ras_db(tmp_path / "old.db", "id INTEGER PRIMARY KEY, timestamp TEXT, cpu INTEGER, status INTEGER",
                 [{"timestamp": "2023-11-14 22:30:00 +0000", "cpu": 9, "status": 5}])  # fmt: skip
    journal = _script(tmp_path, "journalctl", f'cat "{LOGS / "journal.json"}"')
    read = _read(tmp_path, journalctl=journal, rasdaemon_db=db)
    assert read.sources == ["journal", "rasdaemon"]
    assert read.events[-1] == KernelEvent(
        "mce", 1700001000.0, 9, detail="status 0x0000000000000005", source="rasdaemon"
    )
    assert read.stats == ParseStats(lines=12, events=6, skipped=4)


def test_unreadable_rasdaemon_databases_are_notes_and_not_sources(tmp_path: Path) -> None:
    """No table, no time column, not a database at all: a note each, rasdaemon not listed, no exception."""
    no_table = tmp_path / "empty.db"
    sqlite3.connect(no_table).close()
    no_time = _ras_db(tmp_path / "notime.db", "id INTEGER, cpu INTEGER", [{"cpu": 1}])
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not an SQLite database, whatever its name says" * 20)
    for db, says in ((no_table, "has no mce_record table"), (no_time, "without a time column"),
                     (junk, "cannot read")):  # fmt: skip
        events, stats, notes = read_rasdaemon(str(db), SINCE, UNTIL)
        assert (events, stats) == ([], None)
        assert len(notes) == 1 and says in notes[0], notes
    kmsg = str(LOGS / "kmsg.txt")
    assert _read(tmp_path, kmsg=kmsg, rasdaemon_db=str(junk)).sources == ["kmsg"]


def test_rasdaemon_database_is_opened_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rasdaemon owns its database: it is opened with SQLite's read-only URI mode, and left unchanged."""
    db = _ras_db(tmp_path / "ras.db", RAS_COLUMNS, RAS_ROWS)
    before = Path(db).read_bytes()
    opened: list[tuple[Any, ...]] = []
    real_connect = sqlite3.connect

    def spy(target: str, *args: Any, **kw: Any) -> sqlite3.Connection:
        opened.append((target, kw.get("uri")))
        return real_connect(target, *args, **kw)

    monkeypatch.setattr(sources.sqlite3, "connect", spy)
    events, _, _ = read_rasdaemon(db, SINCE, UNTIL)
    assert len(events) == 2
    assert opened == [(Path(db).as_uri() + "?mode=ro", True)]
    assert Path(db).read_bytes() == before


def test_log_read_to_dict_is_json_ready(tmp_path: Path) -> None:
    """to_dict carries the window, sources, notes, counts and events as plain values."""
    read = _read(tmp_path, kmsg=str(LOGS / "kmsg.txt"))
    d = read.to_dict()
    assert d["sources"] == ["kmsg"] and d["since"] == SINCE and d["stats"]["events"] == 5
    assert d["events"][0]["comm"] == "python3" and d["events"][0]["source"] == "kmsg"
