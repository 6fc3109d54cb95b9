"""Issue 33: the `run --distributed` launcher leaves nothing behind when killed, and a SIGTERM at any moment
it can catch ends with a cluster report and an exit code that matches its last `exit:` line.

Before: a SIGKILL of the launcher left its ranks, their fork servers and a resource tracker running
for 90-100 s; a SIGTERM while the ranks were starting gave 143 and no report at all; a SIGTERM as the
summary was shown killed the launcher by the signal after it had printed `exit: ...`.

Real processes and real signals, two ranks of gloo on the CPUs: each test takes tens of seconds on a
busy two-core machine, so they are `slow`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.cli import child_env, sdcscan_cmd

# A launch is a world of ranks on this machine's cores: under two pytest workers (`--dist loadgroup`), the
# launches run one after another on one worker, never two worlds at once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("launched_worlds")]

GRACE_S = 20.0  # a fork server still importing torch when its rank dies exits once the import is done
CODES = {"pass": 0, "fail": 1, "invalid": 3}


class Launch:
    """`sdcscan run --distributed --standalone` with two ranks, its stderr read line by line."""

    def __init__(self, tmp_path: Path, budget: str = "4s") -> None:
        self.state = tmp_path / "state"
        self.out = tmp_path / "cluster.json"
        env = {**child_env(), "XDG_STATE_HOME": str(self.state)}
        args = ["run", "--distributed", "--standalone", "--nproc-per-node", "2", "--budget", budget]
        self.proc = subprocess.Popen(
            sdcscan_cmd(*args, "-o", str(self.out)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for_line(self, prefix: str, timeout: float = 180) -> None:
        end = time.monotonic() + timeout
        while not any(line.startswith(prefix) for line in self.lines):
            assert self.proc.poll() is None and time.monotonic() < end, f"no {prefix!r}: {self.stderr}"
            time.sleep(0.005)

    def finish(self, timeout: float = 180) -> int:
        self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)  # it takes the last lines, up to EOF
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return self.proc.returncode

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    def left(self) -> list[str]:
        """Processes of this run still alive: anything with its state directory in the environment."""
        marker = f"XDG_STATE_HOME={self.state}".encode()
        alive = []
        for p in psutil.process_iter(["pid"]):
            try:
                if (
                    marker in Path(f"/proc/{p.pid}/environ").read_bytes()
                    and p.status() != psutil.STATUS_ZOMBIE
                ):
                    alive.append(f"{p.pid} {' '.join(p.cmdline())[:100]}")
            except (OSError, psutil.Error):
                continue
        return alive

    def assert_nothing_left(self) -> None:
        end = time.monotonic() + GRACE_S
        while (alive := self.left()) and time.monotonic() < end:
            time.sleep(0.2)
        assert not alive, f"left behind: {alive}\n{self.stderr}"


def _fork_servers_of(launcher: int, ranks: int, within_s: float = 180) -> list[int]:
    """Wait until each of the launcher's `ranks` rank processes has started its fork server."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        try:
            family = psutil.Process(launcher).children(recursive=True)
            servers = [p.pid for p in family if "forkserver" in " ".join(p.cmdline())]
        except psutil.Error:
            servers = []
        if len(servers) >= ranks:
            return servers
        time.sleep(0.1)
    raise AssertionError(f"the ranks did not start their fork servers within {within_s} s")


def test_a_killed_launcher_leaves_no_rank_fork_server_or_resource_tracker(tmp_path):
    """SIGKILL of the launcher mid-run: every process of the run is gone within GRACE_S."""
    launch = Launch(tmp_path, budget="60s")
    _fork_servers_of(launch.proc.pid, 2)
    family = psutil.Process(launch.proc.pid).children(recursive=True)
    assert any("resource_tracker" in " ".join(p.cmdline()) for p in family)
    launch.proc.kill()
    assert launch.finish() == -signal.SIGKILL
    launch.assert_nothing_left()


def test_sigterm_while_the_ranks_start_writes_the_cluster_report_and_exits_143(tmp_path):
    """SIGTERM as the launch begins (before any rank can report): 143, `exit: interrupted`, and a
    cluster report at --out that says interrupted, each rank invalid with the reason."""
    launch = Launch(tmp_path)
    launch.wait_for_line("distributed: ")
    launch.proc.send_signal(signal.SIGTERM)
    assert launch.finish() == 143, launch.stderr
    assert launch.lines[-1] == "exit: interrupted", launch.stderr
    assert "Traceback" not in launch.stderr
    report = json.loads(launch.out.read_text())
    assert report["verdict"] == "interrupted" and report["exit_code"] == 143
    assert report["run"]["interrupted_by"] == "SIGTERM"
    assert [u["rank"] for u in report["units"]] == [0, 1]
    for unit in report["units"]:  # the launcher was still loading torch's agent: no rank had started
        assert unit["verdict"] == "invalid", unit
        assert (
            f"the launcher was stopped by SIGTERM before rank {unit['rank']} wrote its report"
            in unit["reason"]
        )
    launch.assert_nothing_left()


def test_sigterm_as_the_summary_is_shown_never_kills_and_the_code_matches_the_last_line(tmp_path):
    """SIGTERM once the ranks ended, as the cluster report is shown: never a death by signal; the exit
    code is the one the last `exit:` line says (the verdict's, or 143 after `exit: interrupted`)."""
    launch = Launch(tmp_path)
    launch.wait_for_line(" unit ")
    launch.proc.send_signal(signal.SIGTERM)
    code = launch.finish()
    assert code >= 0, f"killed by signal {-code}: {launch.stderr}"
    said = [line.removeprefix("exit: ") for line in launch.lines if line.startswith("exit: ")][-1]
    assert code == (143 if said == "interrupted" else CODES[said]), launch.stderr
    assert "Traceback" not in launch.stderr
    assert json.loads(launch.out.read_text())["exit_code"] in (0, 1, 3)
    launch.assert_nothing_left()
