"""The Workload contract: what every test must provide, and the Context the runner hands it.

A workload builds its inputs deterministically from the case seed, computes, checks itself and
returns an Outcome. It never reads the clock, prints, sleeps or seeds global RNG state: the runner
owns time, and `Context.phase` times compute versus checking on the workload's behalf.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar, Protocol, TypeVar

import torch

from sdcscan import faults
from sdcscan.outcomes import Case, Outcome


class Quality(enum.Enum):
    BETA = "beta"
    PROD = "prod"


class Context:
    """What a workload may use: its device, its parameters, seeded generators, fault sites, phase timing."""

    def __init__(self, *, unit: str, device: torch.device, run_seed: int, params: Mapping[str, Any]) -> None:
        self.unit = unit
        self.device = device
        self.run_seed = run_seed
        self.params = dict(params)
        self.phases: dict[str, float] = {}
        self._armed: faults.FaultSpec | None = None
        self.injected: dict[str, Any] | None = None
        self.notes: list[str] = []  # facts a person should read in the report, e.g. a restricted input range

    def note(self, text: str) -> None:
        """Record a fact about this unit (from prepare) that the report lists and findings repeat."""
        if text not in self.notes:
            self.notes.append(text)

    def generator(self, seed: int) -> torch.Generator:
        """A CPU generator: inputs are made on the CPU and moved, so every device sees the same data."""
        return torch.Generator().manual_seed(seed & (2**63 - 1))

    def fault(self, site: str, tensor: torch.Tensor) -> torch.Tensor:
        """Mark a fault site. A no-op unless the runner armed a fault for this site in this case."""
        spec = self._armed
        if spec is not None and spec.site == site and self.injected is None:
            self.injected = faults.corrupt_(tensor, spec)
            self.injected["site"] = site
        return tensor

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a block as `name`; on CUDA, synchronise first so the time is the device's."""
        self._sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - start

    def begin_case(self, armed: faults.FaultSpec | None) -> None:
        """Called by the runner before each case."""
        self.phases = {}
        self._armed = armed
        self.injected = None

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


class Workload(Protocol):
    name: ClassVar[str]  # stable id, lower_snake; never renamed once merged
    description: ClassVar[str]  # one line, shown by `sdcscan workloads`
    evidence: ClassVar[tuple[str, ...]]  # subset of (INVARIANT, CONSENSUS, REPEAT)
    quality: ClassVar[Quality]
    defaults: ClassVar[Mapping[str, Any]]  # parameters and their defaults; profiles may override these only
    fault_sites: ClassVar[tuple[str, ...]]  # sites passed through ctx.fault; the first is used by --inject
    tiny: ClassVar[Mapping[str, Any]]  # parameter overrides that make a case take milliseconds (tests, CI)
    # Optional, for ABFT workloads that `sdcscan selftest` sweeps (see sdcscan/selftest.py):
    #   negative_sites: ClassVar[tuple[str, ...]]   sites the check cannot see by design (must stay silent)
    #   selftest_variants: ClassVar[dict[str, dict[str, Any]]]   variant name -> parameter overrides

    def prepare(self, ctx: Context) -> None: ...

    def run(self, ctx: Context, case: Case) -> Outcome: ...


W = TypeVar("W")
REGISTRY: dict[str, Any] = {}


def register(cls: W) -> W:
    """Class decorator adding a workload to REGISTRY; a duplicate name fails at import."""
    name = cls.name  # type: ignore[attr-defined]
    if name in REGISTRY:
        raise ValueError(f"workload {name!r} registered twice")
    REGISTRY[name] = cls
    return cls
