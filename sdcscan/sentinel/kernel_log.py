"""Read the kernel log for a time window, from whichever source this host lets us read, plus rasdaemon.

The kernel log is read from the first of these that works: systemd's journal (`journalctl -k`, which
keeps past boots), /dev/kmsg (the ring buffer: this boot only, and only what still fits), `dmesg`
(the same buffer through a tool that exists where journald does not). rasdaemon's SQLite database
adds the machine checks it recorded. Reading a kernel log usually needs privileges, so a source that
is missing, denied or broken becomes a note saying what to grant or install, never an exception: the
caller decides what a read without a kernel log means. Commands and paths are injectable for tests.

The tools are not trusted (`sentinel.tool`): each runs in its own process group, for at most
SUBPROCESS_TIMEOUT_S (less when the caller gives a deadline), its output read line by line up to
MAX_LOG_BYTES, no line longer than MAX_LINE_BYTES kept; what trips is killed with its group and said
in a note. A SIGINT or SIGTERM while a tool runs kills it and raises `interrupts.Interrupted`, or,
where the caller holds signals (the end of a run), ends the read within SIGNAL_GRACE_S.
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
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from sdcscan import interrupts
from sdcscan.errors import UsageError
from sdcscan.sentinel.kernel_events import KernelEvent, ParseStats, mce_detail, parse_messages
from sdcscan.sentinel.tool import LineSplitter, ToolRun, run_tool
from sdcscan.timefmt import iso_utc

DEFAULT_RASDAEMON_DB = "/var/lib/rasdaemon/ras-mc_ctx.db"
SUBPROCESS_TIMEOUT_S = 30.0  # the longest one tool (journalctl, dmesg) may run
MAX_LOG_BYTES = 256 << 20  # the ring buffer is at most a few MiB; a "kmsg" larger than this is not one
MAX_LINE_BYTES = 1 << 20  # a journal entry is at most a few KiB (journald's LineMax: 48 KiB); longer is junk
SIGNAL_GRACE_S = 1.0  # a signal the caller holds (a run's end) leaves the read this long, then stops it
FALLBACK_RESERVE_S = 2.0  # under a deadline, kept from a hung tool for the sources after it (ms each)
RASDAEMON_STEPS = 10_000  # SQLite steps between looks at the clock while rasdaemon's database is read
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
    """`subprocess.run` as the readers call it (tests pass fakes that hang, fail or flood).

    When none is given, the tools run through `sentinel.tool.run_tool` instead: streamed, capped, in
    their own process group, killed when a bound trips.
    """

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
    read_until: float | None = None  # output cut: the time of the newest record read, where coverage ends


class _Limits:
    """How long the read may still take: the caller's deadline, cut to SIGNAL_GRACE_S by a held signal.

    A signal that raises (nobody holds it) ends the read at once through `interrupts.Interrupted`; one
    that the caller holds (a run writing its report) is only recorded, and is seen here.
    """

    def __init__(self, deadline: float | None) -> None:
        self.end = None if deadline is None else time.monotonic() + (deadline - time.time())
        self.signal: int | None = None
        self.reserve_s = 0.0  # kept for the sources still to try, when there is time for both
        self.left()

    def left(self) -> float:
        """Seconds the read may still take (infinite without a deadline or a signal)."""
        if self.signal is None and (received := interrupts.received()) is not None:
            self.signal = received
            grace = time.monotonic() + SIGNAL_GRACE_S
            self.end = grace if self.end is None else min(self.end, grace)
        return math.inf if self.end is None else self.end - time.monotonic()

    def tool_timeout(self) -> float:
        """What the next tool may take: SUBPROCESS_TIMEOUT_S, or less when the read's time runs out first
        (less the reserve for the sources after it, where the time allows both)."""
        left = self.left()
        share = left - self.reserve_s if left > self.reserve_s else left
        return max(0.0, min(SUBPROCESS_TIMEOUT_S, share))

    def reason(self) -> str | None:
        """Why the read must stop now, or None while it may go on."""
        if self.left() > 0:
            return None
        if self.signal is not None:
            return f"{interrupts.signal_name(self.signal)} received"
        return "no time was left for reading the kernel log"

    def stopped_by_signal(self) -> bool:
        """For a tool's wait: a held signal came and its grace is over (a deadline is the tool's timeout)."""
        return self.reason() is not None and self.signal is not None


@dataclass(frozen=True, slots=True)
class _Tools:
    """How the readers run commands: a test's fake `runner`, else bounded (`sentinel.tool`), within `limits`."""

    runner: Runner | None
    limits: _Limits


@dataclass(frozen=True, slots=True)
class _Output:
    """What running a reader command came to: its lines went to the caller's `on_line` as they came."""

    problem: str | None  # why it gave nothing usable (None: its lines stand)
    printed: bool = False  # its stdout held something other than whitespace
    cut: bool = False  # it printed more than MAX_LOG_BYTES: the lines are only the start of its output
    over_long: int = 0  # lines longer than MAX_LINE_BYTES, dropped


def read_kernel_log(
    since: float,
    until: float,
    *,
    journalctl: str | None = "journalctl",
    kmsg: str | None = "/dev/kmsg",
    dmesg: str | None = "dmesg",
    rasdaemon_db: str | None = DEFAULT_RASDAEMON_DB,
    runner: Runner | None = None,
    proc_stat: str = "/proc/stat",
    deadline: float | None = None,
) -> LogRead:
    """Read the kernel's segfault, trap, machine-check and Xid messages logged between `since` and `until`.

    Args:
        since: start of the window, seconds since the epoch.
        until: end of the window, at or after `since`.
        journalctl, kmsg, dmesg: the command or path of each kernel-log source, tried in this order
            until one works; None leaves that source out.
        rasdaemon_db: rasdaemon's database, read in addition to a kernel log; None leaves it out.
        runner: runs a command like `subprocess.run` (tests pass fakes); None: bounded (`sentinel.tool`).
        proc_stat: where the boot time (`btime`) is read, to turn kmsg/dmesg's time since boot into epoch.
        deadline: when the whole read must be over (seconds since the epoch); each tool gets at most
            SUBPROCESS_TIMEOUT_S and never past it, and a source not tried by then is left out. None:
            no deadline but the tools' own.

    Returns:
        A `LogRead`. When no kernel-log source works, `sources` and `events` are empty and `notes`
        say why (rasdaemon alone is not read: without the kernel log there are no crashes to weigh).

    Raises:
        UsageError: the window is not two finite times with `since` <= `until`.
        interrupts.Interrupted: SIGINT or SIGTERM while the log was read (the tool running then was
            killed with its process group); not where the caller holds signals: see `_Limits`.
    """
    _check_window(since, until)
    # Where the caller handles SIGINT/SIGTERM (a run, the doctor) this changes nothing; elsewhere a
    # SIGTERM's default action would end sdcscan and leave the tool running in its own session.
    with interrupts.installed():
        tools = _Tools(runner, _Limits(deadline))
        return _read_sources(since, until, journalctl, kmsg, dmesg, rasdaemon_db, tools, proc_stat)


def _read_sources(
    since: float,
    until: float,
    journalctl: str | None,
    kmsg: str | None,
    dmesg: str | None,
    rasdaemon_db: str | None,
    tools: _Tools,
    proc_stat: str,
) -> LogRead:
    """`read_kernel_log` once the window is checked and signals are handled."""
    tries: list[tuple[str, Callable[[], _Attempt]]] = []
    if journalctl is not None:
        tries.append((journalctl, lambda: _read_journal(journalctl, since, until, tools)))
    if kmsg is not None:
        tries.append((kmsg, lambda: _with_boot_time("kmsg", proc_stat, since, lambda b: _read_kmsg(kmsg, b))))
    if dmesg is not None:
        tries.append(
            (
                dmesg,
                lambda: _with_boot_time("dmesg", proc_stat, since, lambda b: _read_dmesg(dmesg, b, tools)),
            )
        )
    attempts, chosen = _first_working(tries, tools.limits)
    notes = [note for a in attempts for note in a.notes]
    if chosen is None or chosen.records is None:
        notes.append(f"no kernel log could be read ({_tried(journalctl, kmsg, dmesg)}); see the notes above")
        return LogRead([], [], notes, ParseStats(), since, until)
    if chosen.read_until is not None and since <= chosen.read_until < until:
        until = chosen.read_until  # the window is what was read: a scan from here on loses nothing
    in_window = [(t, text) for t, text in chosen.records if t is None or since <= t <= until]
    events, stats = parse_messages(in_window, source=chosen.name)
    stats = stats.plus(ParseStats(lines=chosen.malformed, skipped=chosen.malformed))
    sources = [chosen.name]
    if rasdaemon_db is not None:
        limits = tools.limits
        if (why := limits.reason()) is not None:
            notes.append(f"rasdaemon: {rasdaemon_db} not read: {why}")
        else:
            ras_events, ras_stats, ras_notes = read_rasdaemon(
                rasdaemon_db, since, until, stop=limits.reason, busy_timeout_s=min(5.0, limits.left())
            )
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


def _first_working(
    tries: list[tuple[str, Callable[[], _Attempt]]], limits: _Limits
) -> tuple[list[_Attempt], _Attempt | None]:
    """Try the sources in order while time is left: every attempt made, and the first that worked (or None)."""
    attempts: list[_Attempt] = []
    for i, (_, attempt) in enumerate(tries):
        if (why := limits.reason()) is not None:
            rest = ", ".join(name for name, _ in tries[i:])
            attempts.append(_Attempt("", None, [f"kernel log: {rest} not tried: {why}"]))
            break
        limits.reserve_s = FALLBACK_RESERVE_S if i + 1 < len(tries) else 0.0
        attempts.append(attempt())
        if attempts[-1].records is not None:
            return attempts, attempts[-1]
    return attempts, None


def _tried(*sources: str | None) -> str:
    """`tried journalctl, /dev/kmsg, dmesg` or `no source was enabled`."""
    named = [s for s in sources if s is not None]
    return "tried " + ", ".join(named) if named else "no source was enabled"


class _JournalLines:
    """journalctl's JSON lines, one at a time -> the records in the window, and what was seen and skipped."""

    def __init__(self, since: float, until: float) -> None:
        self.since, self.until = since, until
        self.records: list[Record] = []
        self.seen = 0  # lines that were records, in the window or not
        self.malformed = 0
        self.latest: float | None = None  # the newest record's time: how far a cut output got

    def add(self, raw: bytes) -> None:
        for line in raw.splitlines():
            if line.strip():
                self._add(line)

    def _add(self, line: bytes) -> None:
        try:
            entry = json.loads(line)
            text = _journal_message(entry["MESSAGE"])
            time = _journal_time(entry.get("__REALTIME_TIMESTAMP"))
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError):
            self.malformed += 1
            return
        self.seen += 1
        if time is not None:
            self.latest = time if self.latest is None else max(self.latest, time)
        if time is None or self.since <= time <= self.until:  # only what the window holds is kept
            self.records.append((time, text))


def _read_journal(cmd: str, since: float, until: float, tools: _Tools) -> _Attempt:
    """`journalctl -k -o json` for the window (whole seconds, widened: the caller filters exactly)."""
    window = ["--since", f"@{math.floor(since)}", "--until", f"@{math.ceil(until)}"]
    lines = _JournalLines(since, until)
    got = _run([cmd, "-k", "-o", "json", *window, "--no-pager"], "journal", tools, lines.add)
    if got.problem is not None:
        return _Attempt("journal", None, [got.problem])
    malformed = lines.malformed + got.over_long
    notes = [_malformed_note("journal", malformed, got.over_long)] if malformed else []
    if got.cut:
        cut = _cut_note("journal", cmd, lines.latest)
        if not lines.seen:  # a flood without one journal record is no journal
            return _Attempt("journal", None, [*notes, f"{cut}; it held no journal record"])
        notes.append(cut)
        return _Attempt("journal", lines.records, notes, malformed, read_until=lines.latest)
    if not lines.seen and not malformed:
        # journalctl says nothing, successfully, both when the window was quiet and when there is no
        # journal at all (a container, journald not keeping the kernel log): ask for its last kernel line.
        last = _run([cmd, "-k", "-o", "json", "-n", "1", "--no-pager"], "journal", tools, _ignore_line)
        if last.problem is not None or not last.printed:
            why = (
                last.problem
                or "journal: holds no kernel messages at all (no journal files, or journald keeps no kernel log)"
            )
            return _Attempt("journal", None, [why])
    return _Attempt("journal", lines.records, notes, malformed)


def _malformed_note(name: str, malformed: int, over_long: int) -> str:
    longer = f" ({over_long} longer than {_size(MAX_LINE_BYTES)})" if over_long else ""
    return f"{name}: {malformed} malformed line(s) skipped{longer}"


def _cut_note(name: str, cmd: str, latest: float | None) -> str:
    """What a tool that printed more than MAX_LOG_BYTES left unread."""
    unread = (
        "the rest was not read"
        if latest is None
        else f"read up to {iso_utc(latest)}, where the window now ends (the next scan starts there)"
    )
    return f"{name}: {cmd}: output cut at {_size(MAX_LOG_BYTES)}, killed (a kernel log is smaller); {unread}"


def _size(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


def _ignore_line(line: bytes) -> None:
    """A probe's lines: only whether it printed anything counts."""


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


def _run(argv: list[str], name: str, tools: _Tools, on_line: Callable[[bytes], None]) -> _Output:
    """Run a reader command, its stdout's lines to `on_line`: whether they stand, or why not."""
    env = {**os.environ, "LC_ALL": "C"}  # English messages, which are what is matched below
    timeout = tools.limits.tool_timeout()
    if (why := tools.limits.reason()) is not None:
        return _Output(f"{name}: {argv[0]} not run: {why}")
    if tools.runner is not None:
        return _run_with(tools.runner, argv, name, on_line, env, timeout)
    try:
        run = run_tool(
            argv,
            on_line=on_line,
            timeout_s=timeout,
            max_bytes=MAX_LOG_BYTES,
            max_line_bytes=MAX_LINE_BYTES,
            env=env,
            stop=tools.limits.stopped_by_signal,
        )
    except FileNotFoundError:
        return _Output(f"{name}: {argv[0]} is not installed (not found on PATH)")
    except OSError as err:
        return _Output(f"{name}: cannot run {argv[0]}: {err.strerror or err}")
    return _ended(argv[0], name, run, timeout, tools.limits.reason())


def _ended(cmd: str, name: str, run: ToolRun, timeout: float, stop_reason: str | None) -> _Output:
    """A bounded run's ending, as the readers need it."""
    if run.ending == "cut":
        return _Output(None, run.printed, cut=True, over_long=run.over_long)
    if run.ending == "timed_out":
        short = (
            "" if timeout >= SUBPROCESS_TIMEOUT_S else " (its share of the time for reading the kernel log)"
        )
        return _Output(f"{name}: {cmd} did not finish within {timeout:.3g} s{short}, killed")
    if run.ending == "stopped":
        return _Output(f"{name}: {cmd} stopped and killed: {stop_reason or 'asked to stop'}")
    problem = _judge(cmd, name, run.returncode, run.printed, run.stderr)
    return _Output(problem, run.printed, over_long=run.over_long)


def _run_with(
    runner: Runner,
    argv: list[str],
    name: str,
    on_line: Callable[[bytes], None],
    env: dict[str, str],
    timeout: float,
) -> _Output:
    """`_run` through a test's `subprocess.run`-like fake: the whole output at once, split the same way."""
    try:
        proc = runner(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env)
    except FileNotFoundError:
        return _Output(f"{name}: {argv[0]} is not installed (not found on PATH)")
    except subprocess.TimeoutExpired:
        return _Output(f"{name}: {argv[0]} did not finish within {timeout:.3g} s")
    except OSError as err:
        return _Output(f"{name}: cannot run {argv[0]}: {err.strerror or err}")
    out = _bytes(proc.stdout)
    problem = _judge(argv[0], name, proc.returncode, bool(out.strip()), _bytes(proc.stderr))
    if problem is not None:
        return _Output(problem)
    lines = LineSplitter(on_line, MAX_LINE_BYTES)
    lines.feed(out[:MAX_LOG_BYTES])
    cut = len(out) > MAX_LOG_BYTES
    if not cut:
        lines.finish()
    return _Output(None, lines.printed, cut=cut, over_long=lines.over_long)


def _judge(cmd: str, name: str, returncode: int | None, printed: bool, stderr: bytes) -> str | None:
    """Why a command that ended by itself gave nothing usable, or None when its output stands."""
    if returncode == 0 and printed:
        return None  # warnings about some files are no reason to throw away what was read
    err_text = stderr.decode("utf-8", errors="replace")
    first = next((ln.strip() for ln in err_text.splitlines() if ln.strip()), "")[:200]
    if any(s in err_text for s in _DENIED):
        return f"{name}: {first or 'permission denied'}; {PERMISSION_HINT}"
    if returncode != 0:
        status = "?" if returncode is None else returncode
        return f"{name}: {cmd} exited with status {status}: {first or 'no message'}"
    if "No journal files were found" in err_text:
        return f"{name}: no journal files were found (journald keeps no log here)"
    return None


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


class _DmesgLines:
    """dmesg's lines, one at a time -> kernel records timed from boot; lines without a timestamp counted."""

    def __init__(self, boot: float) -> None:
        self.boot = boot
        self.records: list[Record] = []
        self.untimed = 0
        self.latest: float | None = None

    def add(self, raw: bytes) -> None:
        for line in raw.decode("utf-8", errors="replace").splitlines():
            m = _DMESG_RECORD.match(line)
            if m is None:
                self.untimed += bool(line.strip())
                continue
            time = self.boot + float(m["s"])
            self.latest = time if self.latest is None else max(self.latest, time)
            if m["pri"] is None or int(m["pri"]) >> 3 == 0:
                self.records.append((time, m["text"]))


def _read_dmesg(cmd: str, boot: float, tools: _Tools) -> _Attempt:
    """`dmesg`: `[   12.345678] message` lines; lines without a timestamp cannot be placed and are left out."""
    lines = _DmesgLines(boot)
    got = _run([cmd], "dmesg", tools, lines.add)
    if got.problem is not None:
        return _Attempt("dmesg", None, [got.problem])
    notes = [f"dmesg: {lines.untimed} line(s) without a timestamp left out"] if lines.untimed else []
    if got.over_long:
        notes.append(f"dmesg: {got.over_long} line(s) longer than {_size(MAX_LINE_BYTES)} left out")
    if got.cut:
        cut = _cut_note("dmesg", cmd, lines.latest)
        if not lines.records:
            return _Attempt("dmesg", None, [*notes, f"{cut}; it held no timed kernel line"])
        notes.append(cut)
        return _Attempt("dmesg", lines.records, notes, read_until=lines.latest)
    return _Attempt("dmesg", lines.records, notes)


def _open_note(name: str, path: str, err: OSError) -> str:
    """Why a file could not be opened, with what to grant when it is a matter of permission."""
    if err.errno in (errno.EPERM, errno.EACCES):
        return f"{name}: {path}: {err.strerror}; {PERMISSION_HINT}"
    if err.errno == errno.ENOENT:
        return f"{name}: {path} does not exist (no such device here, e.g. in a container)"
    return f"{name}: cannot read {path}: {err.strerror or err}"


def read_rasdaemon(
    path: str,
    since: float,
    until: float,
    *,
    stop: Callable[[], str | None] | None = None,
    busy_timeout_s: float = 5.0,
) -> tuple[list[KernelEvent], ParseStats | None, list[str]]:
    """Machine checks rasdaemon recorded in its SQLite database (ras-record.c, table `mce_record`).

    Opened read-only. Columns are looked up by name, so databases of older or newer rasdaemon
    versions (which add and move columns) are read for what they have: `timestamp` (local time text
    `%Y-%m-%d %H:%M:%S %z`), `walltime` (epoch seconds, preferred when present), `cpu`, `bank`, `status`.

    Args:
        stop: asked every RASDAEMON_STEPS steps of SQLite; a reason (not None) abandons the read.
        busy_timeout_s: how long to wait while rasdaemon holds a write lock on the database.

    Returns:
        The `mce` events in the window; counts (None when the database could not be read); notes.
    """
    if not os.path.exists(path):
        return [], None, [f"rasdaemon: no database at {path} (rasdaemon is not installed or not recording)"]
    uri = Path(path).absolute().as_uri() + "?mode=ro"  # read-only: rasdaemon owns the file
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=busy_timeout_s)) as db:
            if stop is not None:
                db.set_progress_handler(lambda: stop() is not None, RASDAEMON_STEPS)
            columns = {row[1] for row in db.execute("PRAGMA table_info(mce_record)")}
            wanted = [c for c in ("timestamp", "walltime", "cpu", "bank", "status") if c in columns]
            if not {"timestamp", "walltime"} & set(wanted):
                why = "no mce_record table" if not columns else "an mce_record table without a time column"
                return [], None, [f"rasdaemon: {path} has {why}; no machine checks read from it"]
            rows = db.execute(f"SELECT {', '.join(wanted)} FROM mce_record")  # names from a fixed list
            events, stats = _ras_events((dict(zip(wanted, row, strict=True)) for row in rows), since, until)
    except sqlite3.Error as err:
        stopped = stop() if stop is not None else None
        if stopped is not None:
            return [], None, [f"rasdaemon: stopped reading {path}: {stopped}"]
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
