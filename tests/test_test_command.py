"""The README's test command is what CI runs: the same pytest passes, in the same order, and a failing
pass fails CI."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / ".ci" / "run"


def _readme_passes() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```sh\n(.*?)\n```", readme, flags=re.S)
    (install_and_test,) = [c for c in commands if "pip install -e '.[test,dev]'" in c]
    return [part.strip() for part in install_and_test.split("&&") if "pytest" in part]


def _ci_passes() -> list[str]:
    return [line.strip() for line in CI.read_text().splitlines() if line.startswith("python -m pytest")]


def test_ci_runs_the_readmes_test_command() -> None:
    assert _ci_passes() == _readme_passes()
    # both passes: the parallel one leaves the `serial` tests to the second, which runs them alone
    assert _ci_passes() == [
        'python -m pytest -n 2 --dist loadgroup -m "not serial"',
        "python -m pytest -m serial",
    ]


def test_each_pass_is_a_line_of_its_own_so_that_its_failure_stops_ci() -> None:
    """Under `set -e`, `a && b` with a failing `a` runs neither `b` nor stops the script: once, a failing
    parallel pass left the serial one unrun and CI exited 0."""
    assert "set -euo pipefail" in CI.read_text()
    steps = [
        line for line in CI.read_text().splitlines() if line.startswith(("pip ", "python ", "python3 ", ". "))
    ]
    assert steps and all("&&" not in line and "||" not in line for line in steps), steps
