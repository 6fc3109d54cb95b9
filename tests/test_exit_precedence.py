"""Exit 1 if and only if a unit miscomputes (issue 43): the exit code is a function of the unit verdicts
with a precedence, fail above invalid above pass, whatever happened to the other units; only a signal
that stopped the run ranks above a fail. Checked over every combination, through the report builder
`sdcscan run` uses, and end to end with a struck unit beside a hung one."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sdcscan import parts
from sdcscan.errors import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_PASS
from sdcscan.judgement.assemble import judge_and_build
from tests.helpers.cli import child_env, sdcscan_cmd

RUN: Any = {"id": "r", "profile": {"name": "quick", "sha256": "0" * 64}, "seed": 1, "budget_s": 10.0,
            "started": "2026-11-29T00:00:00Z", "ended": "2026-11-29T00:00:10Z", "argv": []}  # fmt: skip
# What each unit did: pass, miscompute (an invariant check fired), hung (the watchdog's problem),
# raised (a case ended in an exception), nothing (no case ran).
STATES = ("pass", "miscompute", "hung", "raised", "nothing")


def _case(unit: str, index: int, status: str) -> dict[str, Any]:
    return {"type": "case", "unit": unit, "index": index, "attempt": 0, "workload": "gemm_int8",
            "status": status, "digest": None if status == "error" else "d", "seconds": 0.1, "ops": 1.0,
            "ops_unit": "op", "phases": {}, "error": "boom" if status == "error" else None,
            "mismatches": [], "injected": None, "detail": {}}  # fmt: skip


def _build(states: tuple[str, ...], interrupted: str | None) -> dict[str, Any]:
    units, outcomes, problems = [], [], {}
    for i, state in enumerate(states):
        uid = f"cpu:{i}"
        units.append({"id": uid, "kind": "cpu", "index": i, "model": "m", "cohort": "c", "notes": []})
        if state == "nothing":
            continue
        # Six cases each; a unit's own trouble is at case 3 + its index, where its peers were fine: a
        # check failing on every unit of the cohort is software, not a unit (and blames none).
        bad = {"miscompute": "mismatch", "raised": "error"}.get(state)
        outcomes += [_case(uid, n, bad if bad and n == 3 + i else "ok") for n in range(6)]
        if state == "hung":
            problems[uid] = "case 6 (gemm_int8) hung: no result after 5 s"
    return judge_and_build(run=RUN, host={"hostname": "h"}, software={}, cohorts={"c": {}}, units=units,
                           outcomes=outcomes, problems=problems, interrupted=interrupted)  # fmt: skip


@pytest.mark.parametrize("interrupted", [None, "SIGINT"])
def test_the_exit_code_is_the_verdicts_with_fail_above_invalid(interrupted: str | None) -> None:
    """Every combination of three units' states: 1 when any unit is judged `fail`, else 3 when any could
    not be judged, else 0; 130 when a signal stopped the run."""
    for states in itertools.product(STATES, repeat=3):
        report = _build(states, interrupted)
        verdicts = [u["verdict"] for u in report["units"]]
        if interrupted:
            want = EXIT_INTERRUPTED
        elif "fail" in verdicts:
            want = EXIT_FAIL
        elif set(verdicts) - {"pass"}:
            want = EXIT_INVALID
        else:
            want = EXIT_PASS
        assert report["exit_code"] == want, (states, verdicts)
        # A unit whose check fired where a healthy peer ran the same cases cleanly fails, whatever the
        # third unit did (hung, raised, ran nothing). Where every unit fails the check, it is the check
        # that is wrong, and nobody is accused (tests/test_verdict.py).
        for state, verdict in zip(states, verdicts, strict=True):
            if state == "miscompute" and "pass" in states:
                assert verdict == "fail", (states, verdicts)
            if state != "miscompute":
                assert verdict != "fail", (states, verdicts)


@pytest.mark.slow
def test_a_struck_unit_beside_a_hung_one_exits_1_naming_both(tmp_path: Path) -> None:
    """The run issue 43 found exiting 3: cpu:1 corrupts every case, cpu:0 hangs. Exit 1; cpu:1 `fail`,
    cpu:0 `invalid` (hung), both in the findings."""
    out = tmp_path / "r.json"
    args = ("run", "--units", "cpu:0,cpu:1", "--workloads", "matmul_golden", "--budget", "12s",
            "--inject", "cpu:1:bitflip", "--inject", "cpu:0:hang@0.5", "--retest", "1", "-o", str(out),
            "--no-history")  # fmt: skip
    env = {**child_env(), "XDG_STATE_HOME": str(tmp_path / "state")}
    proc = subprocess.run(
        sdcscan_cmd(*args), capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180
    )
    report = json.loads(out.read_text())
    verdicts = {u["id"]: u["verdict"] for u in report["units"]}
    assert proc.returncode == EXIT_FAIL, proc.stderr
    assert verdicts == {"cpu:0": "invalid", "cpu:1": "fail"}, verdicts
    assert {f.get("unit") for f in report["findings"]} >= {"cpu:0", "cpu:1"}
    assert proc.stderr.strip().splitlines()[-1] == "exit: fail"
    # Issue 45: the failing unit's physical part is in the report, and its finding says to replace it.
    part = {u["id"]: u.get("part") for u in report["units"]}["cpu:1"]
    assert part == parts.cpu_part(1) and "socket" in part, part
    failing = [
        f for f in report["findings"] if f["unit"] == "cpu:1" and "out of service" in (f["next"] or "")
    ]
    assert failing and all(
        f"the part to replace: {parts.describe('cpu', part)}" in f["next"] for f in failing
    )


@pytest.mark.slow
def test_a_closed_stderr_pipe_or_a_full_disk_never_changes_the_exit_code(tmp_path: Path) -> None:
    """`sdcscan run ... 2>&1 | head -1` (the reader leaves after one line) and stderr on /dev/full
    (every write fails with ENOSPC): exit 0, the report written; a usage error with a full stderr: 2."""
    env = {**child_env(), "XDG_STATE_HOME": str(tmp_path / "state")}
    args = ("run", "--units", "cpu:0", "--workloads", "matmul_golden", "--budget", "8s", "--no-history")
    proc = subprocess.Popen(sdcscan_cmd(*args, "-o", str(tmp_path / "a.json")), stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, env=env, cwd=tmp_path)  # fmt: skip
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith(b"sdcscan run:")
    proc.stderr.close()  # the reader is gone: every later write gets EPIPE
    assert proc.wait(timeout=120) == EXIT_PASS
    assert json.loads((tmp_path / "a.json").read_text())["verdict"] == "pass"
    with open("/dev/full", "w") as full:
        done = subprocess.run(sdcscan_cmd(*args, "-o", str(tmp_path / "b.json")), stderr=full, env=env,
                              cwd=tmp_path, timeout=120)  # fmt: skip
        assert done.returncode == EXIT_PASS and (tmp_path / "b.json").exists()
        usage = subprocess.run(sdcscan_cmd("run", "--budget", "soon"), stderr=full, env=env, cwd=tmp_path,
                               timeout=60)  # fmt: skip
        assert usage.returncode == 2
