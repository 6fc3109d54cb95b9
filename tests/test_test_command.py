"""The README's test command is what CI runs: the same pytest passes, in the same order."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pytest_part(line: str) -> str:
    """From the first `python -m pytest` to the end of the command, without a trailing comment."""
    return line[line.index("python -m pytest") :].split("  #")[0].strip()


def test_ci_runs_the_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```sh\n(.*?)\n```", readme, flags=re.S)
    (install_and_test,) = [c for c in commands if "pip install -e '.[test,dev]'" in c]
    (ci_line,) = [
        line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "python -m pytest" in line
    ]
    assert _pytest_part(ci_line) == _pytest_part(install_and_test)
    # both passes: the parallel one leaves the `serial` tests to the second, which runs them alone
    assert '-n 2 --dist loadgroup -m "not serial"' in ci_line and ci_line.rstrip().split("  #")[0].endswith(
        "-m serial"
    )
