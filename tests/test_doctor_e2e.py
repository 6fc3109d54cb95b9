"""`sdcscan doctor` end to end on this machine's CPUs, as a user runs it: its real children, its budget,
its bundles, and a Ctrl-C in the middle of a step."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from sdcscan.doctor.bundle import BUNDLES, MARKDOWN, SUMMARY
from sdcscan.doctor.steps import STEP_NAMES
from tests.helpers.cli import child_env, needs_two_cpus, sdcscan_cmd

pytestmark = [pytest.mark.slow, needs_two_cpus]
SHUTDOWN_S = 30.0  # the promise: the doctor ends within its budget plus this


def _env(tmp_path: Path) -> dict[str, str]:
    env = child_env()
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    return env


# On the worker of the worlds and Spark, never beside them (each takes both cores); beside the other
# worker's tests it passed in 87 s, as the doctor fits a loaded host (issue 43)
@pytest.mark.xdist_group("launched_worlds")
def test_a_90_s_doctor_on_the_cpus_passes_every_step_within_its_budget(tmp_path):
    """Exit 0 in at most budget + 30 s, all five steps ok, five files, and JSON on stdout."""
    started = time.monotonic()
    r = subprocess.run(
        sdcscan_cmd("doctor", "--budget", "90s", "--out", "d", "--json"),
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=90 + SHUTDOWN_S + 30,
    )
    took = time.monotonic() - started
    assert r.returncode == 0, r.stderr[-3000:]
    assert took <= 90 + SHUTDOWN_S
    summary = json.loads(r.stdout)
    assert [(s["name"], s["status"]) for s in summary["steps"]] == [(n, "ok") for n in STEP_NAMES]
    assert summary["steps"][2]["details"]["cases_compared"] > 0
    assert set(summary["steps"][3]["details"]) == {"bitflip", "nan", "hang", "crash"}
    files = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert files == sorted([SUMMARY, MARKDOWN, *BUNDLES]) and len(files) <= 8
    assert json.loads((tmp_path / "d" / SUMMARY).read_text())["exit_code"] == 0
    assert r.stderr.rstrip().endswith("exit: pass")


def test_ctrl_c_mid_step_exits_130_with_a_partial_summary_and_no_process_left(tmp_path):
    """SIGINT while a child runs: the child stops and reports, the doctor writes what ran, exit 130."""
    proc = subprocess.Popen(
        sdcscan_cmd("doctor", "--budget", "90s", "--out", "d"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    time.sleep(random.uniform(8.0, 25.0))  # inside the self-test, a determinism run or the first drill
    descendants = psutil.Process(proc.pid).children(recursive=True)
    os.kill(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-3000:]
    assert stderr.rstrip().endswith("exit: interrupted")
    summary = json.loads((tmp_path / "d" / SUMMARY).read_text())
    assert summary["exit_code"] == 130 and summary["interrupted_by"] == "SIGINT"
    assert summary["steps"][-1]["status"] == "interrupted" and summary["not_run"]
    time.sleep(1.0)
    assert [p.pid for p in descendants if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []


def test_a_killed_doctor_takes_its_running_child_with_it(tmp_path):
    """SIGKILL of the doctor (no handler runs) while its child command runs in its own session: the child
    and what it started are gone within seconds (issue 43: a selftest child lived on for 30-40 s)."""
    proc = subprocess.Popen(
        sdcscan_cmd("doctor", "--budget", "90s", "--out", "d"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 30
    children: list[psutil.Process] = []
    while not children and time.monotonic() < deadline:  # the doctor's first child: the self-test
        time.sleep(0.2)
        children = psutil.Process(proc.pid).children()
    assert children, "the doctor started no child within 30 s"
    time.sleep(2.0)  # the child is past its interpreter's start and running its step
    descendants = psutil.Process(proc.pid).children(recursive=True)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    gone_by = time.monotonic() + 5.0
    while time.monotonic() < gone_by:
        alive = [p.pid for p in descendants if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            break
        time.sleep(0.2)
    assert alive == [], [p.cmdline() for p in descendants if p.is_running()]
