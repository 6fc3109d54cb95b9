"""scripts/profile_case.py, the kernel-by-kernel profile of a workload's cases that the next GPU check
runs: on a CPU it must print the prepare step, a warm-up and the profiled cases, then the operations
with the most time, the workload's GEMM among them."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.cli import child_env
from tests.helpers.scripts import SCRIPTS


def _profile(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "profile_case.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )


def test_a_cpu_profile_names_the_gemm_among_the_top_operations():
    done = _profile("--workload", "gemm_int8", "--profile", "quick", "--cases", "2", "--top", "5")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert rows[0]["step"] == "prepare"
    cases = [r for r in rows if "case" in r]
    assert [r["label"] for r in cases] == ["warm-up", "profiled", "profiled"]
    assert all(r["status"] == "ok" and r["compute"] > 0 and r["check"] > 0 for r in cases)
    ops = [r for r in rows if "op" in r]
    assert 0 < len(ops) <= 5 and "aten::_int_mm" in {r["op"] for r in ops}
    assert sum(r["share"] for r in ops) <= 1.0


def test_a_workload_the_profile_lacks_is_refused():
    done = _profile("--workload", "embbag_int8", "--profile", "quick")
    assert done.returncode != 0 and "has no workload embbag_int8" in done.stderr
