"""`sdcscan sentinel` end to end, with a fake `journalctl` first on PATH that serves planted kernel lines,
and the run's own window in `sdcscan run` reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import CPUS, child_env, sdcscan_cmd

FAKE_JOURNALCTL = """#!{python}
# Fake journalctl: logs its argv, then prints each line of $FAKE_KERNEL_LINES as a kernel record of now.
import json, os, sys, time
with open(os.environ["FAKE_JOURNAL_ARGV"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
now = int((time.time() - 2) * 1e6)  # logged a moment before the scan
for text in open(os.environ["FAKE_KERNEL_LINES"]).read().splitlines():
    print(json.dumps({{"MESSAGE": text, "__REALTIME_TIMESTAMP": str(now), "_TRANSPORT": "kernel"}}))
"""
TOP_CPU = max(CPUS)  # the core the tests make an outlier: one this host has


def _segfault(program: str, pid: int, cpu: int) -> str:
    return (
        f"{program}[{pid}]: segfault at 10 ip 00007f0000001000 sp 00007ffd00000000 error 4 in "
        f"libc.so.6[7f0000000000+195000] likely on CPU {cpu} (core {cpu}, socket 0)"
    )


@pytest.fixture
def kernel(tmp_path: Path):
    """Plant kernel lines; returns (env for sdcscan, path of the planted lines, path of journalctl's argv log)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "journalctl"
    fake.write_text(FAKE_JOURNALCTL.format(python=sys.executable))
    fake.chmod(0o755)
    lines, argv = tmp_path / "kernel.txt", tmp_path / "argv.jsonl"
    lines.write_text("")
    env = {
        **child_env(),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    env.update(FAKE_KERNEL_LINES=str(lines), FAKE_JOURNAL_ARGV=str(argv))
    return env, lines, argv


def _sentinel(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        sdcscan_cmd("sentinel", *args), env=env, capture_output=True, text=True, timeout=120
    )


def test_a_core_many_programs_crash_on_is_named_as_a_suspect_without_exit_1(kernel, tmp_path) -> None:
    """20 different programs segfault on one core and nowhere else: that core is the outlier, the finding
    gives the command to screen it, and the history, status and Prometheus file have it; the exit is 0
    (a suspect, not a judged miscompute: only the screen may exit 1)."""
    env, lines, _ = kernel
    lines.write_text("\n".join(_segfault(f"prog{i}", 100 + i, TOP_CPU) for i in range(20)) + "\n")
    prom = tmp_path / "s.prom"
    r = _sentinel(env, "--json", "--prom", str(prom))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 0
    assert [o["unit"] for o in doc["sentinel"]["outliers"]] == [f"cpu:{TOP_CPU}"]
    assert doc["sentinel"]["sources"] == ["journal"]
    (finding,) = [f for f in doc["findings"] if f["kind"] == "sentinel"]
    assert finding["next"] == f"screen it directly: sdcscan run --units cpu:{TOP_CPU} -p burnin"
    assert "exit: pass" in r.stderr
    assert f'sdcscan_sentinel_outlier{{unit="cpu:{TOP_CPU}"}} 1' in prom.read_text()
    status = subprocess.run(
        sdcscan_cmd("status", "--json"), env=env, capture_output=True, text=True, timeout=60
    )
    assert json.loads(status.stdout)["last_sentinel"]["outliers"] == [f"cpu:{TOP_CPU}"]


def test_one_program_crashing_everywhere_is_a_software_bug_not_a_core(kernel) -> None:
    """One program segfaulting 200 times spread over every CPU: no outlier, exit 0."""
    env, lines, _ = kernel
    lines.write_text("\n".join(_segfault("buggy", 7000 + i, CPUS[i % len(CPUS)]) for i in range(200)) + "\n")
    r = _sentinel(env)
    assert r.returncode == 0, r.stderr
    assert "No core stands out" in r.stderr and "exit: pass" in r.stderr


def test_the_next_scan_starts_where_the_last_one_ended(kernel) -> None:
    """Without --since, a scan asks the journal from the end of the last recorded scan; --since overrides."""
    env, _, argv = kernel
    assert _sentinel(env, "--json").returncode == 0
    first_until = json.loads(_sentinel(env, "--json").stdout)["sentinel"]["since"]
    calls = [json.loads(line) for line in argv.read_text().splitlines()]
    windows = [c[c.index("--since") + 1] for c in calls if "--since" in c]
    assert len(windows) >= 2 and windows[-1] != windows[0]
    from sdcscan.timefmt import parse_iso_utc

    assert int(windows[-1].lstrip("@")) == int(parse_iso_utc(first_until))
    r = _sentinel(env, "--since", "2h", "--no-history", "--json")
    assert r.returncode == 0


@pytest.mark.parametrize("since", ["tomorrow", "-5h", "2099-01-01T00:00:00Z", ""])
def test_a_bad_since_is_refused_before_any_log_is_read(kernel, since) -> None:
    """A --since that is no time, in the future or empty: exit 2, one Error line, journalctl never ran."""
    env, _, argv = kernel
    r = _sentinel(env, "--since", since)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().startswith("Error:") and len(r.stderr.strip().splitlines()) == 1
    assert not argv.exists()


def test_no_readable_kernel_log_is_exit_3_with_a_note_saying_what_to_grant(monkeypatch, tmp_path) -> None:
    """Every kernel-log source refused: nothing judged, exit 3, and the note names the permission."""
    from click.testing import CliRunner

    from sdcscan.cli import cli
    from sdcscan.sentinel import window as scan
    from sdcscan.sentinel.kernel_events import ParseStats
    from sdcscan.sentinel.kernel_log import PERMISSION_HINT, LogRead

    def refused(since: float, until: float) -> LogRead:
        return LogRead([], [], [f"journal: permission denied; {PERMISSION_HINT}"], ParseStats(), since, until)

    monkeypatch.setattr(scan, "read_kernel_log", refused)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    r = CliRunner().invoke(cli, ["sentinel", "--json"])
    assert r.exit_code == 3, r.output
    assert json.loads(r.stdout)["exit_code"] == 3
    assert PERMISSION_HINT in " ".join(r.stderr.split()) and "exit: invalid" in r.stderr
    from sdcscan.outputs.sentinel_history import last_sentinel_scan

    # A scan that read nothing is not recorded: the next one still starts where the last real one ended.
    assert last_sentinel_scan(tmp_path / "sdcscan" / "history.sqlite3") is None


@pytest.mark.slow
def test_a_run_reports_the_kernel_log_of_its_own_window_without_changing_its_verdict(
    kernel, tmp_path
) -> None:
    """A machine check logged during the run: the report's sentinel section and a machine_check finding,
    and the run still passes on its tests (exit 0)."""
    env, lines, _ = kernel
    lines.write_text(f"mce: [Hardware Error]: CPU {TOP_CPU}: Machine Check: 0 Bank 5: be00000000800400\n")
    out = tmp_path / "r.json"
    r = subprocess.run(
        sdcscan_cmd("run", "--units", f"cpu:{TOP_CPU}", "--budget", "6s", "-o", str(out)),
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    assert report["sentinel"]["units"][f"cpu:{TOP_CPU}"]["counts"]["mce"] == 1
    assert report["sentinel"]["since"] <= report["run"]["ended_at"]
    assert any(f["kind"] == "machine_check" and f["unit"] == f"cpu:{TOP_CPU}" for f in report["findings"])
