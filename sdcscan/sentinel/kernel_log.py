"""Read the kernel log for a time window, from whichever source this host lets us read, plus rasdaemon.

The kernel log is read from the first of these that works: systemd's journal (`journalctl -k`, which
keeps past boots), /dev/kmsg (the ring buffer: this boot only, and only what still fits), `dmesg`
(the same buffer through a tool that exists where journald does not). rasdaemon's SQLite database
adds the machine checks it recorded. Reading a kernel log usually needs privileges, so a source that
is missing, denied or broken becomes a note saying what to grant or install, never an exception: the
caller decides what a read without a kernel log means. Commands and paths are injectable for tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import re
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from sdcscan.errors import UsageError
from sdcscan.sentinel.kernel_events import KernelEvent, ParseStats, mce_detail, parse_messages
from sdcscan.timefmt import iso_utc

DEFAULT_RASDAEMON_DB = "/var/lib/rasdaemon/ras-mc_ctx.db"
SUBPROCESS_TIMEOUT_S = 30.0
MAX_LOG_BYTES = 256 << 20  # the ring buffer is at most a few MiB; a "kmsg" larger than this is not one
PERMISSION_HINT = (
    "reading the kernel log needs root, or membership of the adm / systemd-journal group; "
    "on kmsg/dmesg kernel.dmesg_restrict=1 needs CAP_SYSLOG"
)
# journalctl: "No journal files were opened due to insufficient permissions." (exit 1), or as a user
# who only has their own journal, "Hint: You are currently not seeing messages from other users and the
# system." (exit 0, no kernel lines); dmesg: "read kernel buffer failed: Operation not permitted".
_DENIED = (
    "insufficient permissions",
    "not seeing messages from other users",
    "not permitted",
    "ermission denied",
)
_DMESG_RECORD = re.compile(r"(?:<(?P<pri>\d+)>)?\[\s*(?P<s>\d+\.\d+)\] ?(?P<text>.*)", re.S | re.A)
_KMSG_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{2})")

Record = tuple[float | None, str]


class Runner(Protocol):
    """`subprocess.run` as the readers call it (tests pass fakes that hang, fail or flood)."""

    def __call__(
        self, args: list[str], *, capture_output: bool, timeout: float, stdin: int, env: dict[str, str]
    ) -> subprocess.CompletedProcess[bytes]: ...


@dataclass(frozen=True, slots=True)
class LogRead:
    """What was read for one window: the events, the sources that gave them, and why others did not."""

    events: list[KernelEvent]
    sources: list[str]  # "journal" | "kmsg" | "dmesg", then "rasdaemon"; empty: no kernel log was read
    notes: list[str]  # one sentence per problem, naming what to grant or install
    stats: ParseStats  # lines looked at, events, lines skipped as unreadable (all sources together)
    since: float  # the window, seconds since the epoch
    until: float

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: the window, sources, notes, counts and every event."""
        return dataclasses.asdict(self)


@dataclass(slots=True)
class _Attempt:
    """One source's try: its records (None: it did not work), what to tell, how many lines were malformed."""

    name: str
    records: list[Record] | None
    notes: list[str] = field(default_factory=list)
    malformed: int = 0


def read_kernel_log(
    since: float,
    until: float,
    *,
    journalctl: str | None = "journalctl",
    kmsg: str | None = "/dev/kmsg",
    dmesg: str | None = "dmesg",
    rasdaemon_db: str | None = DEFAULT_RASDAEMON_DB,
    runner: Runner = subprocess.run,
    proc_stat: str = "/proc/stat",
) -> LogRead:
    """Read the kernel's segfault, trap, machine-check and Xid messages logged between `since` and `until`.

    Args:
        since: start of the window, seconds since the epoch.
        until: end of the window, at or after `since`.
        journalctl, kmsg, dmesg: the command or path of each kernel-log source, tried in this order
            until one works; None leaves that source out.
        rasdaemon_db: rasdaemon's database, read in addition to a kernel log; None leaves it out.
        runner: runs a command like `subprocess.run` (tests pass fakes).
        proc_stat: where the boot time (`btime`) is read, to turn kmsg/dmesg's time since boot into epoch.

    Returns:
        A `LogRead`. When no kernel-log source works, `sources` and `events` are empty and `notes`
        say why (rasdaemon alone is not read: without the kernel log there are no crashes to weigh).

    Raises:
        UsageError: the window is not two finite times with `since` <= `until`.
    """
    _check_window(since, until)
    tries: list[Callable[[], _Attempt]] = []
    if journalctl is not None:
        tries.append(lambda: _read_journal(journalctl, since, until, runner))
    if kmsg is not None:
        tries.append(lambda: _with_boot_time("kmsg", proc_stat, since, lambda b: _read_kmsg(kmsg, b)))
    if dmesg is not None:
        tries.append(
            lambda: _with_boot_time("dmesg", proc_stat, since, lambda b: _read_dmesg(dmesg, b, runner))
        )
    attempts, chosen = _first_working(tries)
    notes = [note for a in attempts for note in a.notes]
    if chosen is None or chosen.records is None:
        notes.append(f"no kernel log could be read ({_tried(journalctl, kmsg, dmesg)}); see the notes above")
        return LogRead([], [], notes, ParseStats(), since, until)
    in_window = [(t, text) for t, text in chosen.records if t is None or since <= t <= until]
    events, stats = parse_messages(in_window, source=chosen.name)
    stats = stats.plus(ParseStats(lines=chosen.malformed, skipped=chosen.malformed))
    sources = [chosen.name]
    if rasdaemon_db is not None:
        ras_events, ras_stats, ras_notes = read_rasdaemon(rasdaemon_db, since, until)
        notes += ras_notes
        if ras_stats is not None:
            events, stats, sources = events + ras_events, stats.plus(ras_stats), [*sources, "rasdaemon"]
    return LogRead(events, sources, notes, stats, since, until)


def _check_window(since: float, until: float) -> None:
    """Refuse a window that is not two finite times in order (UsageError)."""
    for name, value in (("since", since), ("until", until)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise UsageError(f"kernel log window: {name} must be a finite time in seconds, got {value!r}")
    if since > until:
        raise UsageError(f"kernel log window: since ({iso_utc(since)}) is after until ({iso_utc(until)})")


def _first_working(tries: list[Callable[[], _Attempt]]) -> tuple[list[_Attempt], _Attempt | None]:
    """Try the sources in order: every attempt made, and the first that worked (None if none did)."""
    attempts: list[_Attempt] = []
    for attempt in tries:
        attempts.append(attempt())
        if attempts[-1].records is not None:
            return attempts, attempts[-1]
    return attempts, None


def _tried(*sources: str | None) -> str:
    """`tried journalctl, /dev/kmsg, dmesg` or `no source was enabled`."""
    named = [s for s in sources if s is not None]
    return "tried " + ", ".join(named) if named else "no source was enabled"


def _read_journal(cmd: str, since: float, until: float, runner: Runner) -> _Attempt:
    """`journalctl -k -o json` for the window (whole seconds, widened: the caller filters exactly)."""
    window = ["--since", f"@{math.floor(since)}", "--until", f"@{math.ceil(until)}"]
    out, problem = _run([cmd, "-k", "-o", "json", *window, "--no-pager"], runner, "journal")
    if problem is not None:
        return _Attempt("journal", None, [problem])
    records, malformed = _journal_records(out)
    if not records and not malformed:
        # journalctl says nothing, successfully, both when the window was quiet and when there is no
        # journal at all (a container, journald not keeping the kernel log): ask for its last kernel line.
        last, problem = _run([cmd, "-k", "-o", "json", "-n", "1", "--no-pager"], runner, "journal")
        if problem is not None or not last.strip():
            why = (
                problem
                or "journal: holds no kernel messages at all (no journal files, or journald keeps no kernel log)"
            )
            return _Attempt("journal", None, [why])
    notes = [f"journal: {malformed} malformed line(s) skipped"] if malformed else []
    return _Attempt("journal", records, notes, malformed)


def _journal_records(out: bytes) -> tuple[list[Record], int]:
    """journalctl's JSON lines -> (time, message) records and the count of lines that were not records."""
    records: list[Record] = []
    malformed = 0
    for line in out.splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            text = _journal_message(entry["MESSAGE"])
            time = _journal_time(entry.get("__REALTIME_TIMESTAMP"))
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
            malformed += 1
            continue
        records.append((time, text))
    return records, malformed


def _journal_message(value: object) -> str:
    """MESSAGE is a string, or (not UTF-8) a list of byte values, or (repeated) a list of those."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(type(b) is int and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, list) and value and isinstance(value[0], str | list):
        return _journal_message(value[0])
    raise TypeError("MESSAGE is neither text nor bytes")


def _journal_time(value: object) -> float | None:
    """__REALTIME_TIMESTAMP: microseconds since the epoch, as a decimal string (or a number)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).isdigit():
        raise TypeError("__REALTIME_TIMESTAMP is not a count of microseconds")
    return int(value) / 1e6


def _run(argv: list[str], runner: Runner, name: str) -> tuple[bytes, str | None]:
    """Run a reader command: its stdout, or a note saying why it gave nothing usable."""
    env = {**os.environ, "LC_ALL": "C"}  # English messages, which are what is matched below
    try:
        proc = runner(
            argv, capture_output=True, timeout=SUBPROCESS_TIMEOUT_S, stdin=subprocess.DEVNULL, env=env
        )
    except FileNotFoundError:
        return b"", f"{name}: {argv[0]} is not installed (not found on PATH)"
    except subprocess.TimeoutExpired:
        return b"", f"{name}: {argv[0]} did not finish within {SUBPROCESS_TIMEOUT_S:g} s"
    except OSError as err:
        return b"", f"{name}: cannot run {argv[0]}: {err.strerror or err}"
    out, err_text = _bytes(proc.stdout), _bytes(proc.stderr).decode("utf-8", errors="replace")
    if proc.returncode == 0 and out.strip():
        return out, None  # warnings about some files are no reason to throw away what was read
    first = next((ln.strip() for ln in err_text.splitlines() if ln.strip()), "")[:200]
    if any(s in err_text for s in _DENIED):
        return b"", f"{name}: {first or 'permission denied'}; {PERMISSION_HINT}"
    if proc.returncode != 0:
        return b"", f"{name}: {argv[0]} exited with status {proc.returncode}: {first or 'no message'}"
    if "No journal files were found" in err_text:
        return b"", f"{name}: no journal files were found (journald keeps no log here)"
    return out, None


def _bytes(value: object) -> bytes:
    """A runner's stdout/stderr as bytes, whether it gave bytes, text or nothing."""
    if isinstance(value, bytes):
        return value
    return value.encode("utf-8", errors="replace") if isinstance(value, str) else b""


def _with_boot_time(name: str, proc_stat: str, since: float, read: Callable[[float], _Attempt]) -> _Attempt:
    """Run a since-boot reader with the boot time, and say when the window reaches before what it holds."""
    boot = boot_time(proc_stat)
    if boot is None:
        return _Attempt(
            name, None, [f"{name}: no boot time (btime) in {proc_stat}, so its times are unknown"]
        )
    attempt = read(boot)
    times = [t for t, _ in attempt.records or [] if t is not None]
    oldest = min(times, default=None)
    if attempt.records is not None and since < (oldest if oldest is not None else boot):
        start = max(boot, oldest) if oldest is not None else boot
        attempt.notes.append(
            f"{name}: holds only this boot's messages still in the ring buffer, from {iso_utc(start)}; "
            "the window starts earlier, and that part is not covered (a readable journal keeps past boots)"
        )
    return attempt


def boot_time(proc_stat: str = "/proc/stat") -> float | None:
    """The `btime` line of /proc/stat: when this boot began, in seconds since the epoch; None if unreadable.

    kmsg and dmesg stamp messages with time since boot (local_clock); adding btime places them in
    wall-clock time. Time spent suspended is not counted by that clock, so on a laptop that slept the
    result runs early; servers do not suspend.
    """
    try:
        with open(proc_stat, encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "btime" and value.strip().isdigit():
                    return float(int(value))
    except OSError:
        return None
    return None


def _read_kmsg(path: str, boot: float) -> _Attempt:
    """/dev/kmsg, non-blocking, from the oldest record kept to the newest (EAGAIN); a file stands in for tests."""
    try:
        raw, truncated = _read_nonblocking(path)
    except OSError as err:
        return _Attempt("kmsg", None, [_open_note("kmsg", path, err)])
    records, malformed = _kmsg_records(raw, boot)
    notes = [f"kmsg: {malformed} malformed record(s) skipped"] if malformed else []
    if truncated:
        notes.append(f"kmsg: stopped reading {path} after {MAX_LOG_BYTES} bytes")
    return _Attempt("kmsg", records, notes, malformed)


def _read_nonblocking(path: str) -> tuple[bytes, bool]:
    """Every byte readable now (each read of /dev/kmsg returns one record), and whether the cap cut it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    chunks: list[bytes] = []
    total = 0
    try:
        while total <= MAX_LOG_BYTES:
            try:
                chunk = os.read(fd, 1 << 16)  # a kmsg record is at most ~8 KiB; 64 KiB never hits EINVAL
            except BlockingIOError:
                break  # EAGAIN: no newer record
            except BrokenPipeError:
                continue  # EPIPE: records were overwritten while we read; the next read goes on
            if not chunk:
                break  # end of a regular file
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks), total > MAX_LOG_BYTES


def _kmsg_records(raw: bytes, boot: float) -> tuple[list[Record], int]:
    """`pri,seq,usec,flags[,…];message` lines (Documentation/ABI/testing/dev-kmsg) -> kernel records.

    Lines starting with a space continue a record with KEY=value device properties: not message text.
    Records of other facilities than the kernel's (pri >> 3 != 0: user space writing to /dev/kmsg,
    as systemd does at boot) are left out, as `journalctl -k` leaves them out.
    """
    records: list[Record] = []
    malformed = 0
    for line in raw.split(b"\n"):
        if not line or line.startswith(b" "):
            continue
        head, sep, message = line.partition(b";")
        fields = head.split(b",")
        if not sep or len(fields) < 3 or not fields[0].isdigit() or not fields[2].isdigit():
            malformed += 1
            continue
        if int(fields[0]) >> 3 != 0:
            continue
        text = _KMSG_ESCAPE.sub(lambda m: bytes([int(m[1], 16)]), message).decode("utf-8", errors="replace")
        records.append((boot + int(fields[2]) / 1e6, text))
    return records, malformed


def _read_dmesg(cmd: str, boot: float, runner: Runner) -> _Attempt:
    """`dmesg`: `[   12.345678] message` lines; lines without a timestamp cannot be placed and are left out."""
    out, problem = _run([cmd], runner, "dmesg")
    if problem is not None:
        return _Attempt("dmesg", None, [problem])
    records: list[Record] = []
    untimed = 0
    for line in out.decode("utf-8", errors="replace").splitlines():
        m = _DMESG_RECORD.match(line)
        if m is None:
            untimed += bool(line.strip())
        elif m["pri"] is None or int(m["pri"]) >> 3 == 0:
            records.append((boot + float(m["s"]), m["text"]))
    notes = [f"dmesg: {untimed} line(s) without a timestamp left out"] if untimed else []
    return _Attempt("dmesg", records, notes)


def _open_note(name: str, path: str, err: OSError) -> str:
    """Why a file could not be opened, with what to grant when it is a matter of permission."""
    if err.errno in (errno.EPERM, errno.EACCES):
        return f"{name}: {path}: {err.strerror}; {PERMISSION_HINT}"
    if err.errno == errno.ENOENT:
        return f"{name}: {path} does not exist (no such device here, e.g. in a container)"
    return f"{name}: cannot read {path}: {err.strerror or err}"


def read_rasdaemon(
    path: str, since: float, until: float
) -> tuple[list[KernelEvent], ParseStats | None, list[str]]:
    """Machine checks rasdaemon recorded in its SQLite database (ras-record.c, table `mce_record`).

    Opened read-only. Columns are looked up by name, so databases of older or newer rasdaemon
    versions (which add and move columns) are read for what they have: `timestamp` (local time text
    `%Y-%m-%d %H:%M:%S %z`), `walltime` (epoch seconds, preferred when present), `cpu`, `bank`, `status`.

    Returns:
        The `mce` events in the window; counts (None when the database could not be read); notes.
    """
    if not os.path.exists(path):
        return [], None, [f"rasdaemon: no database at {path} (rasdaemon is not installed or not recording)"]
    uri = Path(path).absolute().as_uri() + "?mode=ro"  # read-only: rasdaemon owns the file
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5)) as db:
            columns = {row[1] for row in db.execute("PRAGMA table_info(mce_record)")}
            wanted = [c for c in ("timestamp", "walltime", "cpu", "bank", "status") if c in columns]
            if not {"timestamp", "walltime"} & set(wanted):
                why = "no mce_record table" if not columns else "an mce_record table without a time column"
                return [], None, [f"rasdaemon: {path} has {why}; no machine checks read from it"]
            rows = db.execute(f"SELECT {', '.join(wanted)} FROM mce_record")  # names from a fixed list
            events, stats = _ras_events((dict(zip(wanted, row, strict=True)) for row in rows), since, until)
    except sqlite3.Error as err:
        return [], None, [f"rasdaemon: cannot read {path}: {err}"]
    notes = [f"rasdaemon: {stats.skipped} unreadable mce_record row(s) skipped"] if stats.skipped else []
    return events, stats, notes


def _ras_events(
    rows: Iterator[dict[str, object]], since: float, until: float
) -> tuple[list[KernelEvent], ParseStats]:
    """mce_record rows -> `mce` events in the window; rows with values of the wrong type are skipped."""
    events: list[KernelEvent] = []
    lines = skipped = 0
    for row in rows:
        lines += 1
        try:
            time = _ras_time(row.get("walltime"), row.get("timestamp"))
            cpu, bank, status = (_opt_int(row.get(k)) for k in ("cpu", "bank", "status"))
        except (TypeError, ValueError, OverflowError):
            skipped += 1
            continue
        if since <= time <= until:
            events.append(KernelEvent("mce", time, cpu, detail=mce_detail(bank, status), source="rasdaemon"))
    return events, ParseStats(lines=lines, events=len(events), skipped=skipped)


def _ras_time(walltime: object, timestamp: object) -> float:
    """walltime (epoch seconds) when set, else the timestamp text; TypeError/ValueError if neither is usable."""
    if type(walltime) is int and walltime > 0:
        return float(walltime)
    if not isinstance(timestamp, str):
        raise TypeError("no usable time")
    return datetime.strptime(timestamp.strip(), "%Y-%m-%d %H:%M:%S %z").timestamp()


def _opt_int(value: object) -> int | None:
    """An INTEGER column's value, or None when NULL; TypeError for text or real values."""
    if value is None or type(value) is int:
        return value
    raise TypeError(f"expected an integer, got {type(value).__name__}")
