"""A CPU quota that would starve the run's workers is refused before any work (exit 2, naming it), and a
unit the host starved anyway is `invalid` with the cause and the remedy, never blamed (issue 45)."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sdcscan.errors import UsageError
from sdcscan.judgement.assemble import judge_and_build
from sdcscan.run import capacity
from sdcscan.run.runner import starvation_note
from sdcscan.scan import _problems
from tests.helpers.cli import child_env, sdcscan_cmd
from tests.helpers.reports import make_report


def _tree(tmp_path: Path, files: dict[str, str], self_cgroup: str) -> dict[str, Path]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    (tmp_path / "self").write_text(self_cgroup)
    return {"cgroup_root": root, "self_cgroup": tmp_path / "self"}


def test_a_v1_quota_of_an_ancestor_is_found(tmp_path: Path) -> None:
    """cgroup v1, cpu mounted with cpuacct: the parent's 0.2 CPUs bind the child, whose own is unlimited."""
    where = _tree(tmp_path, {
        "cpu,cpuacct/job/cpu.cfs_quota_us": "20000", "cpu,cpuacct/job/cpu.cfs_period_us": "100000",
        "cpu,cpuacct/job/step/cpu.cfs_quota_us": "-1", "cpu,cpuacct/job/step/cpu.cfs_period_us": "100000",
    }, "4:memory:/job\n1:cpu,cpuacct:/job/step\n0::/\n")  # fmt: skip
    cpus, said = capacity.cpu_quota(**where) or (None, "")
    assert cpus == 0.2 and said.endswith("job/cpu.cfs_quota_us = 20000 per 100000 µs period")


def test_a_v2_quota_and_no_quota(tmp_path: Path) -> None:
    where = _tree(tmp_path, {"pod/cpu.max": "150000 100000", "pod/c/cpu.max": "max 100000"}, "0::/pod/c\n")
    assert capacity.cpu_quota(**where) == (1.5, f"{where['cgroup_root']}/pod/cpu.max = 150000 100000")
    unlimited = _tree(tmp_path / "u", {"pod/cpu.max": "max 100000"}, "0::/pod\n")
    assert capacity.cpu_quota(**unlimited) is None
    capacity.check_cpu_quota(64, **unlimited)


def test_a_quota_below_half_a_cpu_per_unit_is_refused_with_the_remedy(tmp_path: Path) -> None:
    where = _tree(tmp_path, {"pod/cpu.max": "150000 100000"}, "0::/pod\n")
    capacity.check_cpu_quota(3, **where)  # half a CPU each: slow, but the watchdog allows for it
    with pytest.raises(UsageError, match=r"1\.50 CPUs .* a run of 4 unit\(s\) needs at least 2 .* raise the "
                       r"quota, or select at most 3 unit\(s\) with --units"):  # fmt: skip
        capacity.check_cpu_quota(4, **where)
    tight = _tree(tmp_path / "t", {"pod/cpu.max": "10000 100000"}, "0::/pod\n")
    with pytest.raises(UsageError, match=r"0\.10 CPUs .* raise the quota to at least 0\.5 CPUs per unit"):
        capacity.check_cpu_quota(1, **tight)


def _v1_cpu_cgroup() -> Path | None:
    """A new cgroup v1 cpu directory this test may use (root, a writable hierarchy), or None."""
    base = Path("/sys/fs/cgroup/cpu")
    if os.geteuid() != 0 or not (base / "cgroup.procs").exists():
        return None
    path = base / f"sdcscan-test-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
    except OSError:
        return None
    return path


def test_a_run_under_a_real_ten_percent_quota_exits_2_naming_it(tmp_path: Path) -> None:
    """The issue's case: under a 10% CPU quota every unit ended `invalid` ("worker did not start within
    0 s"). Now the run is refused before any work, with the quota's file and the remedy."""
    group = _v1_cpu_cgroup()
    if group is None:
        pytest.skip("needs root and a writable cgroup v1 cpu hierarchy to set a quota")
    try:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("10000")
        env = {**child_env(), "XDG_STATE_HOME": str(tmp_path / "state")}
        cmd = ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh",
               *sdcscan_cmd("run", "--units", "cpu:0", "--budget", "5s")]  # fmt: skip
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    finally:
        for pid in (group / "cgroup.procs").read_text().split():  # none should be left
            subprocess.run(["kill", "-9", pid], check=False)
        group.rmdir()
    assert done.returncode == 2, done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("Error:")]
    assert line.startswith("Error: CPU quota: this process may use 0.10 CPUs (") and str(group) in line
    assert line.endswith("raise the quota to at least 0.5 CPUs per unit screened")


def test_a_starved_unit_is_invalid_with_the_cause_and_the_remedy_never_blamed() -> None:
    """The runner's starved worker (its reason carries the starvation note) becomes a `starved` problem:
    the finding says nothing points at the unit, and how to screen it."""
    reason = "case 4 (gemm_int8) hung: no result after 61 s; worker killed" + starvation_note(58.0, 61.0)
    states = {
        "cpu:0": SimpleNamespace(problem=reason, starved=True, late=None, results=[]),
        "cpu:1": SimpleNamespace(problem="worker died (signal 9)", starved=False, late=None, results=[]),
    }
    problems = _problems(SimpleNamespace(states=states))  # type: ignore[arg-type]
    whole = make_report()
    units: Any = [{"id": u, "kind": "cpu", "model": "m", "cohort": "c", "notes": []} for u in states]
    report = judge_and_build(run=whole["run"], host=whole["host"], software={}, cohorts={"c": {}}, units=units,
                             outcomes=[], problems=problems, interrupted=None)  # fmt: skip
    assert report["exit_code"] == 3 and {u["verdict"] for u in report["units"]} == {"invalid"}
    nexts = {f["unit"]: f["next"] for f in report["findings"] if f["kind"] == "invalid"}
    assert nexts["cpu:0"].startswith("nothing points at cpu:0: the host kept it off its CPU; screen it when")
    assert "--background" in nexts["cpu:0"] and "host busy" in next(
        f["message"] for f in report["findings"] if f["unit"] == "cpu:0"
    )
    assert nexts["cpu:1"].startswith("check the journal and system log for cpu:1")
