"""The workload catalogue: what each workload is, its parameters and their defaults, without importing torch.

Each workload lives in one package, `sdcscan/workloads/<name>/`: `spec.py` (torch-free) declares its
`SPEC` (a `WorkloadSpec`: description, evidence, quality, parameters with defaults and ranges, fault
sites, tiny sizes, rules) and the limits and names it validates against; `workload.py` is its torch
code, which imports those constants from `spec.py`. The parent process (profile validation,
`sdcscan workloads`) reads only the specs; the worker calls `load(name)`, which imports
`<name>/workload.py` and returns the class it registered.

The spec also states what a pass of the workload proves (`coverage`: checked ops and the detection a rate bound assumes) and the
plain ops its efficiency is measured against (`plain_ops`, for `sdcscan.peaks`). Adding a workload:
its package (`__init__.py`, `spec.py`, `workload.py`, and `selftest_spec.py` for an ABFT workload:
README "Adding a workload"), its row in README's table, and a profile that runs it. The package is
found here by its `spec.py`; nothing else lists it.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import pkgutil
from typing import TYPE_CHECKING

from sdcscan.errors import UsageError
from sdcscan.workloads.params import shown
from sdcscan.workloads.workload_spec import Quality, WorkloadSpec

if TYPE_CHECKING:
    from sdcscan.workloads.base import Workload

__all__ = ["NAMES", "SPECS", "Quality", "WorkloadSpec", "load", "spec"]


def _packages() -> tuple[str, ...]:
    """Every package under sdcscan/workloads/ that has a spec.py, by name."""
    return tuple(
        sorted(
            m.name
            for m in pkgutil.iter_modules(__path__)
            if m.ispkg and importlib.util.find_spec(f"{__name__}.{m.name}.spec") is not None
        )
    )


# Every workload, in the order `SPECS` lists them: each is the package sdcscan/workloads/<name>/.
NAMES = _packages()


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
