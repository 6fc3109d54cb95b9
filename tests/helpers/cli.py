"""Run sdcscan from this checkout exactly as a user would, and check what it tells people on stderr."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/helpers/cli.py -> ../..

# The CPUs this process may run on: a run's units are these, not every CPU of the machine.
CPUS = (
    sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
)
TWO = f"cpu:{CPUS[0]},cpu:{CPUS[-1]}"  # two units for runs with a good and a bad one
needs_two_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="needs two logical CPUs")


def sdcscan_cmd(*args: str) -> list[str]:
    """The command line that runs this checkout's sdcscan with ARGS in a child process."""
    return [sys.executable, "-m", "sdcscan", *args]


def child_env() -> dict[str, str]:
    """This checkout first on the path, and no state left in the user's home."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def one_error_line(stderr: str, *, after_usage: bool = False) -> str:
    """Assert that stderr says what went wrong in exactly one `Error:` line, and return that line.

    Args:
        stderr: everything the command wrote to stderr.
        after_usage: click's own option checks (a value out of range) print a `Usage:` line and a
            `Try ... --help` hint before the error line; nothing else may precede it.
    """
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    if after_usage:
        assert len(lines) == 3 and lines[0].startswith("Usage:") and lines[1].startswith("Try "), stderr
    else:
        assert len(lines) == 1, stderr
    assert lines[-1].startswith("Error:"), stderr
    return lines[-1]
