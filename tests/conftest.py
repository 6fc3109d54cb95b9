"""Shared fixtures: run the sdcscan CLI in a subprocess from this checkout, exactly as a user would.

Plain helper functions live in tests/helpers/; this file holds only fixtures.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

# The tests run Triton kernels in its interpreter (tests/test_fused_int8_check.py). Triton binds its
# language to the interpreter when it is first imported, and torch may import it early (the cost
# model's flop counter does), so the choice is made here, before anything imports torch.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

from tests.helpers.cli import child_env, sdcscan_cmd


@pytest.fixture(autouse=True)
def _signal_handlers_restored() -> Iterator[None]:
    """`sdcscan run` installs its SIGINT/SIGTERM handlers for the rest of its process, and `main` blocks
    both as it exits (a command ends there); a test that runs them in this process must not leave
    either to the next test, nor a signal it received (a command keeps what its handlers took before
    it began: `interrupts.take_over`)."""
    from sdcscan import interrupts

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    hook = sys.unraisablehook
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])  # `main` blocks both as it exits
    yield
    interrupts.install()  # a fresh state, then the handlers as they were
    for s, handler in saved.items():
        signal.signal(s, handler)
    sys.unraisablehook = hook
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@pytest.fixture(autouse=True)
def _cpu_affinity_kept() -> Iterator[None]:
    """A worker pins its process to its unit's CPU (`sdcscan.torch_setup.configure_torch`). A test that
    lets it pin pytest's own process fails here, at its source: every later test of that process, and
    every command it spawns, would see one CPU ("unknown unit 'cpu:1'")."""
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    yield
    if before is not None and os.sched_getaffinity(0) != before:
        pinned = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, before)
        pytest.fail(f"the test pinned pytest's process to CPUs {pinned}; restored to {sorted(before)}")


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread_in_process() -> None:
    """In-process products run as a unit runs them: one thread (`configure_torch` gives a CPU unit one).
    It also keeps two pytest workers on two cores from oversubscribing them: with torch's default of
    a thread per core, the zero-mean coverage test took 31 s beside one busy loop, against 14.5 s with
    one thread (12 s alone). Tests that need more threads set and restore them themselves."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(autouse=True, scope="session")
def _state_dir_of_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """In-process work (the self-test, workloads' `prepare`) writes to the state directory, e.g. gemm_fp's
    calibration cache: one temporary state directory for the session, never the user's own."""
    import os

    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if saved is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = saved


@pytest.fixture
def run_cli(tmp_path: Path):
    """Run `python -m sdcscan ARGS` with XDG_STATE_HOME in a temporary directory; returns CompletedProcess."""

    def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = child_env()
        env["XDG_STATE_HOME"] = str(tmp_path / "state")
        return subprocess.run(
            sdcscan_cmd(*args), capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp_path
        )

    return _run


@pytest.fixture
def calibration_here(tmp_path: Path) -> str:
    """The shipped gemm_fp calibration, re-keyed to this CPU (×2 e_max) when it has no entry for it,
    so tests that rely on calibrated thresholds run on any CPU. Returns the file's path."""
    import json

    import torch

    from sdcscan.calibration import measure as calibrate
    from sdcscan.units import device_model

    table = calibrate.load_table()
    model = device_model(torch.device("cpu"))
    if not any(e["device_model"] == model for e in table["entries"]):
        table["entries"] = [{**e, "device_model": model, "e_max": 2 * e["e_max"]} for e in table["entries"]]
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(table))
    return str(path)
