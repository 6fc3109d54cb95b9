"""SIGINT and SIGTERM at any moment end in 130/143 with every finished case reported; workers cannot hurt each other.

Issue 15, findings 2-4: SIGTERM during worker start-up gave tracebacks and exit 1; two signals, or one
while the outputs were written, lost the report; SIGINT was ignored while the fork server imported
torch; one unit's failed set-up could block a healthy unit on the shared queue; a stalled parent
called healthy workers hung.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from sdcscan import interrupts
from sdcscan.cli import cli
from sdcscan.journal import Journal, read_journal
from sdcscan.profile import WorkloadEntry, load_profile
from sdcscan.run.runner import Runner
from sdcscan.run.worker import WorkerConfig
from sdcscan.units import cpu_units
from tests.helpers.cli import TWO, child_env, needs_two_cpus, sdcscan_cmd

# ---------------------------------------------------------------------------------------------------
# The policy itself, in this process: os.kill(own pid) delivers the signal before the next bytecode.


def test_first_signal_raises_with_its_exit_code_and_later_ones_are_only_counted():
    with interrupts.installed():
        with pytest.raises(interrupts.Interrupted) as first:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # never reached: the handler raises at once
        assert first.value.exit_code == 143 and first.value.name == "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # a second signal must not cut the shutdown short
        time.sleep(0.01)
        assert interrupts.received() == signal.SIGTERM


def test_sigint_exits_130():
    with interrupts.installed(), pytest.raises(interrupts.Interrupted) as stop:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    assert stop.value.exit_code == 130


def test_a_signal_in_a_deferred_section_is_raised_when_the_section_ends():
    done = []
    with interrupts.installed(), pytest.raises(interrupts.Interrupted), interrupts.deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        done.append("the rest of the section ran")
    assert done == ["the rest of the section ran"]


def test_after_hold_signals_are_counted_not_raised():
    with interrupts.installed():
        assert interrupts.hold() is None
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
        assert interrupts.received() == signal.SIGINT


def test_hold_returns_a_signal_that_arrived_while_deferred():
    with interrupts.installed():
        interrupts._state.deferring += 1  # a record being written when the signal came
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        assert interrupts.hold() == signal.SIGTERM
        interrupts._state.deferring -= 1
        interrupts.raise_pending()  # holding: nothing is raised any more


class _SignalsItselfWhenCollected:
    """A finalizer during which a signal arrives: Python cannot propagate what its handler raises there."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler runs here, inside the finalizer


def test_a_signal_swallowed_by_a_finalizer_prints_nothing_and_is_raised_at_the_next_safe_point(capfd):
    """Seen in a run: SIGINT landed in a weakref callback of the import machinery, and stderr got
    "Exception ignored in ... Traceback ... Interrupted: SIGINT"."""
    with interrupts.installed():
        _SignalsItselfWhenCollected()  # collected at once: __del__ runs and its Interrupted is swallowed
        assert interrupts.received() == signal.SIGINT
        with pytest.raises(interrupts.Interrupted) as stop:
            interrupts.raise_pending()
        assert stop.value.exit_code == 130
    assert "Traceback" not in capfd.readouterr().err
    assert sys.unraisablehook is not interrupts._on_unraisable  # restored with the handlers


def test_a_signal_taken_while_the_command_line_loaded_is_raised_when_the_command_takes_over():
    """The entry point installs the handlers, the command takes them over. A SIGTERM whose `Interrupted`
    was dropped while the command line loaded (by the compiler, compiling a module on import; or by a
    finalizer) was wiped by the command's fresh `install()`, and the run went on to exit 3 where 143 was
    due (CI, `test_early_signals`; reproduced under load)."""
    with interrupts.installed():
        _SignalsItselfWhenCollected()  # swallowed by a finalizer: pending
        with pytest.raises(interrupts.Interrupted) as stop:
            interrupts.take_over()
        assert stop.value.exit_code == 130
    with interrupts.installed():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)
        except interrupts.Interrupted:
            pass  # what the compiler did, in effect: the exception is gone, the signal was taken
        with pytest.raises(interrupts.Interrupted) as stop:
            interrupts.take_over()
        assert stop.value.exit_code == 143
    with interrupts.installed():
        interrupts.take_over()  # nothing taken: nothing raised
        assert interrupts.received() is None


def test_processes_started_for_the_workers_have_both_signals_blocked_and_none_is_lost_meanwhile():
    """The fork server (and so every worker) starts with SIGINT and SIGTERM blocked; a signal that
    reaches the parent meanwhile is handled once the block ends."""
    probe = "import signal; print(sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))"
    with interrupts.installed(), pytest.raises(interrupts.Interrupted):
        with interrupts.blocked_in_children():
            child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
        time.sleep(1)  # the pending SIGINT is delivered as the block ends
    assert {int(signal.SIGINT), int(signal.SIGTERM)} <= set(json.loads(child.stdout))


def test_a_signal_during_the_block_that_another_thread_receives_is_not_lost():
    """Before: the server was started with SIG_IGN set process-wide, and a Ctrl-C that the kernel handed
    to the progress or telemetry thread meanwhile was discarded (the run went on to its end)."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)  # a thread that does not block signals
    other.start()
    try:
        with interrupts.installed(), pytest.raises(interrupts.Interrupted):
            with interrupts.blocked_in_children():
                signal.pthread_kill(other.ident, signal.SIGINT)  # delivered to that thread, as the kernel may
                time.sleep(0.05)
            time.sleep(1)
    finally:
        stop.set()


# ---------------------------------------------------------------------------------------------------
# The runner: one pipe per worker, and a watchdog that reads the workers' progress before judging.


@pytest.mark.slow
@needs_two_cpus
def test_one_units_failed_set_up_keeps_its_reason_and_does_not_stop_a_healthy_unit(tmp_path):
    """A worker whose set-up fails reports why and exits; the parent may kill it at any moment without
    blocking the healthy unit (before, both shared one queue and its lock)."""
    quick = load_profile("quick").select(["matmul_golden"])
    broken = replace(quick, workloads=(WorkloadEntry("matmul_golden", params={"dtypes": ["no_such_dtype"]}),))
    good_cpu, bad_cpu = cpu_units()[0], cpu_units()[-1]
    configs = [
        WorkerConfig(good_cpu, quick, seed=1, threads=1),
        WorkerConfig(bad_cpu, broken, seed=1, threads=1),
    ]
    journal = Journal(tmp_path / "j.jsonl")
    result = Runner(configs, journal, lambda event: None).run(deadline=time.time() + 6)
    journal.close()
    good, bad = result.states[good_cpu.id], result.states[bad_cpu.id]
    assert bad.problem is not None and bad.problem.startswith("setup failed"), bad.problem
    assert good.problem is None and good.results, good.problem


@pytest.mark.slow
@needs_two_cpus
def test_a_parent_stalled_for_seconds_does_not_make_healthy_workers_hung(run_cli, tmp_path):
    """SIGSTOP the parent for longer than the watchdog's floor (5 s), then SIGCONT: the run passes."""
    out = tmp_path / "r.json"
    env = {**child_env(), "XDG_STATE_HOME": str(tmp_path / "state")}
    proc = subprocess.Popen(
        sdcscan_cmd("run", "--budget", "16s", "--units", TWO, "-o", str(out), "--no-history"),
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    _wait_for_cases(tmp_path, 2)
    proc.send_signal(signal.SIGSTOP)
    time.sleep(7)
    proc.send_signal(signal.SIGCONT)
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 0, stderr
    assert "hung" not in stderr


# ---------------------------------------------------------------------------------------------------
# The command: signals at named moments, then at random ones.


@dataclass
class Trial:
    """One `sdcscan run` in a child process, with its descendants watched so orphans can be found."""

    tmp: Path
    budget: str = "6s"
    extra: tuple[str, ...] = ()  # more arguments for `sdcscan run`
    proc: subprocess.Popen[str] = field(init=False)
    lines: list[tuple[float, str]] = field(default_factory=list)  # (time read, stderr line)
    descendants: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.out = self.tmp / "r.json"
        env = {**child_env(), "XDG_STATE_HOME": str(self.tmp / "state")}
        self.proc = subprocess.Popen(
            sdcscan_cmd(
                "run",
                "--budget",
                self.budget,
                "--units",
                TWO,
                "-o",
                str(self.out),
                "--no-history",
                *self.extra,
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=self.tmp,
        )
        self.reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.reader.start()
        threading.Thread(target=self._watch_descendants, daemon=True).start()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append((time.time(), line.rstrip("\n")))

    def _watch_descendants(self) -> None:
        with_root = psutil.Process(self.proc.pid)
        while self.proc.poll() is None:
            try:
                self.descendants.update(c.pid for c in with_root.children(recursive=True))
            except psutil.Error:
                return
            time.sleep(0.05)

    def wait_for_line(self, prefix: str, timeout: float = 60) -> None:
        end = time.time() + timeout
        while not any(line.startswith(prefix) for _, line in self.lines):
            assert time.time() < end and self.proc.poll() is None, f"no {prefix!r} line: {self.stderr}"
            time.sleep(0.02)

    def finish(self, timeout: float = 60) -> int:
        self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)  # it takes the last lines, up to EOF
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return _shell_code(self.proc.returncode)

    @property
    def stderr(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def verdict_line_at(self) -> float | None:
        """When the run's own `exit: <verdict>` line (a judged run, not an interruption) was read."""
        return next(
            (t for t, line in self.lines if line.startswith("exit: ") and "interrupted" not in line), None
        )

    def assert_clean_end(self) -> None:
        """No traceback, no orphan, and a report holding every case the journal recorded."""
        assert "Traceback" not in self.stderr, self.stderr
        # The fork server exits by itself once it sees the parent gone, but only after its torch import
        # (seconds on a loaded host): allow for that, not for a process that stays.
        end = time.time() + ORPHAN_GRACE_S
        while (alive := _alive(self.descendants)) and time.time() < end:
            time.sleep(0.2)
        assert not alive, f"orphans {alive}: {self.stderr}"
        journal_cases = sum(
            r.get("type") == "case" and r.get("attempt") == 0
            for j in self.tmp.glob("*.journal.jsonl")
            for r in read_journal(j)
        )
        if journal_cases:
            report = json.loads(self.out.read_text())
            assert sum(u["cases_run"] for u in report["units"]) == journal_cases, self.stderr


ORPHAN_GRACE_S = 20.0


def _alive(pids: set[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{pid} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            continue
    return out


def _shell_code(returncode: int) -> int:
    """A process killed by signal N is what a shell (and Slurm, systemd) calls 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _wait_for_cases(tmp: Path, n: int, timeout: float = 60) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if sum(r.get("type") == "case" for j in tmp.glob("*.journal.jsonl") for r in read_journal(j)) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"no {n} cases in a journal under {tmp}")


@pytest.mark.slow
@needs_two_cpus
def test_sigint_right_after_the_journal_line_is_not_ignored(tmp_path):
    """Before: SIGINT was ignored while the fork server imported torch, and the run went on to pass."""
    trial = Trial(tmp_path)
    trial.wait_for_line("journal:")
    trial.proc.send_signal(signal.SIGINT)
    assert trial.finish() == 130, trial.stderr
    assert trial.verdict_line_at() is None
    trial.assert_clean_end()


@pytest.mark.slow
@needs_two_cpus
def test_two_sigterms_a_second_apart_end_in_143_with_the_report(tmp_path):
    trial = Trial(tmp_path, budget="30s")
    _wait_for_cases(tmp_path, 2)
    trial.proc.send_signal(signal.SIGTERM)
    time.sleep(1)
    trial.proc.send_signal(signal.SIGTERM)
    assert trial.finish() == 143, trial.stderr
    assert "interrupted before any case ran" not in trial.stderr
    assert json.loads(trial.out.read_text())["verdict"] == "interrupted"
    trial.assert_clean_end()


@pytest.mark.slow
@needs_two_cpus
def test_sigterm_during_the_re_runs_ends_in_143_with_every_case(tmp_path):
    """A bit flip on every case of cpu:1 makes disputes; SIGTERM once the re-runs have begun."""
    trial = Trial(tmp_path, budget="8s", extra=("--inject", f"{TWO.split(',')[1]}:bitflip"))
    trial.wait_for_line("re-running disputed cases")
    trial.proc.send_signal(signal.SIGTERM)
    assert trial.finish() == 143, trial.stderr
    report = json.loads(trial.out.read_text())
    assert report["verdict"] == "interrupted" and report["run"]["interrupted_by"] == "SIGTERM"
    trial.assert_clean_end()


def test_a_signal_while_the_outputs_are_written_keeps_the_report_and_exits_143(tmp_path, monkeypatch):
    """In this process, with the run itself replaced: SIGTERM arrives inside `publish`."""
    from sdcscan import scan as library

    real_publish = library.publish

    def publish_then_terminated(report, outputs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        real_publish(report, outputs)

    monkeypatch.setattr(library, "publish", publish_then_terminated)
    monkeypatch.setattr(library, "run_and_judge", _judged_without_running)
    monkeypatch.setattr(library, "warm_up_workers", lambda: None)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["run", "--units", "cpu:0", "-o", str(out), "--no-history"])
    assert result.exit_code == 143, result.output
    from tests.helpers.reports import make_report

    assert json.loads(out.read_text()) == json.loads(json.dumps(make_report()))  # complete, as judged
    assert "SIGTERM arrived while the report was being written" in result.output


def _judged_without_running(opts, setup, emit):
    """A judged report, as `run_and_judge` returns it after the runner held the signals."""
    from tests.helpers.reports import make_report

    interrupts.hold()
    return make_report()


RANDOM_TRIALS = int(os.environ.get("SDCSCAN_SIGNAL_TRIALS", "8"))
RANDOM_SEED = int(os.environ.get("SDCSCAN_SIGNAL_SEED", "15"))


@pytest.mark.slow
@needs_two_cpus
@pytest.mark.parametrize("trial_no", range(RANDOM_TRIALS))
def test_signals_at_random_moments(tmp_path, trial_no):
    """One or two SIGINT/SIGTERM at a random moment from start-up to the end of the run (budget 6 s).

    A signal sent before the run printed its verdict must end in 130/143 (the first signal's code);
    in every case: no traceback, no orphan, and the report holds every case the journal recorded.
    Reproduce with SDCSCAN_SIGNAL_SEED and SDCSCAN_SIGNAL_TRIALS.
    """
    rng = random.Random(RANDOM_SEED * 1000 + trial_no)
    signals = rng.choice(
        [[signal.SIGINT], [signal.SIGTERM], [signal.SIGTERM] * 2, [signal.SIGINT, signal.SIGTERM]]
    )
    delay, gap = rng.uniform(0.0, 8.0), rng.uniform(0.0, 1.5)
    trial = Trial(tmp_path)
    time.sleep(delay)
    sent_at = time.time()
    for k, sig in enumerate(signals):
        if k:
            time.sleep(gap)
        if trial.proc.poll() is None:
            trial.proc.send_signal(sig)
    code = trial.finish()
    where = (
        f"seed {RANDOM_SEED}, trial {trial_no}: {[s.name for s in signals]} at {delay:.2f} s\n{trial.stderr}"
    )
    verdict_at = trial.verdict_line_at()
    if verdict_at is None or sent_at < verdict_at - 0.3:
        assert code == interrupts.exit_code(signals[0]), where
    else:  # it came after the verdict was printed: the run had ended, its report decides
        judged = json.loads(trial.out.read_text())["exit_code"]
        assert code in (judged, interrupts.exit_code(signals[0])), where
    trial.assert_clean_end()


@pytest.mark.slow
@needs_two_cpus
def test_a_refused_input_never_voids_a_run_in_which_a_unit_already_miscomputed(tmp_path):
    """A calibration file a unit refuses while it prepares voids the run (exit 2) only while nothing has
    been found: once another unit's case failed, the refusing unit is judged as not having run
    (invalid) and the run goes on, so the fail is never hidden behind a usage error."""
    import json

    from sdcscan import faults
    from sdcscan.calibration import measure as calibrate
    from sdcscan.calibration.table import E_MAX_FLOOR, UNIT_ROUNDOFF
    from sdcscan.units import cpu_model

    table = calibrate.load_table()
    legal = 1.01 * E_MAX_FLOOR * UNIT_ROUNDOFF["float32"]  # accepted at load, too tight for any clean product
    table["entries"] = [
        {**e, "device_model": cpu_model()}
        | ({"e_max": legal, "e_mean": legal} if e["dtype"] == "float32" else {})
        for e in table["entries"]
    ]
    (tmp_path / "tight.json").write_text(json.dumps(table))
    quick = load_profile("quick")
    failing = quick.select(["matmul_golden"])
    # embbag_int8's million-row tables first: seconds of set-up before gemm_fp refuses the file.
    refusing = replace(
        quick,
        workloads=(
            WorkloadEntry("embbag_int8"),
            WorkloadEntry("gemm_fp", params={"calibration": str(tmp_path / "tight.json")}),
        ),
    )
    first, second = cpu_units()[0], cpu_units()[-1]
    configs = [
        WorkerConfig(
            first, failing, seed=1, threads=1, injections=(faults.parse_inject(f"{first.id}:bitflip@1.0"),)
        ),
        WorkerConfig(second, refusing, seed=1, threads=1),
    ]
    journal = Journal(tmp_path / "j.jsonl")
    result = Runner(configs, journal, lambda event: None).run(deadline=time.time() + 20)
    journal.close()
    assert result.refused is None
    refused = result.states[second.id]
    assert refused.problem is not None and refused.problem.startswith("setup refused: gemm_fp calibration")
    assert any(o["status"] == "mismatch" and o["unit"] == first.id for o in result.outcomes)
