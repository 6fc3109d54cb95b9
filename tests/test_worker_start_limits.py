"""Issue 33: a worker that cannot be started (a fork or file limit, a dead fork server) is `invalid`.

Under a pids cgroup of a few processes a run printed a `BlockingIOError` traceback, then "interrupted"
and exit 130, with no report. Whatever stops a worker from starting is a limit of the host, never a
miscomputing unit and never a signal: each unit it hits is invalid with a reason naming the limit to
raise, the report is written, and the run exits 3.

The limit is simulated in the child process (a `sitecustomize` that makes `Process.start` fail as the
kernel does), since a real pids cgroup needs privileges CI may not have.
"""

from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pytest

from sdcscan.run.runner import cannot_start
from tests.helpers.cli import TWO, child_env, needs_two_cpus, sdcscan_cmd

FAIL_START = """
import multiprocessing.process as process

def start(self):
    raise OSError({errno}, "simulated")

process.BaseProcess.start = start
"""


@pytest.mark.parametrize(
    ("err", "says"),
    [
        (BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable"), "raise ulimit -u or pids.max"),
        (OSError(errno.EMFILE, "Too many open files"), "raise ulimit -n"),
        (OSError(errno.ENOMEM, "Cannot allocate memory"), "out of memory"),
        (EOFError(), "the fork server that starts workers died"),
        (PermissionError(errno.EPERM, "Operation not permitted"), "PermissionError: [Errno 1]"),
    ],
)
def test_the_reason_names_the_limit_to_raise(err: BaseException, says: str) -> None:
    reason = cannot_start(err)
    assert reason.startswith("could not start its worker: ") and says in reason


@needs_two_cpus
@pytest.mark.parametrize("code", [errno.EAGAIN, errno.EMFILE])
def test_a_worker_that_cannot_start_leaves_its_unit_invalid_with_a_report(tmp_path: Path, code: int) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FAIL_START.format(errno=code))
    env = child_env()
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    out = tmp_path / "r.json"
    args = ["run", "-p", "quick", "--budget", "5s", "--units", TWO, "-o", str(out), "--no-history"]
    proc = subprocess.run(sdcscan_cmd(*args), env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    report = json.loads(out.read_text())
    assert [u["verdict"] for u in report["units"]] == ["invalid", "invalid"]
    assert all(u["reason"].startswith("could not start its worker") for u in report["units"])
