"""The workload catalogue: what each workload is, its parameters and their defaults, without importing torch.

Each workload lives in one package, `sdcscan/workloads/<name>/`: `spec.py` (torch-free) declares its
`SPEC` (a `WorkloadSpec`: description, evidence, quality, parameters with defaults and ranges, fault
sites, tiny sizes, rules) and the limits and names it validates against; `workload.py` is its torch
code, which imports those constants from `spec.py`. The parent process (profile validation,
`sdcscan workloads`) reads only the specs; the worker calls `load(name)`, which imports
`<name>/workload.py` and returns the class it registered.

Adding a workload: its package (`__init__.py`, `spec.py`, `workload.py`), its name in `NAMES` below,
its row in README's table, and a profile that runs it.
"""

from __future__ import annotations

import difflib
import importlib
from typing import TYPE_CHECKING

from sdcscan.errors import UsageError
from sdcscan.workloads.params import shown
from sdcscan.workloads.workload_spec import Quality, WorkloadSpec

if TYPE_CHECKING:
    from sdcscan.workloads.base import Workload

__all__ = ["NAMES", "SPECS", "Quality", "WorkloadSpec", "load", "spec"]

# Every workload, in the order `SPECS` lists them: each is the package sdcscan/workloads/<name>/.
NAMES = ("train", "train_dp", "matmul_golden", "gemm_int8", "embbag_int8", "gemm_fp", "collective")


def _declared(name: str) -> WorkloadSpec:
    """The `SPEC` of sdcscan/workloads/<name>/spec.py (torch-free), checked to be `name`'s."""
    found = importlib.import_module(f"{__name__}.{name}.spec").SPEC
    if not isinstance(found, WorkloadSpec) or found.name != name:
        raise ValueError(f"sdcscan/workloads/{name}/spec.py: SPEC must be a WorkloadSpec named {name!r}")
    return found


SPECS: dict[str, WorkloadSpec] = {name: _declared(name) for name in NAMES}


def spec(name: str) -> WorkloadSpec:
    """The catalogue entry of workload `name`.

    Raises:
        UsageError: no workload has that name (the message suggests the closest one).
    """
    try:
        return SPECS[name]
    except KeyError:
        close = difflib.get_close_matches(name, SPECS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(sorted(SPECS))})"
        raise UsageError(f"unknown workload {shown(name)}{hint}") from None  # shown: it may come from a file


def load(name: str) -> type[Workload]:
    """The workload class called `name`, importing its torch code (and torch) on first use.

    Raises:
        UsageError: no workload has that name.
    """
    spec(name)
    from sdcscan.workloads.base import REGISTRY

    if name not in REGISTRY:
        importlib.import_module(f"{__name__}.{name}.workload")
    return REGISTRY[name]
