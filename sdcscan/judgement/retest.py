"""The repeat evidence: how a failing case behaves when re-run on its unit and on a peer. Pure, table-driven.

`transient`: it does not fail again on the unit (a one-off corruption; still a hardware event).
`persistent`: it fails again on the unit and not on the peer (the error follows the unit).
`case`: it fails on the peer too (a software or determinism problem: the unit is not blamed).
`untested`: no re-run could be done (re-runs off, the per-unit cap, the time window, or the unit stopped).
The sentences about them are written by `sdcscan.judgement.wording`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sdcscan.report.document import RetestCase, RetestClass, RetestEvidence

TRANSIENT: Final = "transient"
PERSISTENT: Final = "persistent"
CASE: Final = "case"
UNTESTED: Final = "untested"
# Most telling first: a unit's summary is the first of these among its cases.
CLASSIFICATIONS: tuple[RetestClass, ...] = (PERSISTENT, TRANSIENT, CASE, UNTESTED)


@dataclass(frozen=True, slots=True)
class Retest:
    """How one failing case of a unit behaved when re-run."""

    unit: str
    index: int
    workload: str
    evidence: RetestEvidence  # what made the case fail in the first place
    classification: RetestClass
    reruns: int  # re-runs on the unit
    reproduced: int  # ... of which failed again
    peers: tuple[str, ...] = ()  # peer units that re-ran the case
    peer_failures: int = 0  # ... re-runs there that failed too

    def to_dict(self) -> RetestCase:
        return {
            "index": self.index,
            "workload": self.workload,
            "evidence": self.evidence,
            "classification": self.classification,
            "reruns": self.reruns,
            "reproduced": self.reproduced,
            "peers": list(self.peers),
            "peer_failures": self.peer_failures,
        }


def classify(reruns_bad: Sequence[bool], peers_bad: Sequence[bool]) -> RetestClass:
    """Classify one failing case of one unit from its re-runs.

    Args:
        reruns_bad: for each re-run on the failing unit, whether it failed again.
        peers_bad: for each re-run on a peer unit of the same cohort, whether it failed there too.
    Returns:
        `case` when it failed on a peer too (the test or the software stack, not this unit);
        otherwise `untested` without re-runs on the unit, `persistent` when it failed again on the
        unit (in any re-run: an intermittent fault that follows the unit is still the unit's),
        and `transient` when it never did.
    """
    if any(peers_bad):
        return CASE
    if not reruns_bad:
        return UNTESTED
    return PERSISTENT if any(reruns_bad) else TRANSIENT


def unit_classification(records: Sequence[Retest]) -> RetestClass | None:
    """A unit's summary: the most telling classification among its failing cases, None without any."""
    present = {r.classification for r in records}
    return next((c for c in CLASSIFICATIONS if c in present), None)
