"""What a run tells its observer (the progress display) as it goes: one frozen record per kind of event.

`scan` and the runner call an `EventSink` with these; `render.run.Progress` is the sink `sdcscan run`
uses. Events only inform: nothing a sink does changes the run. No torch, no rich.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from sdcscan.outcomes import OutcomeRecord


@dataclass(frozen=True, slots=True)
class RunStarted:
    """The run is set up and its workers are about to start."""

    profile: str  # the profile's name
    seed: int
    seed_source: str  # cli | profile | week
    budget_s: float
    journal: str  # path of the run's journal
    units: tuple[str, ...]
    deadline: float  # seconds since the epoch: no case starts after it


@dataclass(frozen=True, slots=True)
class UnitPreparing:
    """A unit's worker began a step of its start-up: `step` (what it does), number `number` of `steps`."""

    unit: str
    step: str
    number: int
    steps: int


@dataclass(frozen=True, slots=True)
class UnitReady:
    """A unit's worker has prepared its workloads and runs cases."""

    unit: str


@dataclass(frozen=True, slots=True)
class CaseStarted:
    """A unit started a case (main pass or re-run)."""

    unit: str
    index: int
    workload: str


@dataclass(frozen=True, slots=True)
class CaseFinished:
    """A unit reported the outcome of a case; attempt 0 is the main pass, 1, 2, … are re-runs."""

    unit: str
    index: int
    workload: str
    attempt: int
    outcome: OutcomeRecord  # the outcome as the worker sent it (status, digest, ops, seconds, …)


@dataclass(frozen=True, slots=True)
class PhaseChanged:
    """The run entered a new phase after the main pass: `retest`, re-running the listed cases."""

    name: str
    cases: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class UnitProblem:
    """A unit was stopped (hung, died, never started): it will be invalid; the others go on."""

    unit: str
    reason: str


@dataclass(frozen=True, slots=True)
class RunNote:
    """Something the person running sdcscan should know before the run starts (e.g. it runs unlocked)."""

    text: str


Event: TypeAlias = (
    RunNote | RunStarted | UnitPreparing | UnitReady | CaseStarted | CaseFinished | PhaseChanged | UnitProblem
)
EventSink: TypeAlias = Callable[[Event], None]
