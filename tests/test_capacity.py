"""Issue 33: a run the host cannot hold is refused before any work (exit 2), naming the limit.

Before: `hidden: 1000000000` started every worker and ended in exit 3 (a 256 GB allocation);
`threads_per_unit: 1024` on a small host started 1024 threads per unit; `ulimit -n 16` printed a fork
server's traceback (or an internal error); and a state directory on a nearly full disk let the run
start and lose its journal. Each is now one `Error:` line before the run starts (no `journal:` line,
no journal file), naming the parameter or limit, what the run needs and what the host has.
"""

from __future__ import annotations

import os
import re
import resource
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from sdcscan.errors import ProfileError, UsageError
from sdcscan.profile import builtin_profile_names, load_profile, profile_from_data
from sdcscan.run import capacity
from sdcscan.units import cpu_units
from sdcscan.workloads import SPECS
from tests.helpers.cli import CPUS, child_env, one_error_line, sdcscan_cmd
from tests.helpers.tmpfs import can_mount_tmpfs, on_tmpfs

ONE = f"cpu:{CPUS[0]}"


def _run(tmp_path: Path, *args: str, shell_prefix: str = "") -> subprocess.CompletedProcess[str]:
    env = {**child_env(), "XDG_STATE_HOME": str(tmp_path / "state")}
    cmd = sdcscan_cmd("run", *args)
    if shell_prefix:
        cmd = ["bash", "-c", f"{shell_prefix}; exec {' '.join(shlex.quote(c) for c in cmd)}"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)


def _refused_before_work(done: subprocess.CompletedProcess[str], tmp_path: Path) -> str:
    """Exit 2, one `Error:` line, and nothing of a run: no journal anywhere."""
    assert done.returncode == 2, done.stderr
    assert not list(tmp_path.rglob("*.jsonl")), "a journal was started"
    return one_error_line(done.stderr)


def _profile(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return str(path)


# Memory and threads (item: absurd but well-typed parameters).


def test_a_case_larger_than_the_hosts_memory_is_refused_naming_the_parameter_and_bound(tmp_path):
    """`hidden: 1000000000`: exit 2 naming workloads[0].params.hidden, the memory and the largest
    hidden this host holds."""
    profile = _profile(
        tmp_path,
        "version: 1\nbudget: 5s\nworkloads:\n  - name: train\n    params: {hidden: 1000000000}\n",
    )
    done = _run(tmp_path, "-p", profile, "--units", ONE, "--no-history")
    line = _refused_before_work(done, tmp_path)
    assert "p.yaml: workloads[0].params.hidden (train): 1000000000 needs at least" in line
    assert "this host has available; at most " in line


def test_threads_beyond_the_cpus_this_run_may_use_are_refused(tmp_path):
    """`threads_per_unit: 1024` on a host with fewer CPUs: exit 2 naming the bound."""
    profile = _profile(
        tmp_path, "version: 1\nbudget: 5s\nthreads_per_unit: 1024\nworkloads: [{name: train}]\n"
    )
    done = _run(tmp_path, "-p", profile, "--units", ONE, "--no-history")
    line = _refused_before_work(done, tmp_path)
    cpus = len(cpu_units())
    assert f"threads_per_unit: 1024 is more than the {cpus} logical CPU(s)" in line
    assert f"at most {cpus} here" in line


def test_the_memory_bound_is_the_hosts_and_the_largest_fitting_value_fits(monkeypatch):
    """The bound quoted is exact for the estimate: that value fits, one more does not."""
    monkeypatch.setattr(capacity, "memory_available", lambda: 10**9)
    data = yaml.safe_load("version: 1\nworkloads:\n  - name: matmul_golden\n    params: {m: 100000}\n")
    profile = profile_from_data(data, label="p.yaml", default_name="p")
    with pytest.raises(ProfileError, match=r"params\.m \(matmul_golden\).*at most \d+ here") as refused:
        capacity.check_host_fits(profile, cpu_units()[:1])
    most = int(str(refused.value).rsplit("at most ", 1)[1].split()[0])
    spec = SPECS["matmul_golden"]
    assert spec.memory is not None
    params = {**spec.defaults, "m": most}
    assert spec.memory(params) <= 10**9 < spec.memory({**params, "m": most + 1})


def test_every_shipped_profile_fits_a_small_host(monkeypatch):
    """The built-in profiles' CPU cases fit 1 GB for two units: nothing ordinary is refused."""
    monkeypatch.setattr(capacity, "memory_available", lambda: 10**9)
    two = cpu_units()[:1] * 2
    for name in builtin_profile_names():
        capacity.check_host_fits(load_profile(name), two)


# Open files (item: `ulimit -n 16`).


def _can_lower_open_files() -> bool:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft == resource.RLIM_INFINITY or soft > 16


@pytest.mark.skipif(not _can_lower_open_files(), reason="the open-file limit is already below 16")
def test_ulimit_n_16_is_refused_before_work_naming_the_limit_to_raise(tmp_path):
    """`ulimit -n 16` (soft and hard): exit 2, `raise the limit`, no fork-server traceback."""
    done = _run(tmp_path, "--budget", "3s", "-p", "quick", shell_prefix="ulimit -n 16")
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    line = _refused_before_work(done, tmp_path)
    assert "this process may open 16 (ulimit -n; hard limit 16): raise the limit to" in line


@pytest.mark.skipif(not _can_lower_open_files(), reason="the open-file limit is already below 16")
def test_a_low_soft_limit_under_a_higher_hard_one_is_raised_and_the_run_goes_on(tmp_path):
    """`ulimit -Sn 16`: the run raises its own soft limit; no worker fails for open files."""
    done = _run(
        tmp_path,
        "--budget",
        "4s",
        "-p",
        "quick",
        "--units",
        ONE,
        "--no-history",
        shell_prefix="ulimit -Sn 16",
    )
    assert "Traceback" not in done.stderr and "open files" not in done.stderr, done.stderr
    assert done.returncode in (0, 3), done.stderr  # 3 only where the budget ended before torch was ready
    assert done.stderr.splitlines()[-1].startswith("exit: ")


def test_reserve_open_files_refuses_a_hard_limit_below_the_need(monkeypatch):
    """The need grows with the units; a hard limit below it is a usage error naming both numbers."""
    monkeypatch.setattr(resource, "getrlimit", lambda _: (64, 64))
    with pytest.raises(UsageError, match=r"a run of 100 unit\(s\) needs up to 424 file descriptors"):
        capacity.reserve_open_files(100)


# Disk space (item: the journal's and the outputs' filesystems, checked before the run).


@pytest.mark.slow
def test_a_state_directory_on_a_nearly_full_tmpfs_is_refused_before_any_work(tmp_path):
    """A 64 KiB tmpfs for the state directory: the journal of a 60 s run cannot fit; exit 2 naming the
    filesystem, what is free and what is needed, and nothing is written there."""
    if not can_mount_tmpfs(tmp_path):
        pytest.skip("cannot mount a tmpfs in a private mount namespace here")
    state = tmp_path / "state"
    state.mkdir()
    env = {**child_env(), "XDG_STATE_HOME": str(state)}
    args = ["run", "--budget", "60s", "--units", ONE, "--no-history"]
    done = subprocess.run(
        on_tmpfs(state, "64k", sdcscan_cmd(*args)), env=env, capture_output=True, text=True, timeout=180
    )
    line = _refused_before_work(done, tmp_path)
    assert line.startswith(f"Error: not enough free space on {state}: ")
    assert "kB free, and this run may write" in line and "the journal of up to 1201 cases" in line


def test_a_case_count_bounds_the_journal_claim_with_room_for_re_runs(tmp_path):
    """`--cases` caps the cases a unit runs, so the claim is that count and the re-run window's worth of
    the shortest cases (30 s: 600), not a whole budget's; a budget shorter than the count still rules."""

    def cases_claimed(budget_s: float, cases: int | None) -> str:
        return capacity.run_claims(2, budget_s, tmp_path, [], cases)[0].what

    assert cases_claimed(86_400.0, None) == "the journal of up to 3456002 cases"
    assert cases_claimed(86_400.0, 20) == "the journal of up to 1240 cases"  # 2 units x (20 + 600)
    assert cases_claimed(10.0, 1000) == cases_claimed(10.0, None) == "the journal of up to 402 cases"


@pytest.mark.slow
def test_a_run_of_a_few_cases_with_a_day_s_budget_fits_a_small_state_directory(tmp_path):
    """On a 2 MiB tmpfs a day's budget cannot promise room for its journal (refused before any work),
    but the same run with `--cases 3` needs a few hundred kB: it runs its three cases and passes."""
    if not can_mount_tmpfs(tmp_path):
        pytest.skip("cannot mount a tmpfs in a private mount namespace here")
    state = tmp_path / "state"
    state.mkdir()
    env = {**child_env(), "XDG_STATE_HOME": str(state)}

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        args = ["run", "--budget", "24h", "--units", ONE, "--no-history", *extra]
        cmd = on_tmpfs(state, "2m", sdcscan_cmd(*args))
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)

    assert "the journal of up to 1728001 cases" in _refused_before_work(run(), tmp_path)
    done = run("--cases", "3")  # its journal on the tmpfs
    assert done.returncode == 0, done.stderr
    assert f"journal: {state}" in done.stderr  # the summary is on stderr
    assert re.search(rf"^ {ONE} +pass +3 ", done.stderr, re.MULTILINE), done.stderr


def test_claims_on_one_filesystem_add_up_and_name_every_file(tmp_path, monkeypatch):
    """The journal and the report on one filesystem: refused when together they do not fit."""
    claims = capacity.run_claims(2, 10.0, tmp_path / "journal", [("--out", tmp_path / "r.json")])
    need = sum(c.bytes for c in claims)
    free = need - 1

    class Vfs:
        f_bavail, f_frsize = free, 1

    monkeypatch.setattr(capacity.os, "statvfs", lambda _: Vfs)
    with pytest.raises(UsageError, match=r"the journal of up to 402 cases and --out .*r\.json"):
        capacity.check_disk_space(claims)
    Vfs.f_bavail = need
    capacity.check_disk_space(claims)


def _cgroup(root: Path, rel: str, limit: str, current: int) -> None:
    (root / rel).mkdir(parents=True, exist_ok=True)
    (root / rel / "pids.max").write_text(f"{limit}\n")
    (root / rel / "pids.current").write_text(f"{current}\n")


@pytest.mark.parametrize("layout", ["v1", "v2", "hybrid"])
def test_a_cgroup_task_limit_too_tight_for_the_run_is_refused_naming_it(tmp_path: Path, layout: str) -> None:
    """Issue 43: under a fork limit a worker's fork failed in the fork server, a traceback printed and
    the reason named no limit. The tightest pids.max of this process's cgroup or an ancestor is read
    (v1's pids controller, v2's unified tree, both in a hybrid); a run that needs more is exit 2."""
    base = {"v1": "pids", "v2": "", "hybrid": "unified"}[layout]
    listed = "0::/job/step\n" if layout != "v1" else "8:pids:/job/step\n4:memory:/job\n"
    (tmp_path / "self").write_text(listed)
    _cgroup(tmp_path / base, "job", "30", 25)  # the ancestor: room for 5
    _cgroup(tmp_path / base, "job/step", "max", 3)
    with pytest.raises(
        UsageError,
        match=r"processes: a run of 2 unit\(s\) needs about 14 .*pids.max = 30, 25 in use\) leaves room for 5 more",
    ):
        capacity.check_tasks(2, 1, cgroup_root=tmp_path, self_cgroup=tmp_path / "self")
    _cgroup(tmp_path / base, "job", "300", 25)
    capacity.check_tasks(2, 1, cgroup_root=tmp_path, self_cgroup=tmp_path / "self")  # room for 275: fits


def test_a_process_limit_too_tight_for_the_run_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ulimit -u`, counted against every process and thread of the user (root is not held to it)."""
    real = resource.getrlimit
    monkeypatch.setattr(resource, "getrlimit", lambda r: (6, 6) if r == resource.RLIMIT_NPROC else real(r))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(
        UsageError, match=r"processes: .*the process limit \(ulimit -u 6, \d+ in use by this user\)"
    ):
        capacity.check_tasks(1, 1)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    capacity.check_tasks(1, 1)


def test_a_run_inside_a_tight_pids_cgroup_exits_2_before_any_work(tmp_path: Path) -> None:
    """As a user meets it: `sdcscan run` started inside a cgroup whose pids.max leaves too little room
    (needs a writable cgroup v1 pids controller, as root on this workplace's machines; skipped elsewhere)."""
    group = Path("/sys/fs/cgroup/pids") / f"sdcscan-test-{os.getpid()}"
    try:
        group.mkdir()
    except OSError:
        pytest.skip("cannot create a pids cgroup here")
    try:
        (group / "pids.max").write_text("10\n")
        env = {**child_env(), "XDG_STATE_HOME": str(tmp_path / "state")}
        inner = f"echo $$ > {group}/cgroup.procs && exec " + " ".join(
            sdcscan_cmd("run", "--budget", "3s", "--no-history")
        )
        proc = subprocess.run(
            ["sh", "-c", inner], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
        )
        assert proc.returncode == 2, proc.stderr
        assert one_error_line(proc.stderr).startswith("Error: processes: a run of ")
        assert f"{group}/pids.max = 10" in proc.stderr and "Traceback" not in proc.stderr
    finally:
        group.rmdir()
