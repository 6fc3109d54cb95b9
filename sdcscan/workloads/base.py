"""The Workload contract: what every test must provide, and the Context the runner hands it.

A workload builds its inputs deterministically from the case seed, computes, checks itself and
returns an Outcome. It never reads the clock, prints, sleeps or seeds global RNG state: the runner
owns time, and `Context.phase` times compute versus checking on the workload's behalf. What a workload
is (description, evidence, parameters) lives in the torch-free catalogue, `sdcscan.workloads.SPECS`,
assembled from each workload's `sdcscan/workloads/<name>/spec.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeGuard, TypeVar, runtime_checkable

import torch

from sdcscan import faults
from sdcscan.checks import triton_kernels
from sdcscan.outcomes import Case, Outcome
from sdcscan.workloads import SPECS
from sdcscan.workloads.workload_spec import WorkloadSpec

if TYPE_CHECKING:  # a distributed run's modules are imported only by the workloads that join one
    from sdcscan.collectives.world import World


class Context:
    """What a workload may use: its device, its parameters, seeded generators, fault sites, phase timing."""

    def __init__(self, *, unit: str, device: torch.device, run_seed: int, params: Mapping[str, Any]) -> None:
        self.unit = unit
        self.device = device
        self.run_seed = run_seed
        self.params = dict(params)
        self._phases: dict[str, float] = {}
        self._pending: list[
            tuple[str, torch.cuda.Event, torch.cuda.Event]
        ] = []  # (phase, start, end) not yet read
        self._armed: faults.FaultSpec | None = None
        self.injected: dict[str, object] | None = None  # what an armed fault changed (faults.corrupt_)
        self.notes: list[str] = []  # facts a person should read in the report, e.g. a restricted input range
        # A distributed run's view of the world, else None. Only workloads whose spec says
        # `distributed` use it; they run every case with all ranks at once.
        self.world: World | None = None

    def note(self, text: str) -> None:
        """Record a fact about this unit (from prepare) that the report lists and findings repeat."""
        if text not in self.notes:
            self.notes.append(text)

    def generator(self, seed: int) -> torch.Generator:
        """A CPU generator: inputs are made on the CPU and moved, so every device sees the same data."""
        return torch.Generator().manual_seed(seed & (2**63 - 1))

    def fault(
        self,
        site: str,
        tensor: torch.Tensor,
        *,
        repeat: int = 0,
        repeats: int = 1,
        columns: int | None = None,
    ) -> torch.Tensor:
        """Mark a fault site. A no-op unless the runner armed a fault for this site in this case.

        A workload that repeats work inside a case passes every repeat's tensor with its index, so a fault
        can strike any repeat (the armed spec's, or one drawn from its seed). `columns` confines matrix
        fault models to the data columns of a tensor that also holds checksum columns.
        """
        spec = self._armed
        if (
            spec is not None
            and spec.site == site
            and self.injected is None
            and spec.strikes_pass(repeat, repeats)
        ):
            self.injected = faults.corrupt_(tensor, spec, columns)
            self.injected["site"] = site
            if repeats > 1:
                self.injected["repeat"] = repeat
        return tensor

    def armed_at(self, site: str) -> bool:
        """Whether `fault(site, ...)` would corrupt its tensor in this case: a workload that passes a
        shared tensor (a pool's) copies it first only then."""
        return self._armed is not None and self._armed.site == site and self.injected is None

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a block as `name`.

        On CUDA the block is timed by a pair of events on the device's stream, read when `phases` is
        next read (after the case): the device's time, and no wait for the device inside a case, so
        the GPU runs a case's kernels back to back.
        """
        if self.device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                yield
            finally:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                self._pending.append((name, start, end))
            return
        began = time.perf_counter()
        try:
            yield
        finally:
            self._phases[name] = self._phases.get(name, 0.0) + time.perf_counter() - began

    @property
    def phases(self) -> dict[str, float]:
        """Seconds per phase of the current case (on CUDA, this waits for its timed work to finish)."""
        if self._pending:
            self._pending[-1][2].synchronize()
            for name, start, end in self._pending:
                self._phases[name] = self._phases.get(name, 0.0) + start.elapsed_time(end) / 1000.0
            self._pending = []
        return self._phases

    def begin_case(self, armed: faults.FaultSpec | None) -> None:
        """Called by the runner before each case."""
        self._phases, self._pending = {}, []
        self._armed = armed
        self.injected = None


class Workload(Protocol):
    """One registered kind of test; `load(name)` returns its class."""

    name: ClassVar[str]  # stable id, lower_snake; never renamed once merged; its package's name
    spec: ClassVar[WorkloadSpec]  # its catalogue entry, SPECS[name]

    def __init__(self, params: Mapping[str, Any]) -> None:
        """Validate `params` (defaults merged with the profile's) and keep them; raises ValueError."""

    def prepare(self, ctx: Context) -> None:
        """Build what every case shares (tables, references, calibration), once per unit."""

    def run(self, ctx: Context, case: Case) -> Outcome:
        """One case: compute, check, digest."""


@runtime_checkable
class SelftestWorkload(Workload, Protocol):
    """An ABFT workload that `sdcscan selftest` sweeps (see sdcscan/selftest/sweep.py).

    Implementing every member is what makes a workload one: `has_selftest` checks for all of them.
    """

    negative_sites: ClassVar[tuple[str, ...]]  # fault sites the check cannot see by design: must stay silent
    selftest_variants: ClassVar[Mapping[str, Mapping[str, Any]]]  # variant name -> parameter overrides
    blind_spots: ClassVar[tuple[str, ...]]  # what the checks cannot catch by design, stated in the self-test

    @classmethod
    def for_selftest(cls, params: Mapping[str, Any]) -> Workload:
        """The workload the self-test runs (it may enable shortcuts a run must never take)."""

    @classmethod
    def selftest_bits(cls, variant: str, site: str) -> Sequence[int | str]:
        """What is swept at `site`: bit positions, "any" (a random bit per trial), or matrix fault models
        such as "swap_in_row" or "relerr:1e-3" (sdcscan.faults.MATRIX_KINDS)."""

    @classmethod
    def selftest_floor(cls, variant: str, site: str, bit: int | str) -> float | None:
        """Minimum detection fraction for (site, bit); None: report only."""


def has_selftest(cls: type[Workload]) -> TypeGuard[type[SelftestWorkload]]:
    """Whether `cls` implements the whole SelftestWorkload protocol."""
    return isinstance(cls, SelftestWorkload)  # the class object carries the class-level members


# Outputs of a case's repeats checked together. On a CPU a block that stays in cache is checked while it
# is there; on a GPU a larger block means fewer check kernels per GEMM (the cost model counts them: at
# 256 MiB an fp64 4096^2 output was its own block, 29 kernels a repeat; 1 GiB holds 8). Not yet measured
# on a GPU.
CHECK_BLOCK_BYTES = {"cpu": 4 << 20, "cuda": 1 << 30}


def takes_fused_kernel(ctx: Context, asked: str, workload: str, agrees: Callable[[], bool]) -> bool:
    """Whether a workload's blocks go through its fused check kernel on this unit, as its `check_kernel`
    asks (`triton_kernels.choose`, the start-up trial `agrees` included); a kernel asked for that cannot
    run is a note on the unit, and the torch check runs."""
    take, why = triton_kernels.choose(asked, ctx.device, workload, agrees)
    if why:
        ctx.note(why)
    return take


def check_block(device: torch.device, repeats: int, output_bytes: int) -> int:
    """Repeats whose outputs are checked together: as many as fit the device's block, at least one."""
    return max(1, min(repeats, CHECK_BLOCK_BYTES["cpu" if device.type == "cpu" else "cuda"] // output_bytes))


W = TypeVar("W", bound=Workload)
REGISTRY: dict[str, type[Workload]] = {}


def register(cls: type[W]) -> type[W]:
    """Class decorator adding a workload to REGISTRY.

    Raises:
        ValueError: at import, for a name with no catalogue entry, a `spec` that is not its entry, a
            module other than sdcscan/workloads/<name>/workload.py (`load` imports by name), or a second
            registration of the name.
    """
    name = cls.name
    if name not in SPECS:
        raise ValueError(f"workload {name!r} has no entry in sdcscan.workloads.SPECS")
    if cls.spec is not SPECS[name]:
        raise ValueError(f"workload {name!r}: its spec must be SPECS[{name!r}]")
    if cls.__module__ != f"sdcscan.workloads.{name}.workload":
        raise ValueError(f"workload {name!r} must be defined in sdcscan/workloads/{name}/workload.py")
    if name in REGISTRY:
        raise ValueError(f"workload {name!r} registered twice")
    REGISTRY[name] = cls
    return cls
