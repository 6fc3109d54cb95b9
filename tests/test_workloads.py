"""Every registered workload, at tiny size: silent and repeatable on clean runs, and it fires under injection."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

from sdcscan.faults import FaultSpec
from sdcscan.outcomes import EVIDENCE, STATUS_MISMATCH, STATUS_OK, Case
from sdcscan.workloads import SPECS, load
from sdcscan.workloads.base import Context

NAMES = sorted(n for n, s in SPECS.items() if not s.distributed)  # distributed ones need a world


def make(name: str, **overrides):
    cls = load(name)
    params = {**cls.spec.defaults, **cls.spec.tiny, **overrides}
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=4242, params=params)
    workload = cls(params)
    workload.prepare(ctx)
    return workload, ctx


def run_case(workload, ctx, index, fault=None):
    ctx.begin_case(fault)
    case = Case(index=index, workload=workload.name, seed=1000 + index, occurrence=index)
    return workload.run(ctx, case)


@pytest.mark.parametrize("name", NAMES)
def test_clean_cases_pass_and_repeat_bit_identically(name):
    """No false positive on clean data, and the same case gives the same digest twice."""
    workload, ctx = make(name)
    for index in range(4):
        first, again = run_case(workload, ctx, index), run_case(workload, ctx, index)
        assert first.status == STATUS_OK, first.mismatches
        assert first.digest == again.digest and first.digest
        assert first.ops > 0


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", ["bitflip", "nan"])
def test_injection_at_the_default_site_is_detected(name, kind):
    """A fault at the site `--inject` uses is caught: by an invariant, or by a changed digest."""
    workload, ctx = make(name)
    site = type(workload).spec.fault_sites[0]
    detected = 0
    for index in range(6):
        clean = run_case(workload, ctx, index)
        bit = None if kind == "nan" else -2  # a high exponent or magnitude bit of the site's word
        hit = run_case(workload, ctx, index, FaultSpec(kind, site, seed=index, bit=bit))
        assert ctx.injected is not None, "the workload never passed its default fault site through ctx.fault"
        detected += hit.status == STATUS_MISMATCH or hit.digest != clean.digest
    assert detected == 6


@pytest.mark.parametrize("name", NAMES)
def test_workload_declares_its_contract(name):
    """Its module registers a class of that name whose spec is the catalogue entry, and the entry is complete."""
    cls = load(name)
    spec = SPECS[name]
    assert cls.name == name and cls.spec is spec and cls.__module__ == f"sdcscan.workloads.{name}.workload"
    assert spec.name == name and spec.description and spec.fault_sites and spec.evidence
    assert set(spec.evidence) <= set(EVIDENCE)
    assert set(spec.tiny) <= set(spec.defaults)


class _FakeEvent:
    """A stand-in for torch.cuda.Event: records when it was recorded (a counter) and what was waited on."""

    clock: ClassVar[int] = 0
    waited: ClassVar[list[int]] = []

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.at: int | None = None

    def record(self) -> None:
        _FakeEvent.clock += 1
        self.at = _FakeEvent.clock

    def synchronize(self) -> None:
        assert self.at is not None
        _FakeEvent.waited.append(self.at)

    def elapsed_time(self, end: _FakeEvent) -> float:
        assert self.at is not None and end.at is not None
        return 1000.0 * (end.at - self.at)  # milliseconds: one tick is a second


def test_cuda_phases_are_timed_by_events_and_never_wait_inside_a_case(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a GPU, `phase` records events instead of synchronising: the case's kernels run back to back,
    and the times are read (one wait, for the last event) when the worker reads `phases` after the case."""
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)

    def no_wait(*_: object) -> None:
        raise AssertionError("a phase synchronised with the device")

    monkeypatch.setattr(torch.cuda, "synchronize", no_wait)
    _FakeEvent.clock, _FakeEvent.waited = 0, []
    ctx = Context(unit="cuda:0", device=torch.device("cuda", 0), run_seed=0, params={})
    ctx.begin_case(None)
    with ctx.phase("setup"):  # events 1, 2
        pass
    for _ in range(3):
        with ctx.phase("compute"):  # events at ticks 3-6, 7-10, 11-14
            _FakeEvent.clock += 2  # work on the device: two ticks
    assert _FakeEvent.waited == []
    assert ctx.phases == {"setup": 1.0, "compute": 9.0}
    assert _FakeEvent.waited == [14]  # one wait, for the last event
    assert ctx.phases == {"setup": 1.0, "compute": 9.0}  # read once, kept
    ctx.begin_case(None)
    assert ctx.phases == {}


def test_cpu_phases_add_up_the_wall_time_of_their_blocks() -> None:
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=0, params={})
    ctx.begin_case(None)
    for _ in range(2):
        with ctx.phase("compute"):
            sum(range(10000))
    assert set(ctx.phases) == {"compute"} and ctx.phases["compute"] > 0
