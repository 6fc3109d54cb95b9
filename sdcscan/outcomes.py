"""The words every part of sdcscan shares (DESIGN.md, "Vocabulary"), spelled once and free of torch.

A workload turns a `Case` into an `Outcome` (with `Mismatch`es when a check fired); the worker sends it
as an `OutcomeRecord`, the runner journals it placed (`CaseOutcome`), and the parent judges the
`CaseResult` of each main-pass case with evidence of the kinds below, giving each unit and the run a
`Verdict`, which carries its severity and its exit code. Two helpers every reader of units and files
shares live here too: `unit_order` (cpu:2 before cpu:10) and `printable` (file text shown without
terminal controls).
The parent process, `compare`, `report`, `export`, `status` and `history` import this module and never
torch.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, TypedDict

from sdcscan.errors import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_PASS

# Case statuses: what one case produced on one unit.
STATUS_OK: Final = "ok"
STATUS_MISMATCH: Final = "mismatch"  # an invariant fired: SDC suspected on this unit
STATUS_ERROR: Final = "error"  # the workload raised: the unit cannot be judged
StatusWord = Literal["ok", "mismatch", "error"]  # the report declares its status column with it
STATUSES: tuple[StatusWord, ...] = (STATUS_OK, STATUS_MISMATCH, STATUS_ERROR)
# Outcome.detail key of an ok case that checked nothing because the unit lacks its datapath (fp8 before
# sm_89, TF32 on a CPU): its value says why. Such a case counts no ops, so no proof counts it as coverage.
UNCOVERED: Final = "uncovered"

# Kinds of evidence (DESIGN.md, "Three independent kinds of evidence"), plus a recorded golden.
INVARIANT: Final = "invariant"  # the case checks itself: golden value, ABFT identity, NaN/Inf
CONSENSUS: Final = "consensus"  # the digest is bit-identical across units of a cohort
REPEAT: Final = "repeat"  # the digest is bit-identical when the case is re-run on the same unit
GOLDEN = "golden"  # the digest equals the one recorded for this plan and cohort (`sdcscan golden`)
EVIDENCE = (INVARIANT, CONSENSUS, REPEAT)  # what a workload can declare it supports


class Verdict(str, enum.Enum):
    """A unit's or a run's verdict. The run's is the worst of its units' (`Verdict.worst`): a unit that
    miscomputes makes the run `fail` whatever else happened to other units, since a unit that could not
    be judged must never hide a finding (exit 1, not 3); only a signal that stopped the run goes above.

    A `str` enum: it equals, hashes, formats and serialises as its word ("pass"), so reports,
    dict keys and messages need no conversions.
    """

    PASS = "pass"
    FAIL = "fail"  # SDC suspected: the only verdict that exits 1
    INVALID = "invalid"  # could not judge: crashed, hung, ran too little
    INTERRUPTED = "interrupted"  # stopped by a signal before the budget ended

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def severity(self) -> int:
        """pass < invalid < fail < interrupted."""
        return _SEVERITY[self]

    @property
    def exit_code(self) -> int:
        return _EXIT_CODES[self]

    @classmethod
    def worst(cls, verdicts: Iterable[Verdict | str], default: Verdict | None = None) -> Verdict:
        """The most severe of `verdicts` (words are accepted); `default` (else INVALID) when there are none."""
        found = [cls(v) for v in verdicts]
        if not found:
            return default or cls.INVALID
        return max(found, key=lambda v: v.severity)


_SEVERITY = {Verdict.PASS: 0, Verdict.INVALID: 1, Verdict.FAIL: 2, Verdict.INTERRUPTED: 3}
_EXIT_CODES = {
    Verdict.PASS: EXIT_PASS,
    Verdict.FAIL: EXIT_FAIL,
    Verdict.INVALID: EXIT_INVALID,
    Verdict.INTERRUPTED: EXIT_INTERRUPTED,
}
VERDICTS = tuple(v.value for v in Verdict)  # the words, in order of severity


@dataclass(frozen=True, slots=True)
class Case:
    """One deterministic unit of work. Two units that ran case `index` ran the same computation."""

    index: int
    workload: str
    seed: int
    occurrence: int  # how many cases of this workload came before it in the plan
    params: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One element (or scalar) that a check found wrong."""

    check: str  # which check fired, e.g. "golden", "finite"
    where: str  # human-readable location, e.g. "fp32 out[3, 17]" or "step 12 loss"
    expected: str
    actual: str
    mask: str | None = None  # XOR of expected and actual bits, hex, for bitwise compares

    def to_dict(self) -> dict[str, str | None]:
        return {
            "check": self.check,
            "where": self.where,
            "expected": self.expected,
            "actual": self.actual,
            "mask": self.mask,
        }


@dataclass(slots=True)
class Outcome:
    """What a case produced on a unit. The worker fills in `seconds` and `injected`."""

    status: StatusWord
    digest: str | None
    mismatches: list[Mismatch] = field(default_factory=list)
    ops: float = 0.0  # useful work done, in `ops_unit`
    ops_unit: str = "flop"
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase (compute, check, setup)
    seconds: float = 0.0
    error: str | None = None
    injected: dict[str, object] | None = None  # what the armed fault changed (faults.corrupt_)
    detail: dict[str, object] = field(default_factory=dict)  # workload-specific facts, e.g. dtype


class OutcomeRecord(TypedDict):
    """An `Outcome` as plain data: what the worker sends the parent, and the journal records
    inside each case record (beside the unit, index, attempt and workload)."""

    status: StatusWord
    digest: str | None
    mismatches: list[dict[str, str | None]]  # Mismatch.to_dict() each
    ops: float
    ops_unit: str
    phases: dict[str, float]
    seconds: float
    error: str | None
    injected: dict[str, object] | None
    detail: dict[str, object]


class CaseOutcome(OutcomeRecord):
    """One case's outcome on one unit as the runner journals it and the judgement reads it."""

    type: Literal["case"]
    unit: str
    index: int
    attempt: int  # 0: the main pass; re-runs count from 1
    workload: str


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One case of one unit as the judgement reads it: the parent's record of a main-pass case, and a
    report's case columns read back as rows (`report.case_records`)."""

    unit: str
    index: int
    workload: str
    status: StatusWord
    digest: str | None
    seconds: float = 0.0
    error: str | None = None  # the exception summary when status is error

    @classmethod
    def of(cls, record: CaseOutcome) -> CaseResult:
        """The result of a journalled case (a journal rebuilt from disk may lack the optional fields)."""
        return cls(
            record["unit"],
            record["index"],
            record["workload"],
            record["status"],
            record.get("digest"),
            record.get("seconds") or 0.0,
            record.get("error"),
        )


# Text and order shared by every reader of units and files (torch-free, like the rest of this module).


def printable(text: str) -> str:
    """`text` with every character a terminal acts on written as an escape (`\\x1b`, `\\u202e`, `\\n`).

    Control characters (ANSI escape sequences, bell, carriage return, newline), C1 controls,
    bidirectional overrides and unpaired surrogates from a file must not reach a terminal or a log raw:
    they could rewrite what the operator sees, e.g. forge a last line `exit: pass`.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def unit_order(unit: str) -> tuple[int, str, int, str]:
    """cpu:2 before cpu:10: units sort by kind, then by number; names that are not `kind:N` (a GPU the
    kernel log names by PCI id, a row of another tool in the history) after their kind's, by name.
    A distributed run's `rank{R}/kind:N` sorts by rank number first (rank2/ before rank10/)."""
    prefix, slash, rest = unit.partition("/")
    rank = prefix[4:]
    if slash and prefix.startswith("rank") and rank.isdigit() and len(rank) < 10:
        return (int(rank), *_plain_unit_order(rest))
    return (-1, *_plain_unit_order(unit))


def _plain_unit_order(unit: str) -> tuple[str, int, str]:
    kind, _, index = unit.partition(":")
    return (kind, int(index), "") if index.isdigit() and len(index) < 10 else (kind, 1 << 40, index)
