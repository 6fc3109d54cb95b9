"""End to end under faults (issue 6): hung, crashed and raising units, persistent bit flips, signals, kills, bad output.

Each test runs sdcscan for real, so they are marked slow; they still run by default. Budgets are 20 s
because starting the workers (importing torch) can take 10 s or more on a loaded two-core machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sdcscan.cli import cli
from sdcscan.journal import read_journal
from tests.helpers.cli import child_env, one_error_line, sdcscan_cmd
from tests.helpers.profiles import HOSTILE_PROFILES
from tests.helpers.reports import make_report

BUDGET_S = 10
BUDGET = f"{BUDGET_S}s"
BOUND_S = BUDGET_S + 10 + 5 + 3 + 5  # budget + overrun + re-run window + stop + slack for interpreter start


def invoke(*args: str) -> Result:
    """The CLI in this process: fast, for errors that come before any worker starts."""
    return CliRunner().invoke(cli, list(args))


def units_of(report: dict) -> dict[str, dict]:
    return {u["id"]: u for u in report["units"]}


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {**child_env(), "XDG_STATE_HOME": str(tmp_path / "state")}
    return subprocess.Popen(
        sdcscan_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def wait_for_cases(directory: Path, n: int, timeout: float = 90.0) -> Path:
    """Block until the run's journal beside `r.json` (`r.<run id>.journal.jsonl`) holds `n` finished cases."""
    end = time.time() + timeout
    while time.time() < end:
        for journal in directory.glob("r.*.journal.jsonl"):
            if sum(r.get("type") == "case" for r in read_journal(journal)) >= n:
                return journal
        time.sleep(0.2)
    raise AssertionError(f"no {n} cases in a journal in {directory} after {timeout} s")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hang", "crash"])
def test_hung_or_crashed_unit_is_invalid_and_the_other_passes(run_cli, tmp_path, kind):
    """--inject cpu:1:hang|crash: exit 3 within the bound, cpu:1 invalid saying why, cpu:0 passed."""
    out = tmp_path / "r.json"
    t0 = time.time()
    p = run_cli(
        "run", "--budget", BUDGET, "--units", "cpu:0,cpu:1", "--inject", f"cpu:1:{kind}", "-o", str(out)
    )
    wall = time.time() - t0
    assert p.returncode == 3, p.stderr
    assert wall < BOUND_S
    units = units_of(json.loads(out.read_text()))
    assert units["cpu:0"]["verdict"] == "pass" and units["cpu:0"]["cases_run"] >= 1
    assert units["cpu:1"]["verdict"] == "invalid"
    assert ("hung" if kind == "hang" else "died") in units["cpu:1"]["reason"]
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_persistent_bitflip_is_classified_persistent(run_cli, tmp_path):
    """--inject cpu:1:bitflip@1.0: cpu:1 fails, its re-runs fail again and its peer's do not: persistent."""
    out = tmp_path / "r.json"
    p = run_cli(
        "run", "--budget", BUDGET, "--units", "cpu:0,cpu:1", "--inject", "cpu:1:bitflip@1.0", "-o", str(out)
    )
    assert p.returncode == 1, p.stderr
    report = json.loads(out.read_text())
    units = units_of(report)
    assert units["cpu:0"]["verdict"] == "pass"
    assert units["cpu:1"]["verdict"] == "fail"
    retest = units["cpu:1"]["retest"]
    assert retest["classification"] == "persistent"
    first = retest["cases"][0]
    assert (
        first["reruns"] == 3
        and first["reproduced"] >= 1
        and first["peers"] == ["cpu:0"]
        and first["peer_failures"] == 0
    )
    assert any(
        f["kind"] == "retest" and f["unit"] == "cpu:1" and "persistent" in f["message"]
        for f in report["findings"]
    )


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_writes_a_partial_report_with_the_cases_done(tmp_path, sig, code):
    """SIGINT -> 130, SIGTERM -> 143; the report is `interrupted` and holds every finished case."""
    out = tmp_path / "r.json"
    proc = start(tmp_path, "run", "--budget", "60s", "--units", "cpu:0,cpu:1", "-o", str(out))
    wait_for_cases(tmp_path, 2)
    t0 = time.time()
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == code, stderr
    assert time.time() - t0 < 10
    report = json.loads(out.read_text())
    assert report["verdict"] == "interrupted" and report["exit_code"] == code
    assert sum(u["cases_run"] for u in report["units"]) >= 2
    assert "Traceback" not in stderr


@pytest.mark.slow
def test_sigkill_of_the_parent_leaves_a_journal_that_rebuilds_the_report(run_cli, tmp_path):
    """Kill -9 mid-run: `sdcscan report --from-journal` rebuilds every finished case, verdict interrupted."""
    out = tmp_path / "r.json"
    proc = start(
        tmp_path, "run", "--budget", "60s", "--units", "cpu:0,cpu:1", "--inject", "cpu:1:nan", "-o", str(out)
    )
    journal = wait_for_cases(tmp_path, 3)
    proc.kill()
    proc.communicate(timeout=10)  # returns once every worker (they hold its pipes) is gone too: no orphans
    assert not out.exists()
    done = {
        (r["unit"], r["index"])
        for r in read_journal(journal)
        if r.get("type") == "case" and r["attempt"] == 0
    }
    rebuilt = tmp_path / "rebuilt.json"
    p = run_cli("report", "--from-journal", str(journal), "-o", str(rebuilt), "--json")
    assert p.returncode == 130, p.stderr
    report = json.loads(rebuilt.read_text())
    assert json.loads(p.stdout) == report
    assert report["verdict"] == "interrupted" and report["run"]["interrupted_by"] == "journal"
    rows = {(u["id"], i) for u in report["units"] for i in u["cases"]["index"]}
    assert rows == done
    if any(u == "cpu:1" for u, _ in done):
        assert (
            units_of(report)["cpu:1"]["verdict"] == "fail"
        )  # the NaNs it already produced are not forgotten


@pytest.mark.slow
def test_unwritable_report_path_is_exit_3_and_the_journal_keeps_the_results(run_cli, tmp_path):
    """The report cannot be written (its path became a directory): exit 3, one clear line, journal complete.

    The run also injects `raise` on cpu:1, so the rebuilt report shows a raising workload: cpu:1 invalid with
    the exception summary, cpu:0 unaffected.
    """
    out = tmp_path / "r.json"
    proc = start(
        tmp_path,
        "run",
        "--budget",
        "15s",
        "--units",
        "cpu:0,cpu:1",
        "--inject",
        "cpu:1:raise",
        "-o",
        str(out),
    )
    journal = wait_for_cases(tmp_path, 1)
    out.mkdir()  # root ignores permissions, so make the rename fail instead
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 3, stderr
    lines = [ln for ln in stderr.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1 and "cannot write" in lines[0] and "fallback-reports" in lines[0]
    assert stderr.rstrip().splitlines()[-1].startswith("exit: invalid")  # the last line, not the Error
    # The report went to the state directory instead (issue 33: nothing lost), naming the journal too.
    (fallback,) = (tmp_path / "state" / "sdcscan" / "fallback-reports").glob("*.json")
    assert f"written to {fallback} instead" in lines[0]
    kept = json.loads(fallback.read_text())
    assert kept["run"]["journal"] == str(journal) and units_of(kept)["cpu:0"]["cases_run"] >= 1
    assert "Traceback" not in stderr
    p = run_cli("report", "--from-journal", str(journal), "--json")
    units = units_of(json.loads(p.stdout))
    assert units["cpu:1"]["verdict"] == "invalid" and "InjectedError" in units["cpu:1"]["reason"]
    assert units["cpu:0"]["verdict"] in ("interrupted", "invalid") and units["cpu:0"]["cases_run"] >= 1
    assert any(e["unit"] == "cpu:1" for e in json.loads(p.stdout)["errors"])
    # The plain-op peaks travel in the journal too: the rebuilt report still knows cpu:0's efficiency.
    assert any(t["efficiency"] is not None for t in units["cpu:0"]["throughput"].values())


@pytest.mark.slow
def test_budget_too_short_for_one_case_is_invalid_not_pass(run_cli, tmp_path):
    """--budget 1s: no unit completes a case, so the run is invalid (exit 3), ending within the bound."""
    t0 = time.time()
    p = run_cli("run", "--budget", "1s", "--units", "cpu:0,cpu:1", "--json")
    assert p.returncode == 3, p.stderr
    assert time.time() - t0 < 1 + 10 + 5 + 3 + 5
    assert {u["verdict"] for u in json.loads(p.stdout)["units"]} == {"invalid"}


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["run", "--inject", "cpu:1"], 2),
        (["run", "--inject", "cpu:1:melt"], 2),
        (["run", "--inject", "cpu:1:bitflip@2"], 2),
        (["run", "--inject", "gpu:0:bitflip"], 2),
        (["run", "--inject", "cpu:999:bitflip"], 2),
        (["run", "--units", "cpu:999"], 2),
        (["run", "--units", "bogus"], 2),
        (["run", "--budget", "1e999s"], 2),
        (["run", "--budget", "31d"], 2),  # past the 30-day cap of a profile's budget
        (["run", "--distributed", "--standalone", "--cases", "5"], 2),  # ranks cannot stop at a count
        (["report"], 2),
        (["report", "nosuch.json"], 3),
        (["report", "--from-journal", "nosuch.jsonl"], 3),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2_or_3(args, code, tmp_path, monkeypatch):
    """Malformed specs, unknown units: exit 2; missing files: exit 3; one `Error:` line, no exception escapes.
    (`report` alone opens the newest kept report: in an empty state directory there is none.)"""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    r = invoke(*args)
    assert r.exit_code == code, r.stderr
    one_error_line(r.stderr)
    assert isinstance(r.exception, SystemExit)


def test_option_out_of_range_is_clicks_usage_error_ending_in_one_error_line():
    """`--retest -1` is refused by click itself: exit 2, its usage lines, then one `Error:` line."""
    r = invoke("run", "--retest", "-1")
    assert r.exit_code == 2, r.stderr
    assert "--retest" in one_error_line(r.stderr, after_usage=True)
    assert isinstance(r.exception, SystemExit)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "truncated"),
        (b"\x00\xff" * 100, "not UTF-8"),
        (b'{"schema_version": 99}', "schema_version 99"),
        (b'{"type": "case"}\n', "not an sdcscan journal"),
    ],
)
def test_bad_report_and_journal_files_are_clear_errors(tmp_path, content, needle):
    """`sdcscan report` on truncated, binary, foreign-version files: exit 3 with one line saying why."""
    bad = tmp_path / "bad"
    bad.write_bytes(content)
    flag = ["--from-journal"] if needle.startswith("not an") else []
    r = invoke("report", *flag, str(bad))
    assert r.exit_code == 3 and needle in one_error_line(r.stderr) and isinstance(r.exception, SystemExit)


def test_report_shows_a_saved_report_and_exits_with_its_code(tmp_path):
    """A report as `run` writes it round-trips through `sdcscan report` with its own exit code (1: fail)."""
    from sdcscan.judgement.assemble import judge_and_build

    case = {"type": "case", "attempt": 0, "workload": "train", "digest": "d", "seconds": 0.1, "status": "ok"}
    units = [
        {"id": f"cpu:{i}", "kind": "cpu", "index": i, "model": "m", "cohort": "c", "notes": []}
        for i in (0, 1)
    ]
    run = {"id": "r", "profile": {"name": "quick", "sha256": "0" * 64}, "seed": 1, "budget_s": 1.0,
           "started_at": "2025-01-01T00:00:00Z", "ended_at": "2025-01-01T00:00:01Z", "duration_s": 1.0}  # fmt: skip
    outcomes = [
        {**case, "unit": "cpu:0", "index": 0},
        {**case, "unit": "cpu:1", "index": 0, "status": "mismatch"},
    ]
    doc = judge_and_build(run=run, host={"hostname": "h"}, software={}, cohorts={"c": {}}, units=units,
                          outcomes=outcomes, problems={}, interrupted=None)  # fmt: skip
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    r = invoke("report", str(path), "--json")
    assert r.exit_code == 1 and json.loads(r.stdout) == doc, r.stderr


def test_report_lacking_what_the_summary_shows_is_a_clear_error(tmp_path):
    """A thin report (units without cases_run, which the summary table shows): exit 3, one line naming
    the file and the key, no traceback."""
    thin = make_report()
    for unit in thin["units"]:
        del unit["cases_run"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(thin))
    r = invoke("report", str(path))
    assert r.exit_code == 3 and f"{path}: units[0]: missing key 'cases_run'" in one_error_line(r.stderr)
    assert isinstance(r.exception, SystemExit)


def test_write_json_atomic_on_a_full_disk_is_a_report_error_and_leaves_no_debris(tmp_path, monkeypatch):
    """ENOSPC while writing: ReportError, the old file untouched, no temporary file left behind."""
    import errno

    from sdcscan.errors import ReportError
    from sdcscan.files import write_json_atomic

    target = tmp_path / "r.json"
    target.write_text("old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ReportError, match="No space left"):
        write_json_atomic(target, {"a": 1})
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["r.json"]


@pytest.mark.parametrize("name", ["anchor bomb", "deep nesting", "huge seed", "python tag", "unknown key"])
def test_hostile_profile_on_the_command_line_is_exit_2(tmp_path, name):
    """`run --profile hostile.yaml`: exit 2 with one `Error:` line naming the file."""
    path = tmp_path / "hostile.yaml"
    path.write_text(HOSTILE_PROFILES[name])
    r = invoke("run", "--profile", str(path))
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)
    assert "hostile.yaml" in one_error_line(r.stderr)
