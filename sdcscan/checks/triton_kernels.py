"""Where sdcscan's Triton check kernels can run, and the switch that asks for them.

A fused check kernel (sdcscan/checks/int8_block.py, sdcscan/checks/embbag/exact_fused.py,
sdcscan/checks/tile_verdicts.py, sdcscan/checks/keyed_sums.py, sdcscan/checks/golden_compare.py) gives
the same results as the torch ops it replaces, in one read of the outputs. A workload's `check_kernel`
parameter chooses: "auto" (the default) runs it on a GPU where Triton is installed once a lent GPU has
matched it (MATCHED_ON_A_GPU), "fused" wherever `unavailable` finds nothing in the way (a CPU too, in
Triton's interpreter: the tests), "torch" never. Where a kernel asked for cannot run, the torch check
runs and the unit's notes say why. The cost model's meta device stands for a GPU: it counts what "auto"
takes there.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable

import torch

# The kernels a lent GPU has compiled and matched bit for bit against their torch paths, clean and struck
# (scripts/check_fused.py, README "On a GPU"): only these are a GPU's default (issue 42). A kernel tested in
# Triton's interpreter and compiled here, but not yet run on a GPU, runs only where asked for ("fused").
MATCHED_ON_A_GPU = frozenset({"gemm_int8", "embbag_int8"})


def unavailable(device: torch.device) -> str:
    """'' where a Triton kernel can run on `device`, else why not: Triton compiles for CUDA devices and
    interprets on the CPU when TRITON_INTERPRET=1; the meta device (the cost model) only counts it."""
    if device.type == "meta":
        return ""
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed"
    if device.type == "cuda" or (device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"):
        return ""
    return f"Triton does not run on {device.type} (on a CPU only in its interpreter, TRITON_INTERPRET=1)"


def choose(
    asked: str, device: torch.device, workload: str, agrees: Callable[[], bool] | None = None
) -> tuple[bool, str]:
    """(whether to run the fused kernel, a note for the unit or ''), for a workload's `check_kernel`
    (`workload`: the kernel's name in MATCHED_ON_A_GPU).

    `agrees`: the kernel run once on a small input and compared with the torch check. A GPU, driver or
    Triton on which it fails to compile, launch or agree gets the torch check and a note: the default
    must never cost a unit its verdicts. Not run on the meta device (the cost model: nothing runs).
    """
    if asked == "torch" or (asked == "auto" and (device.type == "cpu" or workload not in MATCHED_ON_A_GPU)):
        return False, ""
    why = unavailable(device)
    if why:
        return False, f"{workload}: the fused check kernel cannot run on {device} ({why}); torch checks"
    if agrees is None or device.type == "meta":
        return True, ""
    try:
        if agrees():
            return True, ""
        why = "its sums differed from the torch check's"
    except Exception as err:  # compile or launch errors of every kind, all told
        why = f"{type(err).__name__}: {err}".splitlines()[0][:200]
    return (
        False,
        f"{workload}: the fused check kernel failed its start-up trial on {device} ({why}); torch checks",
    )
