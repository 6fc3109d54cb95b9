"""deploy/: shell syntax and lint, manifest validity and least privilege, the systemd sandbox's score,
and the wrappers' exit-code mapping and time bounds with a fake sdcscan and a fake scontrol."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from sdcscan.outputs.history import record_run
from sdcscan.profile import load_profile
from sdcscan.report.document import Report
from sdcscan.run.rerun_schedule import retest_window
from sdcscan.run.runner import STOP_S, end_bound_s, starvation_note
from sdcscan.run.watchdog import OVERRUN_S
from tests.helpers.reports import make_report

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
SLURM = DEPLOY / "slurm" / "sdcscan-healthcheck.sh"
SCREEN = DEPLOY / "slurm" / "sdcscan-screen.sbatch"
LOOP = DEPLOY / "kubernetes" / "sdcscan-loop.sh"
NPD = DEPLOY / "npd" / "sdcscan-npd.sh"
SERVICE = DEPLOY / "systemd" / "sdcscan.service"
SCRIPTS = sorted([*DEPLOY.rglob("*.sh"), *DEPLOY.rglob("*.sbatch")])
WRAPPER_TIMEOUT_S = 60  # the issue's bound for running a wrapper, and slurmd's for a HealthCheckProgram

FAKE_SDCSCAN = r"""#!/bin/bash
# fake sdcscan. `run ... --out PATH`: logs its arguments and $SDCSCAN_TIMEOUT_S to $FAKE_ARGV_LOG,
# copies $FAKE_REPORT to PATH, prints $FAKE_STDERR, exits $FAKE_RC. FAKE_HANG=term: waits until
# SIGTERM, then writes an interrupted report and exits 143; FAKE_HANG=ignore: ignores SIGTERM.
# `status --json` prints $FAKE_FLAGGED (comma-separated units) as sdcscan's status JSON.
cmd=$1; shift
out=
for arg in "$@"; do [ "$prev" = --out ] && out=$arg; prev=$arg; done
if [ "$cmd" = run ]; then
    echo "$* timeout=${SDCSCAN_TIMEOUT_S:-}" >> "${FAKE_ARGV_LOG:-/dev/null}"
    echo $$ > "${FAKE_PIDFILE:-/dev/null}"
    case ${FAKE_HANG:-} in
    term)
        trap 'kill $!; echo "{\"verdict\": \"interrupted\", \"exit_code\": 143, \"units\": []}" > "$out"; exit 143' TERM
        sleep 30 & wait $!; exit 99 ;;
    ignore)
        trap '' TERM; sleep 30; exit 99 ;;
    esac
    [ -n "${FAKE_STDERR:-}" ] && echo "$FAKE_STDERR" >&2
    [ -n "$out" ] && [ -n "${FAKE_REPORT:-}" ] && cp "$FAKE_REPORT" "$out"
    exit "$FAKE_RC"
fi
flagged=""
for u in ${FAKE_FLAGGED//,/ }; do flagged="$flagged${flagged:+,}{\"unit\": \"$u\"}"; done
echo "{\"flagged\": [$flagged]}"
[ -z "$flagged" ]
"""
# `show node` prints FAKE_NODE_INFO (a node's state as scontrol shows it); other calls are logged.
FAKE_SCONTROL = (
    '#!/bin/bash\nif [ "$1" = show ]; then printf "%s\\n" "${FAKE_NODE_INFO:-}"; exit 0; fi\n'
    'printf "%s\\n" "$@" >> "$SCONTROL_LOG"\n'
)
REAL_SDCSCAN = '#!/bin/sh\nexec "{python}" -m sdcscan "$@"\n'


def _write_executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


# --- every script ------------------------------------------------------------------------------


def test_shell_scripts_have_valid_syntax() -> None:
    """bash -n accepts every shell script in deploy/, and each is executable."""
    assert len(SCRIPTS) >= 4
    for script in SCRIPTS:
        subprocess.run(["bash", "-n", str(script)], check=True)
        assert os.access(script, os.X_OK), f"{script} is not executable"


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="needs shellcheck")
def test_shell_scripts_pass_shellcheck() -> None:
    """shellcheck finds nothing in any script of deploy/."""
    proc = subprocess.run(["shellcheck", "--shell=bash", *map(str, SCRIPTS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_manifests_parse() -> None:
    """YAML and JSON manifests load; the DaemonSet runs the quick profile and writes the textfile to a hostPath."""
    container = _daemonset_pod()["containers"][0]
    assert " ".join(container["args"]).startswith("--profile quick ")
    assert "--prom /textfile/sdcscan.prom" in " ".join(container["args"])
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert _host_paths()["textfile"] == "/var/lib/sdcscan-textfile" and mounts["textfile"] == "/textfile"
    for path in DEPLOY.rglob("*.json"):
        json.loads(path.read_text())


def test_npd_config_maps_a_permanent_condition_to_the_wrapper() -> None:
    """The NPD custom-plugin config is a permanent-condition rule that runs the wrapper."""
    config = json.loads((DEPLOY / "npd" / "sdcscan-plugin.json").read_text())
    assert config["plugin"] == "custom"
    rule = config["rules"][0]
    assert rule["type"] == "permanent" and rule["path"].endswith("sdcscan-npd.sh")
    assert rule["condition"] == config["conditions"][0]["type"]


def test_cron_runs_the_quick_profile_and_prunes_journals() -> None:
    """One cron line runs the quick profile as root after a random wait of up to an hour (issue 45: a
    fleet started every host at the same minute); another deletes journals older than a week; the log
    the first appends to is rotated."""
    lines = [ln for ln in (DEPLOY / "cron" / "sdcscan.cron").read_text().splitlines() if ln and ln[0] != "#"]
    jobs = [ln for ln in lines if not re.match(r"^[A-Z_]+=", ln)]
    assert len(jobs) == 2
    assert re.match(
        r'^(\S+\s+){5}root\s+sleep "\$\(shuf -i 0-3599 -n 1\)" && sdcscan run --profile quick ', jobs[0]
    )
    assert "%" not in jobs[0]  # cron turns % into a newline
    log = re.search(r">>(\S+) 2>&1$", jobs[0])
    assert log is not None
    rotate = (DEPLOY / "cron" / "sdcscan.logrotate").read_text()
    assert re.search(rf"^{re.escape(log.group(1))} {{$", rotate, re.M) and "copytruncate" in rotate
    assert re.match(
        r"^(\S+\s+){5}root\s+find /var/lib/sdcscan .*-name '\*\.journal\.jsonl' .*-delete$", jobs[1]
    )


# --- Slurm -------------------------------------------------------------------------------------


@pytest.fixture
def fake_env(tmp_path: Path) -> dict[str, str]:
    """PATH with a fake sdcscan and scontrol first; the wrappers' state in tmp_path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _write_executable(bin_dir / "sdcscan", FAKE_SDCSCAN)
    _write_executable(bin_dir / "scontrol", FAKE_SCONTROL)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SDCSCAN_STATE_DIR": str(tmp_path / "state"),
        "SDCSCAN_PYTHON": sys.executable,
        "SCONTROL_LOG": str(tmp_path / "scontrol.log"),
        "FAKE_ARGV_LOG": str(tmp_path / "argv.log"),
        "FAKE_FLAGGED": "",
        "FAKE_RC": "0",
    }


def _run(script: Path, env: dict[str, str], tmp_path: Path, rc: int, report: dict[str, Any] | None = None,
         **extra: str) -> tuple[int, str, list[str]]:  # fmt: skip
    """Run a wrapper with the fake sdcscan exiting `rc`; return its exit code, stdout and scontrol's args."""
    full = {**env, "FAKE_RC": str(rc), **extra}
    if report is not None:
        path = tmp_path / "fake-report.json"
        path.write_text(json.dumps(report))
        full["FAKE_REPORT"] = str(path)
    proc = subprocess.run(["bash", str(script)], env=full, capture_output=True, text=True,
                          timeout=WRAPPER_TIMEOUT_S)  # fmt: skip
    log = Path(env["SCONTROL_LOG"])
    calls = log.read_text().splitlines() if log.exists() else []
    return proc.returncode, proc.stdout, calls


def _invalid_report() -> dict[str, Any]:
    return make_report(fail_unit=None, invalid_unit="cpu:0")


def _busy(report: dict[str, Any], unit: str) -> dict[str, Any]:
    """`unit` of `report` stopped on a starved host, as the runner words it (`runner.starvation_note`)."""
    reason = "worker did not start within 61 s" + starvation_note(55.0, 61.0)
    assert "host busy" in reason
    for u in report["units"]:
        if u["id"] == unit:
            u["reason"] = reason
    return report


def _busy_and_dead() -> dict[str, Any]:
    """cpu:0 starved, cpu:1 died: invalid for a reason the host's load does not explain."""
    report = _busy(make_report(fail_unit=None, invalid_unit="cpu:0"), "cpu:0")
    report["units"][1].update(verdict="invalid", reason="worker died (signal 9)")
    return report


def _assert_drained(calls: list[str], reason: str | None) -> None:
    """scontrol was called once to drain this node with `reason`, or never when `reason` is None."""
    if reason is None:
        assert calls == []
        return
    node = socket.gethostname().split(".")[0]
    assert calls[:3] == ["update", f"nodename={node}", "state=drain"]
    assert calls[3].startswith(f"reason={reason}")


@pytest.mark.skipif(shutil.which("hostname") is None, reason="needs hostname(1)")
@pytest.mark.parametrize(
    ("rc", "report", "extra", "want_rc", "reason"),
    [
        (0, make_report(fail_unit=None), {}, 0, None),
        (1, make_report(fail_unit="cpu:1"), {}, 1, "sdcscan: fail cpu:1"),
        (3, _invalid_report(), {}, 1, "sdcscan: invalid cpu:0"),
        (3, _busy(_invalid_report(), "cpu:0"), {}, 0, None),
        (3, _busy_and_dead(), {}, 1, "sdcscan: invalid cpu:0,cpu:1"),
        (3, None, {"FAKE_STDERR": "Error: another sdcscan run is active (pid 7)"}, 0, None),
        (2, None, {}, 0, None),
        (130, None, {}, 0, None),
        (143, None, {}, 0, None),
        (124, None, {}, 0, None),
        (137, None, {}, 0, None),
        (0, make_report(fail_unit=None), {"FAKE_FLAGGED": "cpu:1"}, 1, "sdcscan: flagged cpu:1"),
        (2, None, {"FAKE_FLAGGED": "cpu:1"}, 1, "sdcscan: flagged cpu:1"),
    ],
    ids=["pass", "fail", "invalid", "busy", "busy-and-dead", "locked", "usage", "sigint", "sigterm", "timed-out", "killed", "sticky",
         "sticky-before-usage-error"],
)  # fmt: skip
def test_slurm_wrapper_drains_on_fail_and_invalid(
    fake_env: dict[str, str], tmp_path: Path, rc: int, report: Any, extra: dict[str, str], want_rc: int,
    reason: str | None,
) -> None:  # fmt: skip
    """Exit 1 or 3 (or a sticky flag) drains the node with a reason naming the unit; others never drain, nor
    does an invalid run whose only trouble is a host too busy to screen (issue 45)."""
    code, _, calls = _run(SLURM, fake_env, tmp_path, rc, report, **extra)
    assert code == want_rc
    _assert_drained(calls, reason)


def test_slurm_wrapper_runs_the_healthcheck_profile_by_default(
    fake_env: dict[str, str], tmp_path: Path
) -> None:
    """The HealthCheckProgram runs the short `healthcheck` profile, not quick (61 s: never finished)."""
    _run(SLURM, fake_env, tmp_path, 0, make_report(fail_unit=None))
    argv = Path(fake_env["FAKE_ARGV_LOG"]).read_text()
    assert "--profile healthcheck " in argv
    _run(SLURM, fake_env, tmp_path, 0, make_report(fail_unit=None), SDCSCAN_PROFILE="ripple")
    assert "--profile ripple " in Path(fake_env["FAKE_ARGV_LOG"]).read_text().splitlines()[-1]


def test_slurm_wrapper_stops_a_run_at_its_bound_without_draining(
    fake_env: dict[str, str], tmp_path: Path
) -> None:
    """A run past SDCSCAN_TIMEOUT_S gets SIGTERM, writes its interrupted report, and nothing is drained."""
    code, _, calls = _run(SLURM, fake_env, tmp_path, 0, FAKE_HANG="term", SDCSCAN_TIMEOUT_S="1")
    assert code == 0 and calls == []
    report = json.loads((tmp_path / "state" / "last-report.json").read_text())
    assert report["verdict"] == "interrupted"


def test_slurm_wrapper_kills_a_run_that_ignores_sigterm(fake_env: dict[str, str], tmp_path: Path) -> None:
    """A run that ignores SIGTERM is killed SDCSCAN_KILL_AFTER_S later; nothing is drained or left running."""
    pidfile = tmp_path / "fake.pid"
    code, _, calls = _run(SLURM, fake_env, tmp_path, 0, FAKE_HANG="ignore", FAKE_PIDFILE=str(pidfile),
                          SDCSCAN_TIMEOUT_S="1", SDCSCAN_KILL_AFTER_S="1")  # fmt: skip
    assert code == 0 and calls == []
    assert not _running(int(pidfile.read_text()))


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (one killed with its `timeout` waits for init to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _script_default(script: Path, name: str) -> int:
    """The number a script assigns to `name`, as `NAME=${ENV:-N}` or `NAME=N`."""
    match = re.search(rf"^{name}=(?:\$\{{\w+:-)?(\d+)\}}?\s*(?:#.*)?$", script.read_text(), re.M)
    assert match, f"{script.name} sets no {name}"
    return int(match.group(1))


def test_healthcheck_bounds_fit_inside_slurms_60_s() -> None:
    """sdcscan's worst-case end with the healthcheck profile fits the wrapper's hard bound, and all the
    wrapper's bounded steps (status check, run, reading the report, scontrol) add up to under 60 s."""
    budget = load_profile("healthcheck").budget_s
    worst_end = end_bound_s(budget)
    assert worst_end == budget + OVERRUN_S + retest_window(budget) + STOP_S  # the --help's words
    startup_s = 2.0  # the interpreter and CLI import before the budget's clock starts (~0.5 s here)
    run_s = _script_default(SLURM, "RUN_TIMEOUT_S")
    assert worst_end + startup_s <= run_s
    steps = {
        name: _script_default(SLURM, name)
        for name in ("STATUS_TIMEOUT_S", "READ_TIMEOUT_S", "SCONTROL_TIMEOUT_S")
    }
    kill_after = _script_default(SLURM, "KILL_AFTER_S")
    total = (
        (steps["STATUS_TIMEOUT_S"] + 1)
        + (run_s + kill_after)
        + steps["READ_TIMEOUT_S"]
        + (steps["SCONTROL_TIMEOUT_S"] + 1)
    )
    assert total <= WRAPPER_TIMEOUT_S - 3, f"the wrapper may run {total} s"  # 3 s for the shell itself
    # A passing run reads no report, but may show the node and resume it.
    passing = (
        (steps["STATUS_TIMEOUT_S"] + 1)
        + (run_s + kill_after)
        + (_script_default(SLURM, "SHOW_TIMEOUT_S") + 1)
        + (steps["SCONTROL_TIMEOUT_S"] + 1)
    )
    assert passing <= WRAPPER_TIMEOUT_S - 3, f"a passing run may take {passing} s"


def test_slurm_wrapper_keeps_only_the_newest_journals(fake_env: dict[str, str], tmp_path: Path) -> None:
    """Journals of earlier runs beside the report (one per run) are pruned to the newest five."""
    state = tmp_path / "state"
    state.mkdir()
    journals = [state / f"last-report.2026010{i}T000000Z-abc.journal.jsonl" for i in range(8)]
    for age, journal in enumerate(reversed(journals)):
        journal.write_text("{}\n")
        os.utime(journal, (time.time() - 3600 * age, time.time() - 3600 * age))
    other = state / "other.journal.jsonl"
    other.write_text("{}\n")
    _run(SLURM, fake_env, tmp_path, 0, make_report(fail_unit=None))
    assert sorted(p for p in state.glob("*.journal.jsonl") if p != other) == journals[3:]
    assert other.exists()


@pytest.mark.skipif(shutil.which("hostname") is None, reason="needs hostname(1)")
def test_on_a_gpu_node_the_healthcheck_screens_the_cpus_and_the_batch_job_everything(
    fake_env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 45: a GPU unit's start-up (37-46 s before issue 42, 14 s on an H200 since) leaves the 20 s
    healthcheck profile few cases or none, so on a node with a GPU the health check runs `--units cpu`;
    the screen job (quick) runs every unit; SDCSCAN_UNITS wins."""
    gpu = tmp_path / "nvidia0"
    gpu.touch()
    env = {**fake_env, "SDCSCAN_GPU_DEVICE": str(gpu)}
    argv_log = Path(fake_env["FAKE_ARGV_LOG"])
    runs = [({}, "--units cpu "), ({"SDCSCAN_UNITS": "all"}, "--units all "),
            ({"SDCSCAN_GPU_DEVICE": str(tmp_path / "none")}, None)]  # fmt: skip
    for extra, want in runs:
        argv_log.unlink(missing_ok=True)
        assert _run(SLURM, {**env, **extra}, tmp_path, 0, make_report(fail_unit=None))[0] == 0
        argv = argv_log.read_text()
        assert (want in argv) if want else "--units" not in argv, argv
    argv_log.unlink()
    _run(SCREEN, {**env, "SDCSCAN_HEALTHCHECK": str(SLURM)}, tmp_path, 0, make_report(fail_unit=None))
    assert "--profile quick " in argv_log.read_text() and "--units" not in argv_log.read_text()


@pytest.mark.parametrize(
    ("extra", "want_profile", "want_budget", "want_timeout"),
    [
        ({}, "quick", None, 1500),
        (
            {"SDCSCAN_PROFILE": "burnin", "SDCSCAN_BUDGET_S": "7200"},
            "burnin",
            "--budget 7200s",
            7200 + 43 + 60,
        ),
    ],
    ids=["default", "burnin-2h"],
)
def test_screen_job_runs_the_wrapper_with_a_longer_profile_and_bound(
    fake_env: dict[str, str], tmp_path: Path, extra: dict[str, str], want_profile: str, want_budget: str | None,
    want_timeout: int,
) -> None:  # fmt: skip
    """The batch job runs the same wrapper with a longer profile, a bound that covers its budget and its
    own report file; the drain policy is the wrapper's."""
    env = {**fake_env, "SDCSCAN_HEALTHCHECK": str(SLURM), **extra}
    code, _, calls = _run(SCREEN, env, tmp_path, 1, make_report(fail_unit="cpu:1"))
    argv = Path(fake_env["FAKE_ARGV_LOG"]).read_text()
    assert f"--profile {want_profile} " in argv and f"timeout={want_timeout}" in argv
    assert (want_budget in argv) if want_budget else "--budget" not in argv
    assert f"--out {tmp_path}/state/last-screen.json " in argv
    assert code == 1
    _assert_drained(calls, "sdcscan: fail cpu:1")


@pytest.mark.parametrize("rc", [2, 130, 143, 124])
def test_screen_job_never_drains_on_usage_or_interruption(
    fake_env: dict[str, str], tmp_path: Path, rc: int
) -> None:
    """The batch job keeps the wrapper's policy: configuration errors and interruptions are not drained on."""
    code, _, calls = _run(SCREEN, {**fake_env, "SDCSCAN_HEALTHCHECK": str(SLURM)}, tmp_path, rc)
    assert code == 0 and calls == []


def test_screen_job_refuses_a_budget_that_is_not_whole_seconds(
    fake_env: dict[str, str], tmp_path: Path
) -> None:
    """SDCSCAN_BUDGET_S=1h would make the bound arithmetic fail: exit 2 before anything runs."""
    code, _, calls = _run(SCREEN, {**fake_env, "SDCSCAN_HEALTHCHECK": str(SLURM), "SDCSCAN_BUDGET_S": "1h"},
                          tmp_path, 0)  # fmt: skip
    assert code == 2 and calls == [] and not Path(fake_env["FAKE_ARGV_LOG"]).exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("hostname") is None, reason="needs hostname(1)")
def test_healthcheck_wrapper_with_the_real_sdcscan_ends_inside_60_s(
    fake_env: dict[str, str], tmp_path: Path
) -> None:
    """The real sdcscan with the real healthcheck profile, through the wrapper: a pass, no drain, well
    inside slurmd's 60 s (the subprocess timeout fails the test otherwise)."""
    bin_dir = tmp_path / "bin"
    _write_executable(bin_dir / "sdcscan", REAL_SDCSCAN.format(python=sys.executable))
    env = {**os.environ, **fake_env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    code, _, calls = _run(SLURM, env, tmp_path, 0)
    log = (tmp_path / "state" / "last-report.log").read_text()
    assert code == 0 and calls == [], log
    report = json.loads((tmp_path / "state" / "last-report.json").read_text())
    assert report["verdict"] == "pass" and report["run"]["profile"]["name"] == "healthcheck", log


# --- node-problem-detector ---------------------------------------------------------------------


def _npd(tmp_path: Path, *reports: dict[str, Any], history: Path | None = None) -> tuple[int, str]:
    """The NPD plugin with the real `sdcscan status` over a history holding `reports`, oldest first."""
    bin_dir = tmp_path / "real-bin"
    bin_dir.mkdir(exist_ok=True)
    _write_executable(bin_dir / "sdcscan", REAL_SDCSCAN.format(python=sys.executable))
    history = history or tmp_path / "state" / "history.sqlite3"
    for report in reports:
        history.parent.mkdir(parents=True, exist_ok=True)
        record_run(history, cast(Report, report), None)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SDCSCAN_PYTHON": sys.executable,
           "SDCSCAN_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}  # fmt: skip
    proc = subprocess.run(
        ["bash", str(NPD)], env=env, capture_output=True, text=True, timeout=WRAPPER_TIMEOUT_S
    )
    assert len(proc.stdout.splitlines()) == 1, proc.stdout  # NPD shows the first line: it is the message
    return proc.returncode, proc.stdout.strip()


def _at(hours_ago: float, **kwargs: Any) -> dict[str, Any]:
    """A report of a run that ended `hours_ago` hours ago."""
    ended = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - hours_ago * 3600))
    return make_report(run_id=f"r-{hours_ago}-{kwargs.get('fail_unit')}-{kwargs.get('invalid_unit')}",
                       ended_at=ended, **kwargs)  # fmt: skip


@pytest.mark.parametrize(
    ("reports", "want_rc", "message"),
    [
        ([], 2, "no screen recorded on this node yet"),
        ([_at(1, fail_unit=None)], 0, "no silent data corruption found (screen of "),
        ([_at(2, fail_unit="cpu:1")], 1, "silent data corruption found on cpu:1; flagged until cleared"),
        ([_at(3, fail_unit="cpu:1"), _at(1, fail_unit=None)], 1, "found on cpu:1"),  # sticky
        ([_at(1, fail_unit=None, invalid_unit="cpu:0")], 0, "could not judge cpu:0: see sdcscan history"),
        ([_busy(_at(1, fail_unit=None, invalid_unit="cpu:0"), "cpu:0")], 0,
         "could not judge cpu:0: the host was too busy to screen them (not a hardware verdict"),
        ([_at(30, fail_unit=None)], 2, "the last screen ended 30 h ago (limit 26 h): is the screen running?"),
    ],
    ids=["never-screened", "pass", "fail", "sticky", "invalid", "busy", "stale"],
)  # fmt: skip
def test_npd_plugin_reads_the_last_verdict_from_the_history(
    tmp_path: Path, reports: list[dict[str, Any]], want_rc: int, message: str
) -> None:
    """Issue 45: the plugin runs no screen inside NPD's pod; it reads `sdcscan status --json`. A flag is
    NonOK (1); a pass, an interrupted or an invalid run is OK (0) saying which (a busy host is not the
    node's fault: no NonOK); no run, a stale one or an unreadable history is Unknown (2)."""
    code, out = _npd(tmp_path, *reports)
    assert code == want_rc and message in out, (code, out)


def test_npd_plugin_says_unknown_when_the_history_cannot_be_read(tmp_path: Path) -> None:
    history = tmp_path / "state" / "history.sqlite3"
    history.mkdir(parents=True)  # a directory where the database belongs
    code, out = _npd(tmp_path, history=history)
    assert code == 2 and "cannot read the screening history" in out, out


def test_npd_plugin_config_polls_quickly_and_never_runs_a_screen() -> None:
    """Reading the status takes a second: the rule's timeout is short, and the script starts no run."""
    config = json.loads((DEPLOY / "npd" / "sdcscan-plugin.json").read_text())
    assert config["rules"][0]["timeout"] == config["pluginConfig"]["timeout"] == "30s"
    assert not re.search(r'"\$SDCSCAN" run\b', NPD.read_text())


# --- Issue 33: a wrapper's own failure is never "fail" ------------------------------------------

TABLE_LINE = (
    " cpu:3  fail       12  matmul_golden, train           2  invariant failed"  # the run's verdict table
)


@pytest.mark.skipif(shutil.which("hostname") is None, reason="needs hostname(1)")
def test_slurm_drains_on_exit_1_only_when_a_unit_is_named(fake_env: dict[str, str], tmp_path: Path) -> None:
    """Exit 1 without a report (it could not be written) drains on the unit the log names, and not at all
    when nothing names one: `sdcscan: fail ` with no unit drained nodes for a full disk."""
    code, _, calls = _run(SLURM, fake_env, tmp_path, 1, None)
    assert code == 0 and calls == []
    code, _, calls = _run(SLURM, fake_env, tmp_path, 1, None, FAKE_STDERR=TABLE_LINE)
    assert code == 1
    _assert_drained(calls, "sdcscan: fail cpu:3")


def _unwritable_log(fake_env: dict[str, str], name: str) -> None:
    """The wrapper's log path is a directory: bash's redirect fails (status 1), as on a full disk."""
    path = Path(fake_env["SDCSCAN_STATE_DIR"]) / name
    path.unlink(missing_ok=True)
    path.mkdir(parents=True)


def test_slurm_does_not_screen_or_drain_when_its_log_cannot_be_written(
    fake_env: dict[str, str], tmp_path: Path
) -> None:
    _unwritable_log(fake_env, "last-report.log")
    code, _, calls = _run(SLURM, fake_env, tmp_path, 0, make_report(fail_unit=None))
    assert code == 0 and calls == []
    assert not Path(fake_env["FAKE_ARGV_LOG"]).exists()  # sdcscan was not started


# --- Kubernetes --------------------------------------------------------------------------------


def _daemonset() -> dict[str, Any]:
    docs = yaml.safe_load_all((DEPLOY / "kubernetes" / "sdcscan-daemonset.yaml").read_text())
    return next(d for d in docs if d["kind"] == "DaemonSet")


def _daemonset_pod() -> dict[str, Any]:
    pod: dict[str, Any] = _daemonset()["spec"]["template"]["spec"]
    return pod


def _host_paths() -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in _daemonset_pod()["volumes"] if "hostPath" in v}


_MI = 1024**2
_QUANTITY = {"Ki": 1024, "Mi": _MI, "Gi": 1024**3, "Ti": 1024**4}


def _bytes(quantity: str) -> int:
    """A Kubernetes binary quantity (`512Mi`, `14Gi`) in bytes."""
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)", quantity)
    assert match, f"unexpected quantity {quantity!r}"
    return int(match.group(1)) * _QUANTITY[match.group(2)]


def test_daemonset_runs_sdcscan_under_an_init_that_forwards_signals() -> None:
    """tini is PID 1 and runs the signal-forwarding loop that the image installs; no `sh -c` loop (a PID 1
    shell without traps ignores SIGTERM, so sdcscan never wrote its interrupted report)."""
    container = _daemonset_pod()["containers"][0]
    assert container["command"] == ["/usr/bin/tini", "--", "/usr/local/bin/sdcscan-loop"]
    dockerfile = (DEPLOY / "kubernetes" / "Dockerfile").read_text()
    assert "install -m 0755 /src/deploy/kubernetes/sdcscan-loop.sh /usr/local/bin/sdcscan-loop" in dockerfile
    assert re.search(r"apt-get install .*\btini\b", dockerfile)
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "sdcscan"]' in dockerfile
    assert re.search(r"^USER 65532:65532$", dockerfile, re.M)


def test_daemonset_grace_period_covers_sdcscans_stop() -> None:
    """After SIGTERM the pod has time for sdcscan to stop its workers and write the report."""
    assert _daemonset_pod()["terminationGracePeriodSeconds"] >= STOP_S + 20


def test_daemonset_memory_limit_follows_the_documented_formula() -> None:
    """limit = base + units x per-unit memory, as annotated; per-unit memory covers what a quick unit was
    measured to use (about 145 MB in the issue, up to 174 MiB private here), so the old 4Gi is refused."""
    ds = _daemonset()
    notes = ds["metadata"]["annotations"]
    base, per_unit, units = (
        _bytes(notes["sdcscan/memory-base"]),
        _bytes(notes["sdcscan/memory-per-unit"]),
        int(notes["sdcscan/sized-for-units"]),
    )
    assert per_unit >= 175 * _MI and base >= 1024 * _MI and units >= 64
    resources = _daemonset_pod()["containers"][0]["resources"]
    limit = _bytes(resources["limits"]["memory"])
    assert limit >= base + units * per_unit
    assert "cpu" not in resources["limits"]  # a CFS quota would throttle the per-core workers
    readme = (DEPLOY / "README.md").read_text()
    assert "limit = 1 GiB + units × 200 MiB" in readme and "1 GiB + units × 512 MiB" in readme


def test_daemonset_runs_with_least_privilege() -> None:
    """Non-root, no capabilities, no privilege escalation, read-only root (with a volume for every path it
    writes), RuntimeDefault seccomp, no API token; the init container may only chown and chmod."""
    pod = _daemonset_pod()
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    main = pod["containers"][0]
    ctx = main["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False and ctx["readOnlyRootFilesystem"] is True
    assert ctx["capabilities"] == {"drop": ["ALL"]} and ctx.get("privileged", False) is False
    assert "runAsUser" not in ctx and "runAsNonRoot" not in ctx  # inherits the pod's non-root user
    writable = {m["mountPath"] for m in main["volumeMounts"] if not m.get("readOnly")}
    args = main["args"]
    written = {str(Path(args[args.index(flag) + 1]).parent) for flag in ("--out", "--prom")}
    assert written | {"/tmp"} <= writable
    (init,) = pod["initContainers"]
    init_ctx = init["securityContext"]
    assert init_ctx["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}
    assert init_ctx["allowPrivilegeEscalation"] is False and init_ctx["readOnlyRootFilesystem"] is True
    assert {m["mountPath"] for m in init["volumeMounts"]} == written


def _gpu_daemonset() -> dict[str, Any]:
    (ds,) = yaml.safe_load_all((DEPLOY / "kubernetes" / "sdcscan-daemonset-gpu.yaml").read_text())
    return cast(dict[str, Any], ds)


def test_gpu_nodes_get_a_daemonset_that_holds_every_gpu_in_a_cuda_image() -> None:
    """Issue 45: the CPU DaemonSet's pods saw no GPU. The GPU one runs on GPU nodes only (and the CPU one
    stays off them: two runs would meet at the host's run lock), requests as many GPUs as its node
    selector's count, runs the CUDA image with NVML, and screens every unit with the quick profile (a
    GPU unit's start-up outlasts healthcheck's budget)."""
    gpu, cpu = _gpu_daemonset(), _daemonset()
    pod, main = gpu["spec"]["template"]["spec"], gpu["spec"]["template"]["spec"]["containers"][0]
    count = gpu["metadata"]["annotations"]["sdcscan/gpus-per-node"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": count}
    assert (
        main["resources"]["requests"]["nvidia.com/gpu"]
        == main["resources"]["limits"]["nvidia.com/gpu"]
        == int(count)
    )
    (term,) = cpu["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    assert term["matchExpressions"] == [
        {"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]}
    ]
    assert " ".join(main["args"]).startswith("--profile quick ") and "--units" not in main["args"]
    assert load_profile("quick").budget_s >= 60 > 46  # the slowest GPU start-up measured (README)
    images = {c["image"] for c in [*pod["containers"], *pod["initContainers"]]}
    assert images == {"sdcscan-gpu:0.1.0"}
    assert (
        "-f deploy/kubernetes/Dockerfile.gpu ."
        in (DEPLOY / "kubernetes" / "sdcscan-daemonset-gpu.yaml").read_text()
    )
    dockerfile = (DEPLOY / "kubernetes" / "Dockerfile.gpu").read_text()
    assert "'/src[gpu]'" in dockerfile and "--index-url" not in dockerfile  # PyPI's CUDA build, and NVML
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in dockerfile
    # Everything else (least privilege, signals, grace, memory, volumes) is the CPU DaemonSet's.
    same = ("securityContext", "terminationGracePeriodSeconds", "volumes", "automountServiceAccountToken")
    for key in same:
        assert pod[key] == cpu["spec"]["template"]["spec"][key], key
    cpu_main = cpu["spec"]["template"]["spec"]["containers"][0]
    for key in ("command", "securityContext", "volumeMounts", "args"):
        assert main[key] == cpu_main[key], key


@pytest.fixture
def loop_env(tmp_path: Path, fake_env: dict[str, str]) -> dict[str, str]:
    """The loop script's environment: the fake sdcscan, a short interval, state in tmp_path."""
    return {**fake_env, "SDCSCAN_INTERVAL_S": "0.2", "SDCSCAN_STATE_DIR": str(tmp_path)}


@pytest.fixture
def started_loop(
    request: pytest.FixtureRequest, tmp_path: Path, loop_env: dict[str, str], loop_extra: dict[str, str]
) -> Iterator[subprocess.Popen[str]]:
    """sdcscan-loop.sh running `sdcscan run --out tmp_path/r.json` with `loop_extra` in its environment;
    as PID 1 of a new PID namespace when parametrized indirectly with True."""
    argv = ["bash", str(LOOP), "--out", str(tmp_path / "r.json")]
    if getattr(request, "param", False):
        argv = ["unshare", "--pid", "--fork", *argv]
    proc = subprocess.Popen(argv, env={**loop_env, **loop_extra}, text=True, stderr=subprocess.PIPE)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.communicate()  # reaps it and closes the stderr pipe


def _wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _loop_target(proc: subprocess.Popen[str]) -> int:
    """The pid to signal: the loop itself, or under `unshare --fork` its child (PID 1 inside)."""
    if Path(str(proc.args[0])).name != "unshare":  # type: ignore[index]
        return proc.pid
    _wait_for(lambda: _children(proc.pid), "unshare's child")
    return _children(proc.pid)[0]


@pytest.mark.parametrize("loop_extra", [{"FAKE_HANG": "term"}])
def test_loop_passes_sigterm_to_a_running_sdcscan(
    started_loop: subprocess.Popen[str], tmp_path: Path, loop_extra: dict[str, str]
) -> None:
    """SIGTERM during a run reaches sdcscan, which writes its interrupted report; the loop exits 143."""
    _wait_for(lambda: Path(tmp_path / "argv.log").exists(), "the run to start")
    os.kill(_loop_target(started_loop), signal.SIGTERM)
    assert started_loop.wait(timeout=WRAPPER_TIMEOUT_S) == 143
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "interrupted"


@pytest.mark.parametrize("loop_extra", [{"FAKE_RC": "1"}])
def test_loop_runs_again_after_the_interval_and_stops_while_idle(
    started_loop: subprocess.Popen[str], tmp_path: Path, loop_extra: dict[str, str]
) -> None:
    """A finished run (whatever its verdict) is followed by another after the interval; SIGTERM between runs
    ends the loop at once with 143."""
    argv_log = tmp_path / "argv.log"
    _wait_for(lambda: argv_log.exists() and len(argv_log.read_text().splitlines()) >= 2, "a second run")
    os.kill(started_loop.pid, signal.SIGTERM)
    assert started_loop.wait(timeout=WRAPPER_TIMEOUT_S) == 143
    assert "sdcscan exited 1" in (started_loop.stderr.read() if started_loop.stderr else "")


@pytest.mark.parametrize("loop_extra", [{"SDCSCAN": "/nonexistent/sdcscan"}])
def test_loop_that_cannot_start_sdcscan_stops_with_the_shells_status(
    started_loop: subprocess.Popen[str], loop_extra: dict[str, str]
) -> None:
    """A missing binary is a broken image, reported as such (127), not a pod that sleeps forever."""
    assert started_loop.wait(timeout=WRAPPER_TIMEOUT_S) == 127
    err = started_loop.stderr.read() if started_loop.stderr else ""
    assert "cannot run '/nonexistent/sdcscan'" in err and "not found or not executable" in err


def _can_unshare_pid() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_unshare_pid(), reason="needs a new PID namespace (unshare --pid)")
@pytest.mark.parametrize("started_loop", [True], indirect=True)
@pytest.mark.parametrize("loop_extra", [{"FAKE_HANG": "term"}])
def test_loop_as_pid_1_still_passes_sigterm_on(
    started_loop: subprocess.Popen[str], tmp_path: Path, loop_extra: dict[str, str]
) -> None:
    """As PID 1 (no tini), where the kernel drops signals a process has no handler for, the loop's traps
    still see SIGTERM and pass it on: the report is written and the container would exit 143."""
    _wait_for(lambda: Path(tmp_path / "argv.log").exists(), "the run to start")
    os.kill(_loop_target(started_loop), signal.SIGTERM)
    assert started_loop.wait(timeout=WRAPPER_TIMEOUT_S) == 143
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "interrupted"


# --- systemd -----------------------------------------------------------------------------------


def _unit_entries(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file as section -> key -> every value assigned (systemd allows repeated keys)."""
    sections: dict[str, dict[str, list[str]]] = {}
    section = ""
    text = re.sub(r"\\\n\s*", " ", path.read_text())  # continuation lines
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        sections.setdefault(section, {}).setdefault(key, []).append(value)
    return sections


def test_systemd_units_run_the_quick_profile_from_a_timer() -> None:
    """The service is a oneshot running `sdcscan run`; the timer installs."""
    service = _unit_entries(SERVICE)["Service"]
    assert service["Type"] == ["oneshot"]
    assert "sdcscan run --profile quick" in service["ExecStart"][0]
    assert _unit_entries(DEPLOY / "systemd" / "sdcscan.timer")["Install"]["WantedBy"] == ["timers.target"]


def test_systemd_service_is_sandboxed_but_keeps_what_sdcscan_needs() -> None:
    """The hardening options are set; the textfile directory stays writable; SIGTERM goes to sdcscan alone;
    write-and-execute memory stays allowed (oneDNN JIT: with MemoryDenyWriteExecute every unit is invalid)."""
    service = {key: values[-1] for key, values in _unit_entries(SERVICE)["Service"].items()}
    for key, value in {
        "ProtectSystem": "strict", "PrivateTmp": "yes", "NoNewPrivileges": "yes", "ProtectHome": "yes",
        "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes",
        "ProtectControlGroups": "yes", "RestrictNamespaces": "yes", "LockPersonality": "yes",
        "RestrictRealtime": "yes", "SystemCallArchitectures": "native", "CapabilityBoundingSet": "",
        "DevicePolicy": "closed", "KillMode": "mixed", "StateDirectoryMode": "0700",
    }.items():  # fmt: skip
        assert service.get(key) == value, key
    assert service["MemoryDenyWriteExecute"] == "no"
    textfile = service["Environment"].split("=", 1)[1]
    assert service["ReadWritePaths"].lstrip("-") == textfile
    assert "ProcSubset" not in service  # /proc/interrupts (machine checks) and /proc/cpuinfo are read


def _systemd_analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemd-analyze", *args], capture_output=True, text=True, timeout=60)


def _offline_security_works() -> bool:
    return shutil.which("systemd-analyze") is not None and "--offline" in _systemd_analyze("--help").stdout


@pytest.mark.skipif(not _offline_security_works(), reason="needs systemd-analyze with --offline")
def test_systemd_service_exposure_score_is_at_most_5() -> None:
    """`systemd-analyze security --offline=true` rates the service 5.0 or better (it was 9.6 UNSAFE)."""
    proc = _systemd_analyze("security", "--offline=true", str(SERVICE))
    match = re.search(r"Overall exposure level for sdcscan\.service: (\d+\.\d)", proc.stdout)
    assert match, proc.stdout + proc.stderr
    assert float(match.group(1)) <= 5.0
    readme = (DEPLOY / "README.md").read_text()
    assert (
        f"exposure level for sdcscan.service: {match.group(1)}" in readme
    )  # the documented score is current


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_units_verify_without_unknown_keys(tmp_path: Path) -> None:
    """`systemd-analyze verify` accepts both units and knows every key (a typo would silently drop an
    option); ExecStart points at an existing program for the check."""
    text = SERVICE.read_text().replace("/usr/local/bin/sdcscan", shutil.which("true") or "/bin/true")
    (tmp_path / "sdcscan.service").write_text(text)
    shutil.copy(DEPLOY / "systemd" / "sdcscan.timer", tmp_path / "sdcscan.timer")
    proc = _systemd_analyze("verify", str(tmp_path / "sdcscan.service"), str(tmp_path / "sdcscan.timer"))
    assert proc.returncode == 0, proc.stderr
    assert "Unknown" not in proc.stderr and "ignoring" not in proc.stderr, proc.stderr


RIPPLE = DEPLOY / "systemd" / "sdcscan-ripple.service"


def test_ripple_service_runs_background_mode_at_idle_priority_in_the_same_sandbox() -> None:
    """The Ripple unit runs `--background` under the idle CPU and I/O classes with a memory bound, an
    hourly timer starts it, and its sandbox is the quick-profile service's, line for line."""
    service = {key: values[-1] for key, values in _unit_entries(RIPPLE)["Service"].items()}
    assert "sdcscan run --profile ripple --background" in service["ExecStart"]
    for key, value in {
        "CPUSchedulingPolicy": "idle", "CPUWeight": "idle", "Nice": "19", "IOSchedulingClass": "idle",
        "OOMScoreAdjust": "1000", "MemoryMax": "4G",
    }.items():  # fmt: skip
        assert service.get(key) == value, key
    timer = _unit_entries(DEPLOY / "systemd" / "sdcscan-ripple.timer")
    assert timer["Timer"]["OnCalendar"] == ["hourly"] and timer["Install"]["WantedBy"] == ["timers.target"]
    sandbox = [SERVICE.read_text(), RIPPLE.read_text()]
    assert len({text[text.index("# --- Sandbox.") :] for text in sandbox}) == 1


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_ripple_units_verify_and_score_like_the_quick_service(tmp_path: Path) -> None:
    """`systemd-analyze verify` knows every key of the Ripple units; where it can, `security` rates 5.0 or better."""
    text = RIPPLE.read_text().replace("/usr/local/bin/sdcscan", shutil.which("true") or "/bin/true")
    (tmp_path / RIPPLE.name).write_text(text)
    shutil.copy(DEPLOY / "systemd" / "sdcscan-ripple.timer", tmp_path / "sdcscan-ripple.timer")
    proc = _systemd_analyze("verify", str(tmp_path / RIPPLE.name), str(tmp_path / "sdcscan-ripple.timer"))
    assert proc.returncode == 0, proc.stderr
    assert "Unknown" not in proc.stderr and "ignoring" not in proc.stderr, proc.stderr
    if _offline_security_works():
        score = _systemd_analyze("security", "--offline=true", str(tmp_path / RIPPLE.name)).stdout
        match = re.search(r"Overall exposure level for sdcscan-ripple\.service: (\d+\.\d)", score)
        assert match and float(match.group(1)) <= 5.0, score


@pytest.mark.skipif(shutil.which("hostname") is None, reason="needs hostname(1)")
@pytest.mark.parametrize(
    ("node_info", "flagged", "resumed"),
    [
        ("NodeName=n1 State=IDLE+DRAIN Reason=sdcscan: fail cpu:1 [root@2026-11-29T10:00:00]", "", True),
        ("NodeName=n1 State=IDLE+DRAIN Reason=disk replaced [admin@2026-11-29T10:00:00]", "", False),
        ("NodeName=n1 State=IDLE Reason=sdcscan: fail cpu:1 [root@2026-11-29T10:00:00]", "", False),
        (
            "NodeName=n1 State=IDLE+DRAIN Reason=sdcscan: fail cpu:1 [root@2026-11-29T10:00:00]",
            "cpu:1",
            False,
        ),
    ],
    ids=["drained-by-sdcscan", "drained-by-an-admin", "not-drained", "still-flagged"],
)
def test_a_passing_screen_resumes_only_a_node_sdcscan_drained(
    fake_env: dict[str, str], tmp_path: Path, node_info: str, flagged: str, resumed: bool
) -> None:
    """Issue 45: nodes the wrapper drained never came back when a later screen passed (NHC resumes
    them). Now a pass with no flagged unit resumes a node whose drain reason is sdcscan's; an admin's
    drain, a node not drained and a unit still flagged (drained again, before any run) are left."""
    code, _, calls = _run(SLURM, fake_env, tmp_path, 0, make_report(fail_unit=None),
                          FAKE_NODE_INFO=node_info, FAKE_FLAGGED=flagged)  # fmt: skip
    node = socket.gethostname().split(".")[0]
    if resumed:
        assert code == 0 and calls == ["update", f"nodename={node}", "state=resume"]
    elif flagged:
        assert code == 1 and calls[:3] == ["update", f"nodename={node}", "state=drain"]
    else:
        assert code == 0 and calls == []
