"""The torch settings of a process that computes for a unit: pinned to the unit, its thread count, and
deterministic, with no reduced-precision shortcuts (TF32, reduced-precision reductions) anywhere but
where a workload allows them itself (sdcscan/checks/tf32.py).

A unit's worker calls `configure_torch` before any computation; so do the commands and scripts that
measure on a unit outside a run (`sdcscan info --peaks`, `sdcscan abft`, scripts/bench_*.py), so that what
they measure is what a run computes. torch is imported by the call, not with this module: the parent of a
run imports the worker's module and must not import torch.
"""

from __future__ import annotations

import os
from types import ModuleType

from sdcscan.units import Unit


def configure_torch(unit: Unit, threads: int) -> ModuleType:
    """Pin to the unit's CPU and make torch deterministic before any computation."""
    if unit.kind == "cpu" and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {unit.index})
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ.setdefault("MKL_DYNAMIC", "FALSE")
    os.environ.setdefault("OMP_DYNAMIC", "FALSE")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    torch.set_num_threads(threads)
    _deterministic(torch)
    if unit.kind == "cuda":
        torch.cuda.set_device(unit.index)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    return torch


def _deterministic(torch: ModuleType) -> None:
    """Deterministic algorithms on, without `torch.use_deterministic_algorithms`: that imports
    torch._inductor to set its flag (1.1 s of every unit's start-up on a Xeon core, torch 2.13), and
    sdcscan compiles nothing with inductor (its Triton kernels are its own)."""
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:  # a torch without the private setter: the public call, at its cost
        torch.use_deterministic_algorithms(True)
    else:
        setter(True, warn_only=False)
