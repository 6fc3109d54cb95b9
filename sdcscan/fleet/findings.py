"""The findings of a fleet comparison, and the collector that keeps one per (host, unit, kind)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sdcscan.fleet.model import HostReport

KINDS = (
    "divergent",
    "invariant",
    "slow",
    "undecided",
    "invalid",
    "calibration",  # gemm_fp's e_max differs from the cohort's other hosts: its checks are not like theirs
    "sentinel",  # kernel logs: far more programs crash on this core than on its peers (`fleet.sentinel`)
    "collision",  # one hostname, several machines: kept apart, nothing fails
    "stale",
    "missing",
    "future",
    "unlisted",
    "alias",
)  # most severe first


@dataclass(frozen=True, slots=True)
class FleetFinding:
    """One record per (host, unit, kind); `unit` is None for host-level findings."""

    host: str
    unit: str | None
    kind: str
    # Read by kind (`render.fleet.describe`, `launch.cluster_report`), each kind with keys of its own
    # that no declaration names yet: Any until the evidence of each kind is a TypedDict.
    evidence: dict[str, Any]

    def to_dict(self) -> dict[str, object]:
        """The JSON form: host, unit, kind, evidence."""
        return {"host": self.host, "unit": self.unit, "kind": self.kind, "evidence": self.evidence}


class Collector:
    """Gathers findings; several reports of one (host, unit, kind) merge into the newest one's evidence.

    A report's host is its `HostReport.key`: machines that share a hostname stay apart.
    """

    def __init__(self) -> None:
        # (host, unit, kind) -> (rank of the newest report: (ended_at, run id, tiebreak), or () for a
        # finding no report carries; its evidence; how many reports found it)
        self._best: dict[
            tuple[str, str | None, str], tuple[tuple[float, str, float] | tuple[()], dict[str, object], int]
        ] = {}

    def add(
        self,
        report: HostReport,
        unit: str | None,
        kind: str,
        evidence: Mapping[str, object],
        tiebreak: float = 0.0,
    ) -> None:
        """Record one finding from one report (`tiebreak` orders findings of the same report)."""
        key = (report.key, unit, kind)
        rank = (report.ended_at, report.run_id, tiebreak)
        prior = self._best.get(key)
        full = {"run": report.run_id, **evidence}
        if (
            unit is not None and report.profile and "/" not in unit
        ):  # what to run on that host to see it again
            full["rerun"] = (
                f"sdcscan run --profile {report.profile} --seed {report.plan[1]} --units {unit} --budget 15m"
            )
        if prior is None:
            self._best[key] = (rank, full, 1)
        elif rank > prior[0]:
            self._best[key] = (rank, full, prior[2] + 1)
        else:
            self._best[key] = (prior[0], prior[1], prior[2] + 1)

    def add_host(self, host: str, unit: str | None, kind: str, evidence: Mapping[str, object]) -> None:
        """Record a finding that no report carries (coverage)."""
        self._best[(host, unit, kind)] = ((), dict(evidence), 0)

    def findings(self) -> tuple[FleetFinding, ...]:
        """All findings, by kind (most severe first), host, unit."""
        out = []
        for (host, unit, kind), (_, evidence, n) in self._best.items():
            out.append(FleetFinding(host, unit, kind, {**evidence, "reports": n} if n else evidence))
        out.sort(key=lambda f: (KINDS.index(f.kind), f.host, f.unit or ""))
        return tuple(out)
