"""Keep the ranks' workers in step for distributed cases, and exchange case digests while they run.

Every rank runs the same plan, but each at its own pace. Before a case of a distributed workload
(`WorkloadSpec.distributed`), the worker agrees with its peers (`world.agree`): the case runs only
if every rank will run it before the budget ends, so no rank enters a collective its peers never
join. A rank that reaches the end of its budget says so once (`leave`) at the next agreement; from
then on every rank skips distributed cases and finishes its own.

The same agreement asks for a digest exchange once `exchange_every_s` has passed on any rank: the
ranks all-gather the digests of the per-unit cases they finished since the last exchange, and any
case whose digests differ within a cohort is noted (live). The cluster report names the divergent
unit afterwards, with `compare`'s rule (one vote per host).

A collective that fails because a peer died or stopped answering stops distributed cases on this
rank without blaming its unit (`lost_peer`); one that fails while every rank still answers is this
unit's error.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any, Protocol

import torch

from sdcscan.collectives import world as wire
from sdcscan.collectives.env import RankSetup
from sdcscan.outcomes import STATUS_OK, Outcome

MAX_DISAGREEMENTS = 50  # kept in the summary; the count goes on


class _Joins(Protocol):
    """What `join` hands the world to: a distributed workload's context (`workloads.base.Context`)."""

    world: wire.World | None


class Lockstep:
    def __init__(
        self,
        world: wire.World,
        distributed: set[str],
        cohort: str,
        every_s: float,
        skipped: AbstractSet[str] = frozenset(),
    ) -> None:
        self.world = world
        self.distributed = distributed
        self.skipped = set(skipped)  # distributed workloads this world cannot judge: never run
        self.cohort = cohort
        self.every_s = every_s
        self.stopped = False
        self.last_exchange = time.monotonic()
        self.mine: list[tuple[int, str, str]] = []  # (index, workload, digest) since the last exchange
        self.pending: dict[tuple[str, int], dict[int, str]] = {}  # (cohort, index) -> rank -> digest
        self.compared = 0
        self.disagreements: list[dict[str, object]] = []
        self.disagreeing = 0
        self.bandwidth = Bandwidth()

    @classmethod
    def join(
        cls,
        setup: RankSetup,
        device: torch.device,
        contexts: Mapping[str, _Joins],
        distributed: set[str],
        cohort_fields: Mapping[str, object],
        plan: str,
        comparing: set[str],
    ) -> Lockstep:
        """Join the world and hand it to the contexts of the `distributed` workloads (names).

        `comparing`: the distributed workloads that compare float results across ranks. They run
        only when every rank is of one cohort; on ranks of different CPUs, ISAs or software, results
        may differ legitimately, and a difference would be blamed on a rank (see `notes`).
        """
        cohort = json.dumps(cohort_fields, sort_keys=True, default=str)
        world = wire.join(
            setup.env,
            device=device,
            hostname=setup.hostname,
            faults=setup.faults,
            timeout_s=setup.timeout_s,
            join_timeout_s=setup.join_timeout_s,
            plan=plan,
            cohort=cohort,
        )
        for name in distributed:
            contexts[name].world = world
        skipped = set() if world.one_cohort else comparing & distributed
        return cls(world, distributed, cohort, setup.exchange_every_s, skipped)

    @property
    def notes(self) -> list[str]:
        """What the unit's report should say about this world."""
        return [
            f"{name}: not run: the ranks are not one cohort (device model, software or ISA differ), so "
            "their float results may differ legitimately and could not be compared"
            for name in sorted(self.skipped)
        ]

    def may_run(self, workload: str, latest_start: float) -> bool:
        """Whether this rank runs the next case of `workload` (always, for a per-unit workload).

        For a distributed one, every rank must agree; `latest_start` is when this rank would still
        finish the case within its budget.
        """
        if workload not in self.distributed:
            return True
        if self.stopped or workload in self.skipped:  # the same on every rank: no agreement needed
            return False
        due = time.monotonic() - self.last_exchange >= self.every_s
        try:
            go, exchange_now = wire.agree(self.world, go=time.time() <= latest_start, exchange=due)
            if go and exchange_now:
                self._exchange()
        except wire.WorldBroken:
            self.stopped = True
            return False
        self.stopped = not go
        return go

    def leave(self) -> None:
        """Say once, at the peers' next agreement, that this rank runs no more distributed cases."""
        if self.stopped or not self.distributed:
            return
        self.stopped = True
        with contextlib.suppress(wire.WorldBroken):  # the world is gone already: nothing to tell
            wire.agree(self.world, go=False, exchange=False)

    def lost_peer(self, workload: str, err: BaseException) -> bool:
        """A distributed case raised: True when a peer is gone (its case is withdrawn, distributed
        cases stop); False when every rank still answers (the error is this unit's)."""
        if workload not in self.distributed:
            return False
        self.stopped = True
        if self.world.broken is None:
            wire.broken(self.world, f"{workload} failed: {type(err).__name__}: {str(err)[:200]}")
        return self.world.lost

    def record(self, index: int, workload: str, outcome: Outcome) -> None:
        """Keep a finished per-unit case's digest for the next exchange, and a collective's bandwidth."""
        if workload not in self.distributed and outcome.status == STATUS_OK and outcome.digest:
            self.mine.append((index, workload, outcome.digest))
        if outcome.detail.get("busbw_gbps") and outcome.detail.get("algbw_gbps"):
            self.bandwidth.add(outcome.detail)

    def _exchange(self) -> None:
        mine, self.mine = self.mine, []
        gathered = wire.exchange(self.world, {"cohort": self.cohort, "digests": mine})
        self.last_exchange = time.monotonic()
        for rank, part in enumerate(gathered):
            for index, workload, digest in part["digests"]:
                self.pending.setdefault((part["cohort"], index), {})[rank] = digest
                self.pending[(part["cohort"], index)].setdefault(-1, workload)
        self._compare({part["cohort"] for part in gathered}, gathered)

    def _compare(self, cohorts: set[str], gathered: list[Any]) -> None:
        """Compare each case once every rank of its cohort has a digest for it; note any that differ."""
        members = {c: {r for r, part in enumerate(gathered) if part["cohort"] == c} for c in cohorts}
        for key in [k for k in self.pending if set(self.pending[k]) - {-1} >= members.get(k[0], set())]:
            digests = self.pending.pop(key)
            workload = digests.pop(-1)
            self.compared += 1
            if len(set(digests.values())) > 1:
                self.disagreeing += 1
                if len(self.disagreements) < MAX_DISAGREEMENTS:
                    self.disagreements.append({"index": key[1], "workload": workload, "digests": digests})

    def summary(self) -> dict[str, object]:
        """What this rank's report says of the world (`run.distributed`)."""
        w = self.world
        return {
            "rank": w.rank,
            "world_size": w.size,
            "hosts": list(w.hosts),
            "backend": w.backend,
            "agreements": w.agreements,
            "agree_s": round(w.agree_s, 6),  # mostly waiting for the slowest rank: the price of lockstep
            "exchanges": w.exchanges,
            "exchange_s": round(w.exchange_s, 6),  # the digest exchange itself
            "cases_compared": self.compared,
            "cases_disagreeing": self.disagreeing,
            "disagreements": self.disagreements,
            "bandwidth": self.bandwidth.table(),
            "broken": w.broken,
            "missing": list(w.missing),
        }


class Bandwidth:
    """Achieved bandwidth per (collective, dtype, size), over every case this rank ran (nccl-tests'
    algbw and busbw: total bytes over total time, so long cases weigh more than short ones)."""

    def __init__(self) -> None:
        self.rows: dict[
            tuple[str, str, int], list[float]
        ] = {}  # -> [cases, bytes, seconds, bus factor, best]

    def add(self, detail: Mapping[str, Any]) -> None:
        key = (str(detail["collective"]), str(detail["dtype"]), int(detail["bytes"]))
        algbw, busbw = float(detail["algbw_gbps"]), float(detail["busbw_gbps"])
        row = self.rows.setdefault(key, [0, 0.0, 0.0, busbw / algbw, 0.0])
        row[0] += 1
        row[1] += key[2]
        row[2] += key[2] / (algbw * 1e9)
        row[4] = max(row[4], busbw)

    def table(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for (collective, dtype, nbytes), (cases, total, seconds, factor, best) in sorted(self.rows.items()):
            algbw = total / seconds / 1e9
            out.append(
                {
                    "collective": collective,
                    "dtype": dtype,
                    "bytes": nbytes,
                    "cases": int(cases),
                    "algbw_gbps": round(algbw, 4),
                    "busbw_gbps": round(algbw * factor, 4),
                    "best_busbw_gbps": round(best, 4),
                }
            )
        return out
