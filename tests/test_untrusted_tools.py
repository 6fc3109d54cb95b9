"""The kernel-log tools are untrusted: a `journalctl` or `dmesg` that floods, prints one endless line,
hangs, ignores SIGTERM or leaves children behind costs a bounded time and memory, is killed with its
whole process group, and is named in a note; SIGINT/SIGTERM while one is read end sdcscan promptly.

Each fake tool is a script put first on PATH (or passed as the command). The sentinel runs in a child
process whose bounds are shortened (timeout, cap) so the tests take seconds; the child reports its own
peak memory as it exits. Processes the fakes start are found by a marker in their command line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sdcscan import interrupts
from sdcscan.sentinel import kernel_log, window
from sdcscan.sentinel.kernel_log import read_kernel_log
from sdcscan.sentinel.tool import LineSplitter
from tests.helpers.cli import child_env

SINCE, UNTIL = 1700000000.0, 1700003600.0
TIMEOUT_S = 2.0  # the tools' timeout in these tests (30 s in production)
CAP = 16 << 20  # the output cap in these tests (256 MiB in production)
FLOOD_TIMEOUT_S, FLOOD_CAP = 40.0, 4 << 20  # the flood tests: the cap, not the timeout, ends the read
SLACK_S = 6.0  # interpreter start-up, the other sources, a loaded CI machine

# Runs `sdcscan ARGS` with the tools' bounds shortened, and writes its peak RSS (KiB) to PEAK_FILE on exit.
# The host's GPUs are left out: finding them imports torch, which is not what the peak should measure.
# The address-space limit only keeps an unbounded reader (today's bug) from taking the test machine down.
BOUNDED_SDCSCAN = """
import atexit, resource, sys
timeout_s, cap, peak_file = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
def peak():  # VmHWM: ru_maxrss would carry over the forked test runner's peak across exec
    with open("/proc/self/status") as status:
        hwm = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(peak_file, "w") as f:
        f.write(hwm)
atexit.register(peak)
from sdcscan import units
from sdcscan.sentinel import kernel_log
kernel_log.SUBPROCESS_TIMEOUT_S, kernel_log.MAX_LOG_BYTES = timeout_s, cap
units.gpu_units = lambda: []  # not what this is about; on a GPU host it would import torch (and CUDA)
sys.argv = ["sdcscan", *sys.argv[4:]]
from sdcscan.cli import main
main()
"""

FLOOD_LINES = """#!{python}
import sys
line = b'{{"MESSAGE": "not a kernel line", "__REALTIME_TIMESTAMP": "oops"}}\\n' * 4096
while True:
    sys.stdout.buffer.write(line)
"""
FLOOD_ONE_LINE = """#!{python}
import sys
chunk = b"x" * (1 << 20)
while True:
    sys.stdout.buffer.write(chunk)  # never a newline
"""
# Ignores SIGTERM and SIGINT, and leaves a child of its own: only a SIGKILL to its group ends both.
HANG = """#!/bin/sh
trap '' TERM INT
echo started > "{started}"
sleep {marker} &
sleep {marker}
"""

# Leaves children in sessions of their own, which its group's kill does not reach: one sleeps on with
# the tool's stdout; one holds nothing of it. Then the tool hangs, or (`exit`) ends at once.
ESCAPES = """#!/bin/sh
setsid sleep {marker} &
setsid sleep {marker} 1 > /dev/null 2>&1 < /dev/null &
{then}
"""


@pytest.fixture
def marker() -> Iterator[str]:
    """A number no other process sleeps for: the fakes' `sleep MARKER` processes are found by it."""
    value = str(900000 + uuid.uuid4().int % 99999)
    yield value
    for proc in _left_behind(value):  # never leave a test's own processes behind, whatever it found
        proc.kill()


def _left_behind(marker: str) -> list[psutil.Process]:
    """Live (not zombie) processes started by a fake with this marker."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if marker in (proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def _assert_nothing_left(marker: str) -> None:
    end = time.monotonic() + 2.0  # SIGKILL is immediate; give the kernel a moment to tear them down
    while _left_behind(marker) and time.monotonic() < end:
        time.sleep(0.05)
    assert _left_behind(marker) == []


def _fake(tmp_path: Path, name: str, body: str, **fmt: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(body.format(python=sys.executable, **fmt))
    path.chmod(0o755)
    return path


def _sentinel_cmd(
    tmp_path: Path, *args: str, timeout_s: float = TIMEOUT_S, cap: int = CAP
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a bounded `sdcscan sentinel --since 1h --no-history --json`."""
    env = {
        **child_env(),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
    }
    cmd = [sys.executable, "-c", BOUNDED_SDCSCAN, str(timeout_s), str(cap), str(tmp_path / "peak")]
    return [*cmd, "sentinel", "--since", "1h", "--no-history", "--json", *args], env


def _journal_notes(doc: dict[str, object]) -> list[str]:
    section = doc["sentinel"]
    assert isinstance(section, dict)
    return [n for n in section["notes"] if n.startswith("journal:")]


def _assert_exit_follows_sources(r: subprocess.CompletedProcess[str], doc: dict[str, object]) -> None:
    """README: exit 0 when a kernel log was read (here /dev/kmsg or dmesg, where readable), else 3."""
    section = doc["sentinel"]
    assert isinstance(section, dict)
    assert "journal" not in section["sources"]
    assert r.returncode == doc["exit_code"] == (0 if section["sources"] else 3), r.stderr


@pytest.mark.parametrize("flood", [FLOOD_LINES, FLOOD_ONE_LINE], ids=["many-lines", "one-endless-line"])
def test_a_journalctl_that_prints_without_end_is_cut_at_the_cap_and_killed(tmp_path, marker, flood) -> None:
    """Output without end (many lines, or one line without a newline): sdcscan stops reading at the cap,
    kills the tool, says so, and holds about nothing of it: its peak memory stays far below the cap."""
    _fake(tmp_path, "journalctl", flood)
    # The cap must trip before the timeout, even on a loaded machine: a long timeout and a small cap.
    cmd, env = _sentinel_cmd(tmp_path, timeout_s=FLOOD_TIMEOUT_S, cap=FLOOD_CAP)
    started = time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90)
    elapsed = time.monotonic() - started
    doc = json.loads(r.stdout)
    notes = _journal_notes(doc)
    assert any(f"output cut at {FLOOD_CAP >> 20} MiB, killed" in n for n in notes), notes
    assert any("it held no journal record" in n for n in notes), notes
    _assert_exit_follows_sources(r, doc)
    assert elapsed < FLOOD_TIMEOUT_S
    peak_mib = int((tmp_path / "peak").read_text()) / 1024
    assert peak_mib < 150, f"peak RSS {peak_mib:.0f} MiB"  # the interpreter and sdcscan: ~60 MiB
    assert not [
        p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])
    ]


def test_a_journalctl_that_hangs_is_killed_with_its_children_at_the_timeout(tmp_path, marker) -> None:
    """A journalctl that ignores SIGTERM and starts a child, then hangs: killed with that child at the
    timeout, named in a note, and the next source is read."""
    _fake(tmp_path, "journalctl", HANG, marker=marker, started=str(tmp_path / "started"))
    cmd, env = _sentinel_cmd(tmp_path)
    started = time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    doc = json.loads(r.stdout)
    assert f"journal: journalctl did not finish within {TIMEOUT_S:g} s, killed" in _journal_notes(doc)
    _assert_exit_follows_sources(r, doc)
    assert elapsed < TIMEOUT_S + SLACK_S
    _assert_nothing_left(marker)


@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid(1) (util-linux)")
@pytest.mark.parametrize("then", ["sleep 300", "exit 0"], ids=["hangs", "exits"])
def test_children_a_journalctl_moved_to_sessions_of_their_own_are_killed_too(tmp_path, marker, then) -> None:
    """Issue 43: a `setsid` child of a fake journalctl survived the group's kill. Now a child that left
    the group is killed as the tool's descendant (the tool hangs) or, once the tool has ended and the
    child was handed to init, as a holder of the tool's stdout; one that kept nothing of the tool and
    whose parent has ended is a daemon it started on purpose, which no reader can tell from any other."""
    _fake(tmp_path, "journalctl", ESCAPES, marker=marker, then=then)
    cmd, env = _sentinel_cmd(tmp_path)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    _assert_exit_follows_sources(r, json.loads(r.stdout))
    left = _left_behind(marker)
    if then == "exit 0":  # the detached one with nothing of the tool's is left (killed by the fixture)
        end = time.monotonic() + 2.0
        while len(left) > 1 and time.monotonic() < end:
            time.sleep(0.05)
            left = _left_behind(marker)
        assert [p.cmdline()[-1] for p in left] == ["1"], left  # `sleep MARKER 1`: the detached one
    else:
        _assert_nothing_left(marker)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_while_a_hung_tool_is_read_ends_sdcscan_at_once_and_kills_the_tool(
    tmp_path, marker, signum, code
) -> None:
    """SIGTERM or SIGINT while journalctl hangs: sdcscan exits 143/130 within a second or two, says
    `exit: interrupted`, and the tool (which ignores both) and its child are gone."""
    flag = tmp_path / "started"
    _fake(tmp_path, "journalctl", HANG, marker=marker, started=str(flag))
    cmd, env = _sentinel_cmd(tmp_path)
    cmd[3] = "60"  # a long timeout: only the signal may end this
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 30
        while not flag.exists() and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.05)
        assert flag.exists(), "the fake journalctl never started"
        time.sleep(0.2)
        sent = time.monotonic()
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=20)
        honoured_s = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, stderr
    assert stderr.strip().splitlines()[-1] == "exit: interrupted"
    assert honoured_s < 3.0
    _assert_nothing_left(marker)


def test_a_flooding_dmesg_is_cut_too(tmp_path, marker) -> None:
    """dmesg is run the same way: a flood of timed lines is cut at the cap, killed, and what was read
    is used (the flood stops short of filling memory, then hangs, so today's reader fails gently)."""
    cap = 4 << 20
    dmesg = _fake(
        tmp_path,
        "dmesg",
        "#!{python}\nimport sys, time\nline = b'[   20.000000] just a line\\n' * 4096\n"
        "for _ in range(200):\n    sys.stdout.buffer.write(line)\nsys.stdout.flush()\ntime.sleep(1000)\n",
    )
    stat = tmp_path / "stat"
    stat.write_text(f"btime {int(SINCE) - 10}\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel_log, "MAX_LOG_BYTES", cap)
        mp.setattr(kernel_log, "SUBPROCESS_TIMEOUT_S", TIMEOUT_S)
        started = time.monotonic()
        read = read_kernel_log(
            SINCE, UNTIL, journalctl=None, kmsg=None, dmesg=str(dmesg), rasdaemon_db=None, proc_stat=str(stat)
        )
    assert time.monotonic() - started < TIMEOUT_S
    assert read.sources == ["dmesg"] and read.stats.lines > 0
    assert any(n.startswith(f"dmesg: {dmesg}: output cut at {cap >> 20} MiB, killed") for n in read.notes), (
        read.notes
    )
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(dmesg) in (p.info["cmdline"] or [])]


def test_a_cut_journal_ends_the_window_where_reading_stopped(tmp_path, marker) -> None:
    """A journal of real records, more than the cap: what was read is used, and the window ends at the
    newest record read, so the scan that follows starts there and nothing is lost."""
    cap = 4 << 20
    journal = _fake(
        tmp_path,
        "journalctl",
        "#!{python}\nimport json, sys, time\n"
        "for i in range(200000):\n"
        "    t = str(int(({start} + i / 100) * 1e6))\n"
        "    print(json.dumps({{'MESSAGE': 'a line ' + 'y' * 60, '__REALTIME_TIMESTAMP': t}}))\n"
        "sys.stdout.flush()\ntime.sleep(1000)\n",
        start=str(int(SINCE) + 1),
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel_log, "MAX_LOG_BYTES", cap)
        mp.setattr(kernel_log, "SUBPROCESS_TIMEOUT_S", TIMEOUT_S)
        read = read_kernel_log(
            SINCE, UNTIL, journalctl=str(journal), kmsg=None, dmesg=None, rasdaemon_db=None
        )
    assert read.sources == ["journal"]
    assert SINCE + 1 < read.until < UNTIL and read.stats.lines > 1000
    (note,) = [n for n in read.notes if "output cut" in n]
    assert note.startswith(f"journal: {journal}: output cut at {cap >> 20} MiB, killed")
    assert "where the window now ends" in note


def test_a_runs_window_is_read_within_the_deadline_it_is_given(tmp_path, marker, monkeypatch) -> None:
    """In `sdcscan run` the kernel log of the run's window must not hold the run past its end bound: a
    hung journalctl is killed at the deadline, and the notes say why; without a deadline, RUN_READ_S."""
    _fake(tmp_path, "journalctl", HANG, marker=marker, started=str(tmp_path / "started"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    now = time.time()
    started = time.monotonic()
    found = window.scan_window_quietly(now - 60, now, {}, deadline=time.time() + 1.5)
    assert time.monotonic() - started < 1.5 + 1.0
    assert found is not None
    assert any(
        "did not finish within" in n and "(its share of the time for reading the kernel log), killed" in n
        for n in found.section["notes"]
    ), found.section["notes"]
    _assert_nothing_left(marker)

    monkeypatch.setattr(window, "RUN_READ_S", 1.0)
    started = time.monotonic()
    found = window.scan_window_quietly(now - 60, now, {})
    assert time.monotonic() - started < 1.0 + 1.0
    _assert_nothing_left(marker)


def test_a_signal_the_run_holds_ends_the_read_within_its_grace(tmp_path, marker, monkeypatch) -> None:
    """At the end of a run signals are only recorded (the report must be written): the read notices a
    SIGTERM anyway and stops within SIGNAL_GRACE_S, killing the tool."""
    _fake(tmp_path, "journalctl", HANG, marker=marker, started=str(tmp_path / "started"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(kernel_log, "SUBPROCESS_TIMEOUT_S", 60.0)
    now = time.time()
    with interrupts.installed():
        interrupts.hold()  # as the runner does once it stops
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        started = time.monotonic()
        try:
            found = window.scan_window_quietly(now - 60, now, {}, deadline=time.time() + 60)
            elapsed = time.monotonic() - started
        finally:
            timer.join()  # the signal lands while ours are the handlers, whatever happened above
        assert interrupts.received() == signal.SIGTERM
    assert elapsed < 0.5 + kernel_log.SIGNAL_GRACE_S + 1.0
    assert found is not None
    assert any("stopped and killed: SIGTERM received" in n for n in found.section["notes"]), found.section
    _assert_nothing_left(marker)


def test_an_over_long_line_is_dropped_as_it_streams_past_never_held() -> None:
    """A 64 MiB line without a newline costs no more than the line limit: it is dropped, counted, and
    the lines around it are handed over intact."""
    got: list[bytes] = []
    lines = LineSplitter(got.append, 1 << 20)
    chunk = b"x" * (1 << 16)
    tracemalloc.start()
    try:
        lines.feed(b"before\nstart of a long one")
        for _ in range(1024):
            lines.feed(chunk)
        lines.feed(b"end\nafter\nlast")
        lines.finish()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == [b"before", b"after", b"last"]
    assert lines.over_long == 1
    assert peak < 4 << 20
