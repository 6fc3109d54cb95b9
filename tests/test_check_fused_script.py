"""scripts/check_fused.py, the fused kernels' confirmation that scripts/gpu_check.sh runs on a lent GPU, run
here on small shapes in Triton's interpreter: it finds every output equal and every case the same, the
fingerprint kernel's included."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.tools import missing_tool

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_fused.py"


@pytest.mark.slow
def test_the_gpu_confirmation_script_compares_outputs_and_cases_with_both_kernels() -> None:
    if importlib.util.find_spec("triton") is None:
        missing_tool("Triton", "pip install -e '.[test]' on Linux x86_64")
    args = [
        "--unit",
        "cpu",
        "--rows",
        "24",
        "--widths",
        "40:48",
        "--bags",
        "40",
        "--words",
        "40",
        "--tiles",
        "3,40,16,48",
        "--golden",
        "3,40,300",
        "--repeats",
        "1",
    ]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    outputs = [line for line in lines if "output" in line]
    assert [(o["workload"], o["output"], o["equal"]) for o in outputs] == [
        ("gemm_int8", [24, 48], True),
        ("embbag_int8", [40, 64], True),
        ("fingerprint", [8, 40], True),
        ("gemm_fp", [3, 40, 48], True),
        ("matmul_golden", [3, 40, 300], True),
    ]
    cases = [line for line in lines if "case" in line]
    assert [(c["workload"], c["check_kernel"]) for c in cases] == [
        (name, kernel)
        for name in ("gemm_int8", "embbag_int8", "gemm_fp", "matmul_golden")
        for kernel in ("torch", "torch", "fused", "fused")
    ]
    assert lines[-1] == {"cases_equal": True}


def test_the_script_refuses_a_device_the_kernels_cannot_run_on() -> None:
    """Without the interpreter, a CPU cannot run Triton: an error naming why, before any work."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--unit", "cpu"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 1 and "cannot run on cpu" in done.stderr
