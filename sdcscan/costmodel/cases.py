"""One workload's `prepare` and cases, run on the meta device under the counting mode.

The workload is the shipped one (`sdcscan.workloads.load`), with the parameters a GPU unit of a profile
gets; only the device is meta and the Context's phases tag the counts instead of timing them. Host work
still runs for real (the CPU draws a pool as it would in a worker), so `prepare`'s measured host seconds
are this machine's share of a GPU unit's start-up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from sdcscan.calibration import measure as calibration
from sdcscan.checks import keyed_sums
from sdcscan.costmodel.counting import DEVICE, CostCounter, Tally, counting
from sdcscan.outcomes import Case
from sdcscan.profile import load_profile
from sdcscan.workloads import SPECS, load
from sdcscan.workloads.base import Context

RUN_SEED = 20261127
KEYS_MODELLED = 1 << 34  # fingerprint keys made ready on the meta device: more than any output's words
CASE_PHASES = ("setup", "compute", "check", "case")  # "case": run() outside any timed phase
Params = Mapping[str, Any]


@dataclass(frozen=True)
class CaseShape:
    """How the model walks a workload's cases: which parameter lists its kinds of case (one per
    occurrence in turn), how many repeats a case of a kind makes, and the parameters with `factor` times
    the repeats (to see that a case's kernels grow linearly with its repeats)."""

    kinds: Callable[[Params], int]
    repeats: Callable[[Params, int], int]
    scaled: Callable[[Params, int], dict[str, Any]]
    label: Callable[[Params, int], str]


def _listed(key: str) -> Callable[[Params], int]:
    return lambda p: len(p[key])


def _item(key: str) -> Callable[[Params, int], str]:
    """The kind of case an occurrence makes: its entry of the parameter list `key`, as text."""
    return lambda p, o: (
        "x".join(map(str, p[key][o % len(p[key])])) if key == "shapes" else str(p[key][o % len(p[key])])
    )


def _int8_repeats(p: Params, occurrence: int) -> int:
    from sdcscan.workloads.gemm_int8.workload import repeats_of  # registered with the catalogue's load

    return repeats_of(p, p["shapes"][occurrence % len(p["shapes"])])


SHAPES: dict[str, CaseShape] = {
    "gemm_int8": CaseShape(
        _listed("shapes"),
        _int8_repeats,
        lambda p, f: {**p, "ops_per_case": p["ops_per_case"] * f},
        _item("shapes"),
    ),
    "matmul_golden": CaseShape(
        _listed("dtypes"),
        lambda p, o: p["repeats"][o % len(p["repeats"])],
        lambda p, f: {**p, "repeats": [r * f for r in p["repeats"]]},
        _item("dtypes"),
    ),
    "gemm_fp": CaseShape(
        _listed("dtypes"),
        lambda p, o: p["repeats"][o % len(p["repeats"])],
        lambda p, f: {**p, "repeats": [r * f for r in p["repeats"]]},
        _item("dtypes"),
    ),
    "embbag_int8": CaseShape(
        _listed("bits"),
        lambda p, o: p["repeats"],
        lambda p, f: {**p, "repeats": p["repeats"] * f},
        lambda p, o: f"{p['bits'][o % len(p['bits'])]}-bit",
    ),
    "train": CaseShape(
        lambda p: 1,
        lambda p, o: p["steps"],
        lambda p, f: {**p, "steps": p["steps"] * f},
        lambda p, o: str(p["dtype"]),
    ),
}


class ModelContext(Context):
    """The Context of a unit whose device is meta: phases tag the counter instead of timing."""

    def __init__(self, counter: CostCounter, params: Params) -> None:
        super().__init__(unit="model:0", device=torch.device(DEVICE), run_seed=RUN_SEED, params=params)
        self.counter = counter

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        outer, self.counter.phase = self.counter.phase, name
        try:
            yield
        finally:
            self.counter.phase = outer


@dataclass(frozen=True)
class CaseCost:
    """One case as counted: its kind (occurrence), repeats, and the tally of each phase of `run`."""

    occurrence: int
    repeats: int
    phases: Mapping[str, Tally]

    def total(self, what: Callable[[Tally], float]) -> float:
        return sum(what(t) for t in self.phases.values())

    @property
    def host_waits(self) -> int:
        return int(self.total(lambda t: t.host_waits))

    @property
    def kernels(self) -> int:
        return int(self.total(lambda t: len(t.kernels)))

    @property
    def host_ops(self) -> int:
        return int(self.total(lambda t: sum(t.host_ops.values())))

    def phase(self, name: str) -> Tally:
        return self.phases.get(name) or Tally()


@dataclass(frozen=True)
class WorkloadCost:
    """A workload on one (meta) GPU unit: its prepare, measured host seconds of it, and its cases."""

    name: str
    params: Params
    prepare: Tally
    prepare_host_s: float
    cases: tuple[CaseCost, ...]


def model_workload(
    name: str, params: Params, *, occurrences: Sequence[int] | None = None, kernels: str = "auto"
) -> WorkloadCost:
    """Prepare `name` with `params` on the meta device and run one case of each kind (or the cases of
    these `occurrences`). `kernels`: the fused check kernels as a GPU takes them by default ("auto"), or
    every one asked for ("fused"), the fingerprint's and a workload's `check_kernel` alike."""
    shape = SHAPES[name]
    wanted = range(shape.kinds(params)) if occurrences is None else occurrences
    if kernels != "auto" and "check_kernel" in SPECS[name].defaults:
        params = {**params, "check_kernel": kernels}
    keyed_sums.choose(torch.device(DEVICE), kernels)
    if not keyed_sums.chosen(torch.device(DEVICE)):  # torch's keyed product: keys a unit builds once
        keyed_sums.fingerprint_keys(KEYS_MODELLED, torch.device(DEVICE))
    workload = load(name)(params)
    with counting() as counter, _stand_in_thresholds():
        ctx = ModelContext(counter, params)
        began = time.perf_counter()
        workload.prepare(ctx)
        prepare_s = time.perf_counter() - began
        prepare = counter.tallies.pop("prepare", Tally())
        found = []
        for occurrence in wanted:
            counter.tallies, counter.phase = {}, "case"
            ctx.begin_case(None)
            seed = (RUN_SEED * 1_000_003 + occurrence) & (2**63 - 1)
            workload.run(ctx, Case(occurrence, name, seed, occurrence, dict(params)))
            found.append(CaseCost(occurrence, shape.repeats(params, occurrence), dict(counter.tallies)))
    return WorkloadCost(name, params, prepare, prepare_s, tuple(found))


@contextmanager
def _stand_in_thresholds() -> Iterator[None]:
    """gemm_fp's e_max for the meta device, which has no data to calibrate on: half the ceiling (any
    accepted value gives the same counts; the threshold's value matters only to data)."""
    original = calibration.resolve

    def resolve(
        device: torch.device, dtype: str, checker: str, shape: tuple[int, int, int], path: str = ""
    ) -> calibration.Threshold:
        ceiling = calibration.ceiling_for(dtype, checker, shape)
        return calibration.Threshold(ceiling / 2, "model", None, ceiling, e_mean=ceiling / 2)

    calibration.resolve = resolve  # restored below
    try:
        yield
    finally:
        calibration.resolve = original


def gpu_params(profile: str) -> dict[str, dict[str, Any]]:
    """The parameters a GPU unit gets for each per-unit workload of a built-in profile."""
    from sdcscan.workloads import SPECS

    found = {}
    for entry in load_profile(profile).workloads:
        if not SPECS[entry.name].distributed:
            found[entry.name] = {**SPECS[entry.name].defaults, **entry.params_for("cuda")}
    return found


def cpu_params(profile: str, unit_class: str) -> dict[str, dict[str, Any]]:
    """The parameters a CPU unit of this class (`units.CPU_CLASSES`) gets for each per-unit workload."""
    from sdcscan.workloads import SPECS

    found = {}
    for entry in load_profile(profile).workloads:
        if not SPECS[entry.name].distributed:
            found[entry.name] = {**SPECS[entry.name].defaults, **entry.params_for("cpu", unit_class)}
    return found
