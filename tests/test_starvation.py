"""A worker that the host keeps off its CPU is slow, not hung (issue 43): the watchdog subtracts the time
the worker waited for a CPU (/proc/PID/schedstat) in every mode, and a worker it does stop says the host
was busy, with the load and the share of a core it got."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdcscan.run.runner import starvation_note
from tests.helpers.cli import child_env, needs_two_cpus, sdcscan_cmd

pytestmark = pytest.mark.serial  # the tests load the cores themselves, and measure what a worker then gets

HOG = "import os, sys, time\nos.sched_setaffinity(0, {0})\nos.nice(-19)\nend = time.time() + float(sys.argv[1])\nwhile time.time() < end:\n    pass\n"


def test_a_stopped_workers_reason_names_a_busy_host_only_when_it_was_starved() -> None:
    """The note appears at a quarter of the judged time or more, with the share of a core it got."""
    assert starvation_note(1.0, 10.0) == ""
    note = starvation_note(9.0, 10.0)
    assert "host busy: load" in note and "waited 9 s of 10 s" in note and "at most 10% of one" in note


@pytest.mark.slow
@needs_two_cpus
@pytest.mark.skipif(os.geteuid() != 0, reason="the hogs take a higher priority (nice -19), which needs root")
def test_a_worker_starved_for_longer_than_the_case_limit_is_not_killed_as_hung(tmp_path: Path) -> None:
    """Three nice -19 loops pinned to cpu:0 for 9 s leave its worker about 0.5% of the core, so burnin's
    matmul_golden case (tenths of a second) runs past the watchdog's 5 s floor; it resumes when they end
    and the unit passes."""
    out = tmp_path / "r.json"
    args = ("run", "-p", "burnin", "--units", "cpu:0", "--workloads", "matmul_golden", "--budget", "25s",
            "-o", str(out), "--no-history")  # fmt: skip
    env = {**child_env(), "XDG_STATE_HOME": str(tmp_path / "state")}
    run = subprocess.Popen(sdcscan_cmd(*args), stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    time.sleep(8.0)  # the worker is ready and has a median case time
    hogs = [subprocess.Popen([sys.executable, "-c", HOG, "9"]) for _ in range(3)]
    for hog in hogs:
        hog.wait(timeout=30)
    _, stderr = run.communicate(timeout=120)
    report = json.loads(out.read_text())
    unit = report["units"][0]
    assert run.returncode == 0 and unit["verdict"] == "pass", (unit.get("reason"), stderr[-2000:])
