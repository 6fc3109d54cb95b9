"""Background (Ripple) mode: priority, per-core and per-GPU pacing, host pacing, starvation is no hang."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from sdcscan.background import host_pacing, idle_gates, priority
from sdcscan.run.watchdog import CaseInFlight, Watchdog
from tests.helpers.cli import CPUS, TWO, needs_two_cpus

# Background mode screens cores that go idle and steps aside from busy ones: the tests need the machine to
# themselves, not a second pytest worker beside them.
pytestmark = pytest.mark.serial


class FakeCore:
    """A core whose busy seconds and this process's own CPU seconds the test moves by hand."""

    def __init__(self) -> None:
        self.now, self.core_s, self.own_s = 1000.0, 0.0, 0.0
        self.others_share = 0.0  # share of the core other processes take while time passes

    def advance(self, seconds: float, *, own_share: float = 0.0) -> None:
        self.now += seconds
        self.core_s += seconds * min(1.0, self.others_share + own_share)
        self.own_s += seconds * own_share

    def gate(self, **kw: Any) -> idle_gates.CoreIdleGate:
        return idle_gates.CoreIdleGate(
            0,
            read_core_s=lambda: self.core_s,
            own_cpu_s=lambda: self.own_s,
            clock=lambda: self.now,
            sleep=self.advance,
            **kw,
        )


def test_core_gate_lets_a_case_start_on_an_idle_core_even_while_the_worker_itself_was_busy() -> None:
    """Its own CPU time is not other work: a worker that ran cases flat out still finds its core idle."""
    core = FakeCore()
    gate = core.gate()
    core.advance(1.0, own_share=1.0)
    assert gate.wait_until_idle(deadline=core.now + 60, stop=lambda: False)
    assert gate.waits == 0 and gate.waited_s == 0.0


def test_core_gate_holds_cases_while_other_work_uses_the_core_and_releases_when_it_stops() -> None:
    """Other work above the bar: the worker waits, in YIELD_S steps, until the core is idle again."""
    core = FakeCore()
    gate = core.gate()
    core.others_share = 0.9
    core.advance(1.0)
    released_at = core.now + 3.0

    def sleep(seconds: float) -> None:
        if core.now >= released_at:
            core.others_share = 0.0
        core.advance(seconds)

    gate._sleep = sleep
    assert gate.wait_until_idle(deadline=core.now + 60, stop=lambda: False)
    assert gate.waits == 1
    assert 3.0 <= gate.waited_s <= 3.0 + 2 * idle_gates.YIELD_S


def test_core_gate_gives_up_at_the_deadline_or_when_told_to_stop() -> None:
    """A core busy to the end: False at the deadline; a stop from the parent: False at once."""
    core = FakeCore()
    gate = core.gate()
    core.others_share = 1.0
    core.advance(1.0)
    assert not gate.wait_until_idle(deadline=core.now + 5, stop=lambda: False)
    assert 4.0 <= gate.waited_s <= 5.0
    core.advance(1.0)
    assert not gate.wait_until_idle(deadline=core.now + 60, stop=lambda: True)


def test_core_gate_does_not_judge_a_window_shorter_than_the_tick_noise() -> None:
    """Within SAMPLE_MIN_S of the last look the core counts as idle: /proc/stat ticks are 10 ms."""
    core = FakeCore()
    gate = core.gate()
    core.others_share = 1.0
    core.advance(idle_gates.SAMPLE_MIN_S / 2)
    assert gate.others_share() is None
    assert gate.wait_until_idle(deadline=core.now + 60, stop=lambda: False)


def test_core_gate_without_readable_counters_never_holds_a_case() -> None:
    """No /proc/stat (a sandbox): pacing is off, SCHED_IDLE still yields the core."""
    gate = idle_gates.CoreIdleGate(0, read_core_s=lambda: None)
    assert gate.wait_until_idle(deadline=1e18, stop=lambda: False)


def test_core_busy_seconds_read_from_a_proc_stat_file(tmp_path) -> None:
    """user+nice+system+irq+softirq+steal count as busy; idle and iowait do not."""
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 100 0 50 999 999 10 20 30 0 0\ncpu1 1 1 1 1 1 1 1 1 0 0\n"
    )
    ticks = os.sysconf("SC_CLK_TCK")
    assert idle_gates.core_busy_s(0, stat_path=str(stat)) == pytest.approx(210 / ticks)
    assert idle_gates.core_busy_s(7, stat_path=str(stat)) is None
    assert idle_gates.core_busy_s(0, stat_path=str(tmp_path / "missing")) is None


class FakeNvml:
    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return [SimpleNamespace(pid=p) for p in self.pids]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]:
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")


def test_gpu_gate_steps_aside_while_another_process_holds_the_gpu() -> None:
    """Another pid on the GPU: wait; only our own pid, or NVML unable to say: go."""
    nvml = FakeNvml([os.getpid(), 4242])
    clock = [0.0]
    job_ends = [2.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds
        if clock[0] >= job_ends[0]:
            nvml.pids = [os.getpid()]

    gate = idle_gates.GpuIdleGate("h", nvml, clock=lambda: clock[0], sleep=sleep)
    assert gate.others() == [4242]
    assert gate.wait_until_idle(deadline=100.0, stop=lambda: False)
    assert gate.waits == 1 and 2.0 <= gate.waited_s <= 2.0 + idle_gates.YIELD_S
    nvml.pids, job_ends[0] = [4242], float("inf")
    assert not gate.wait_until_idle(deadline=clock[0] + 1.0, stop=lambda: False)


def test_load_threshold_rises_with_time_unscreened_and_is_open_when_due() -> None:
    """Quiet bar right after a screen, rising to LOAD_ANY, and no bar once due or never screened."""
    day = host_pacing.MAX_UNSCREENED_S
    bars = [host_pacing.load_threshold(f * day) for f in (0.0, 0.25, 0.5, 0.99)]
    assert bars == sorted(bars) and bars[0] == host_pacing.LOAD_QUIET and bars[-1] < host_pacing.LOAD_ANY
    assert host_pacing.load_threshold(day) == float("inf")
    assert host_pacing.load_threshold(None) == float("inf")


def _pace(loads: list[float | None], unscreened: float | None, budget: float) -> host_pacing.Pacing:
    clock = [0.0]
    seen = iter(loads)

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    return host_pacing.wait_for_quiet_host(
        unscreened_s=unscreened,
        deadline=budget,
        read_load=lambda: next(seen, loads[-1]),
        clock=lambda: clock[0],
        sleep=sleep,
    )


def test_host_pacing_screens_a_quiet_host_at_once_and_waits_out_a_busy_spell() -> None:
    """Quiet: at once. Busy for two looks, then quiet: after two waits. Busy throughout: not screened."""
    assert _pace([0.1], 60.0, 600.0) == host_pacing.Pacing(
        True, False, 60.0, 0.1, pytest.approx(0.25, abs=0.01), 0.0
    )
    waited = _pace([3.0, 3.0, 0.1], 60.0, 600.0)
    assert waited.screen and waited.waited_s == 2 * host_pacing.HOST_CHECK_S
    busy = _pace([3.0], 60.0, 100.0)
    assert (
        not busy.screen and busy.load_per_cpu == 3.0 and busy.waited_s >= 100.0 - 2 * host_pacing.HOST_CHECK_S
    )


def test_host_pacing_forces_a_screen_when_due_or_never_screened_and_ignores_an_unreadable_load() -> None:
    """Due or never screened: screen whatever the load; a load that cannot be read holds nothing back."""
    assert _pace([9.0], host_pacing.MAX_UNSCREENED_S + 1, 100.0).forced
    assert _pace([9.0], None, 100.0).forced
    unknown = _pace([None], 60.0, 100.0)
    assert unknown.screen and not unknown.forced


def test_host_pacing_lets_a_long_wait_raise_the_bar_until_the_screen_is_due() -> None:
    """A host busy at load 0.9 per CPU is screened once the time since its last screen raises the bar."""
    day = host_pacing.MAX_UNSCREENED_S
    p = _pace([0.9], 0.5 * day, day)
    assert p.screen and not p.forced and p.waited_s > 0 and p.threshold >= 0.9


def _granted(queue: Any) -> None:
    granted = priority.lower_priority(idle_scheduler=True)
    with open("/proc/self/oom_score_adj") as f:
        oom = int(f.read())
    queue.put((granted, os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0), oom))


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux scheduling classes")
def test_lower_priority_takes_the_idle_class_and_volunteers_for_the_oom_killer() -> None:
    """In a child (the change is one-way): SCHED_IDLE (or nice 19 where refused), oom_score_adj 1000."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_granted, args=(queue,))
    child.start()
    granted, policy, nice, oom = queue.get(timeout=60)
    child.join(timeout=30)
    assert granted["cpu"] in ("SCHED_IDLE", "nice 19")
    assert policy == os.SCHED_IDLE if granted["cpu"] == "SCHED_IDLE" else nice == 19
    assert granted["oom_score_adj"] == oom == priority.OOM_SCORE_ADJ


def test_run_delay_is_read_from_schedstat_and_none_for_a_missing_process(tmp_path) -> None:
    """schedstat's second field, in seconds; None for a process that is gone or a kernel that says nothing."""
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "schedstat").write_text("123 2500000000 7\n")
    assert priority.run_delay_s(42, proc=str(tmp_path)) == 2.5
    assert priority.run_delay_s(43, proc=str(tmp_path)) is None


def test_watchdog_does_not_count_time_spent_waiting_for_the_cpu() -> None:
    """A case held back 100 s by other work is not hung; the same wait without starvation is."""
    dog = Watchdog()
    dog.main_pass_started(spawned_at=0.0, deadline=10_000.0)
    case = CaseInFlight(3, "train", since=100.0)
    assert dog.check(200.0, ready=True, busy=True, current=case, starved_s=99.0) is None
    assert "hung" in (dog.check(200.0, ready=True, busy=True, current=case) or "")
    assert dog.check(500.0, ready=False, busy=True, current=None, starved_s=450.0) is None
    assert "did not start" in (dog.check(500.0, ready=False, busy=True, current=None) or "")


def _journal_has_a_case(directory) -> bool:
    return any('"type": "case"' in p.read_text() for p in directory.glob("r.*.journal.jsonl"))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _busy_loop_on(cpu: int) -> subprocess.Popen[bytes]:
    """A process spinning on `cpu`, returned once it is pinned there and spinning."""
    code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nprint(flush=True)\nwhile True: pass"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc


@pytest.mark.slow
@needs_two_cpus
def test_a_core_kept_busy_by_other_work_is_not_screened_and_never_called_hung(run_cli, tmp_path) -> None:
    """Background run with a busy loop on one core: that unit is 'not screened' (exit 3, no blame), the
    other passes with its priority recorded; the run ends within budget + the bounded shutdown."""
    busy = _busy_loop_on(CPUS[-1])
    try:
        out = tmp_path / "r.json"
        r = run_cli("run", "-p", "ripple", "--units", TWO, "--budget", "4s", "-o", str(out), timeout=120)
    finally:
        _stop(busy)
    report = json.loads(out.read_text())
    units = {u["id"]: u for u in report["units"]}
    assert r.returncode == 3, (
        r.stderr,
        [(u["id"], u["verdict"], u["reason"], u["cases_run"]) for u in units.values()],
    )
    bad, good = units[f"cpu:{CPUS[-1]}"], units[f"cpu:{CPUS[0]}"]
    assert bad["verdict"] == "invalid" and bad["reason"].startswith(host_pacing.NOT_SCREENED), bad["reason"]
    assert "hung" not in bad["reason"]
    assert good["verdict"] == "pass" and good["cases_run"] > 0, (good, r.stderr)
    assert good["pacing"]["priority"]["oom_score_adj"] == priority.OOM_SCORE_ADJ
    assert report["run"]["background"]["parent_priority"]["cpu"] in ("nice 19", None)
    assert report["run"]["duration_s"] < 4 + 10 + 30 + 3 + 15  # budget, overrun, re-runs, stop, start-up
    assert "nothing points at" in " ".join(r.stderr.split()), r.stderr


@pytest.mark.slow
def test_background_run_on_a_quiet_host_screens_at_full_speed(run_cli, tmp_path) -> None:
    """Idle host: --background runs cases on every unit, records pacing, and exits 0."""
    out = tmp_path / "r.json"
    r = run_cli("run", "-p", "ripple", "--units", f"cpu:{CPUS[0]}", "--budget", "8s", "-o", str(out))
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    assert report["run"]["background"]["pacing"]["screen"] is True
    (unit,) = report["units"]
    assert unit["cases_run"] > 10 and unit["pacing"]["gate"] is True
    status = json.loads(run_cli("status", "--json").stdout)  # coverage goes to the history, per day too
    assert status["coverage_24h"][unit["id"]]["cases"] == unit["cases_run"]
    (today,) = [row for row in status["coverage_by_day"] if row["unit"] == unit["id"]]
    assert today["cases"] == unit["cases_run"] and today["seconds"] > 0


def test_a_host_that_stays_busy_is_not_screened_and_says_so(monkeypatch, tmp_path) -> None:
    """Host pacing never opens within the budget: no worker starts, every unit is 'not screened'
    (exit 3, could not judge), and the run's note names the load and the bar it was held to."""
    from sdcscan import scan
    from sdcscan.outputs.publish import Outputs
    from sdcscan.profile import load_profile

    monkeypatch.setattr(host_pacing, "load_per_cpu", lambda: 5.0)
    monkeypatch.setattr(host_pacing, "HOST_CHECK_S", 0.05)
    monkeypatch.setattr(scan, "_unscreened_s", lambda opts: 3600.0)
    opts = scan.ScanOptions(
        profile=load_profile("ripple"),
        budget_s=0.5,
        units=f"cpu:{CPUS[0]}",
        outputs=Outputs(history=tmp_path / "h.sqlite3", record_history=False),
        journal=tmp_path / "j.jsonl",
    )
    notes: list[str] = []
    report = scan.run_and_judge(opts, scan.prepare(opts), lambda e: notes.append(getattr(e, "text", "")))
    assert report["exit_code"] == 3
    (unit,) = report["units"]
    assert unit["verdict"] == "invalid" and unit["cases_run"] == 0
    assert unit["reason"].startswith(host_pacing.NOT_SCREENED) and "load 5.00 per CPU" in unit["reason"]
    pacing = report["run"]["background"]["pacing"]
    assert pacing["screen"] is False and pacing["unscreened_s"] == 3600.0
    assert any(n.startswith(host_pacing.NOT_SCREENED) for n in notes)


@pytest.mark.slow
def test_a_worker_steps_aside_while_its_core_is_busy_and_resumes_after(tmp_path) -> None:
    """Other work takes the unit's core for 3 s mid-run: the worker waits (pacing records it), then
    goes on screening; the unit passes, nothing is called hung."""
    import time

    from tests.helpers.cli import child_env, sdcscan_cmd

    env = {**child_env(), "XDG_STATE_HOME": str(tmp_path / "state")}
    cpu, out = CPUS[0], tmp_path / "r.json"
    args = ["run", "-p", "ripple", "--units", f"cpu:{cpu}", "--budget", "14s", "-o", str(out)]
    run = subprocess.Popen(
        sdcscan_cmd(*args),
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not _journal_has_a_case(tmp_path):
            time.sleep(0.1)
        busy = _busy_loop_on(cpu)
        time.sleep(3.0)
        _stop(busy)
        _, stderr = run.communicate(timeout=120)
    finally:
        run.kill()
    assert run.returncode == 0, stderr
    (unit,) = json.loads(out.read_text())["units"]
    assert unit["verdict"] == "pass"
    assert unit["pacing"]["waits"] >= 1 and unit["pacing"]["waited_s"] > 0
