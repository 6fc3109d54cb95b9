"""`sdcscan run` end to end, in a subprocess, as a user runs it."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import jsonschema
import pytest

from sdcscan.profile import load_profile
from sdcscan.report import SCHEMA_PATH, case_records, load_report
from tests.helpers.cli import CPUS, TWO, child_env, needs_two_cpus, one_error_line, sdcscan_cmd

pytestmark = pytest.mark.slow  # every test here starts `sdcscan` in a subprocess

QUICK_WORKLOADS = {w.name for w in load_profile("quick").workloads}  # what `sdcscan run` runs


def _report(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)


def test_clean_run_passes_covers_every_cpu_and_matches_the_schema(run_cli, tmp_path: Path):
    """Also: the report on disk is the one on stdout, and the run's journal is named by its run id (one
    run for both: 15 s of the suite saved)."""
    out = tmp_path / "r.json"
    proc = run_cli("run", "--budget", "15s", "--json", "--hostname", "test-host", "-o", str(out))
    report = _report(proc)
    assert report == load_report(out)
    (journal,) = tmp_path.glob("r.*.journal.jsonl")  # one journal per run, named by its run id
    assert journal.name == f"r.{report['run']['id']}.journal.jsonl"
    assert proc.returncode == 0, proc.stderr
    assert report["verdict"] == "pass" and report["host"]["hostname"] == "test-host"
    assert {u["id"] for u in report["units"]} == {f"cpu:{c}" for c in CPUS}
    for unit in report["units"]:
        assert unit["verdict"] == "pass" and unit["cases_run"] >= 2
        assert set(unit["workloads"]) == QUICK_WORKLOADS
        assert unit["throughput"]["matmul_golden"]["ops_per_s"] > 0
    jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))
    assert proc.stderr.rstrip().splitlines()[-1] == "exit: pass"


@needs_two_cpus
@pytest.mark.parametrize("kind", ["bitflip@0.3", "nan@0.5"])
def test_injected_faults_fail_the_bad_unit_only(run_cli, kind):
    bad, good = f"cpu:{CPUS[-1]}", f"cpu:{CPUS[0]}"
    proc = run_cli("run", "--budget", "15s", "--units", TWO, "--inject", f"{bad}:{kind}", "--json")
    report = _report(proc)
    assert proc.returncode == 1, proc.stderr
    verdicts = {u["id"]: u["verdict"] for u in report["units"]}
    assert verdicts == {bad: "fail", good: "pass"}
    assert any(
        f["unit"] == bad and f["kind"] in ("invariant", "not_reproducible", "divergent")
        for f in report["findings"]
    )
    assert "exit: fail" in proc.stderr


def test_same_seed_replays_identical_digests(run_cli, tmp_path):
    """Two runs of one seed and `--cases` run the same cases on every unit, however loaded the host (a
    time-bound pair may share next to none), and every digest agrees."""
    args = ("run", "--budget", "60s", "--seed", "1234", "--cases", "6", "--json")
    a, b = _report(run_cli(*args)), _report(run_cli(*args))
    assert a["run"]["seed"] == b["run"]["seed"] == 1234 and a["run"]["seed_source"] == "cli"
    da = {(r.unit, r.index): r.digest for r in case_records(a)}
    db = {(r.unit, r.index): r.digest for r in case_records(b)}
    assert set(da) == set(db) == {(u["id"], i) for u in a["units"] for i in range(6)}
    assert da == db


def test_sigint_writes_a_partial_report_and_exits_130(tmp_path):
    out = tmp_path / "report.json"
    env = child_env()
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    proc = subprocess.Popen(
        sdcscan_cmd("run", "--budget", "60s", "-o", str(out)), env=env, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 60
    while time.time() < deadline and not any(
        '"type": "case"' in j.read_text() for j in tmp_path.glob("report.*.journal.jsonl")
    ):
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    report = load_report(out)
    assert report["verdict"] == "interrupted" and report["exit_code"] == 130
    assert sum(u["cases_run"] for u in report["units"]) >= 1
    assert "Traceback" not in stderr


@pytest.mark.parametrize(
    ("args", "after_usage"),
    [
        (["run", "--budget", "abc"], False),
        (["run", "--workloads", "nosuch"], False),
        (["run", "--profile", "missing.yaml"], False),
        (["run", "--profile", "bad.yaml"], False),
        (["run", "--inject", "cpu:0:melt"], False),
        (["run", "--units", "cpu:999"], False),
        (["run", "--seed", "-4"], True),  # click's own range check prints its usage lines first
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(run_cli, tmp_path, args, after_usage):
    (tmp_path / "bad.yaml").write_text("version: 1\nworkloads: {oops\n")
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stderr
    one_error_line(proc.stderr, after_usage=after_usage)
    assert proc.stdout == ""


def test_report_path_in_a_missing_directory_is_exit_2_before_any_work(run_cli, tmp_path):
    """A configuration mistake, found before any worker starts (issue 15: it was exit 3)."""
    proc = run_cli("run", "--budget", "5s", "-o", str(tmp_path / "no" / "such" / "dir" / "r.json"))
    assert proc.returncode == 2, proc.stderr
    one_error_line(proc.stderr)


def test_qualify_one_host_against_a_golden_recorded_from_another_run(run_cli, tmp_path):
    """CI qualification without peers: record a golden from one run, judge a later run against it."""
    unit = f"cpu:{CPUS[0]}"
    first = run_cli("run", "-p", "qualify", "--budget", "8s", "--units", unit, "-o", str(tmp_path / "a.json"))
    assert first.returncode == 0, first.stderr
    rec = run_cli("golden", "record", str(tmp_path / "a.json"), "-o", str(tmp_path / "golden.json"))
    assert rec.returncode == 0, rec.stderr
    second = run_cli(
        "run",
        "-p",
        "qualify",
        "--budget",
        "8s",
        "--units",
        unit,
        "--golden",
        str(tmp_path / "golden.json"),
        "--json",
    )
    report = _report(second)
    assert second.returncode == 0, second.stderr
    assert report["units"][0]["verdict"] == "pass"
    assert not [f for f in report["findings"] if f["kind"] == "golden" and "cannot" in f["message"]]
