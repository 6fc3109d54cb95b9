"""A doctor step's result, and the exit code the steps add up to. Pure: no I/O, no clock.

A step is `ok`, or it has findings (a unit miscomputed outside the injections: exit 1), or reasons
sdcscan cannot be trusted on this stack (exit 3): a detector floor missed, a false positive, a workload
that does not reproduce, an injection not named, a run past its bound, a step that did not fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sdcscan.errors import EXIT_FAIL, EXIT_INVALID, EXIT_PASS

STEP_NAMES = ("environment", "detectors", "determinism", "injection", "speed")

OK, FINDING, UNTRUSTED, SKIPPED, INTERRUPTED = "ok", "finding", "untrusted", "skipped", "interrupted"


@dataclass
class Step:
    """One step of the doctor: what it found, why it cannot vouch for sdcscan, what it measured."""

    name: str
    seconds: float = 0.0
    findings: list[str] = field(default_factory=list)  # units that miscomputed outside the injections
    reasons: list[str] = field(default_factory=list)  # why sdcscan cannot be trusted here
    skipped: list[str] = field(default_factory=list)  # what did not fit in the budget
    interrupted: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        if self.interrupted:
            return INTERRUPTED
        if self.findings:
            return FINDING
        if self.reasons:
            return UNTRUSTED
        return SKIPPED if self.skipped else OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "seconds": round(self.seconds, 1),
            "findings": self.findings,
            "reasons": self.reasons,
            "skipped": self.skipped,
            "details": self.details,
        }


def exit_code(steps: list[Step]) -> int:
    """1 when a unit miscomputed outside the injections (a real finding is never hidden), else 3 when
    any step cannot vouch for sdcscan (untrusted, or part of it skipped), else 0.

    An interrupted doctor exits 130/143: its caller decides that, from the signal.
    """
    if any(s.findings for s in steps):
        return EXIT_FAIL
    if any(s.reasons or s.skipped for s in steps):
        return EXIT_INVALID
    return EXIT_PASS


VERDICT_WORDS = {EXIT_PASS: "pass", EXIT_FAIL: "fail", EXIT_INVALID: "untrusted"}
