"""A worker of a distributed run keeps the agreement it made with its peers.

Found by CI on a world of four ranks: rank 0 agreed to run a train_dp case, but waiting for the
agreement had taken it past its latest start, so it left the world instead (a second agreement)
while its peers were already in the case's gradient all_reduce. gloo met a 16-byte vote with a
6,568-byte gradient and aborted rank 0's worker ("Received data size doesn't match expected size").

The worker's loop is driven here with a fake clock and a fake lockstep, so the race is exact.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sdcscan.run import worker


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now


class FakeLockstep:
    """Every rank agrees to run each distributed case; the agreement takes `wait_s` of waiting."""

    def __init__(self, clock: FakeClock, wait_s: float, agree: bool = True) -> None:
        self.clock, self.wait_s, self.agree = clock, wait_s, agree
        self.distributed = {"train_dp"}
        self.events: list[str] = []

    def may_run(self, workload: str, latest_start: float) -> bool:
        if workload not in self.distributed:
            return True
        self.clock.now += self.wait_s  # waiting at the agreement for the slowest peer
        self.events.append(f"agreed {workload}" if self.agree else f"declined {workload}")
        return self.agree

    def leave(self) -> None:
        self.events.append("left")

    def summary(self) -> dict[str, object]:
        return {}


def _engine(
    monkeypatch: Any, lockstep: FakeLockstep, order: list[str], mean_s: dict[str, float], deadline_in: float
):
    clock = lockstep.clock
    monkeypatch.setattr(worker, "time", SimpleNamespace(time=clock.time))
    engine = worker._Engine.__new__(worker._Engine)
    engine.plan = SimpleNamespace(workload_of=lambda i: order[i % len(order)])
    engine.workloads = dict.fromkeys(order)
    engine.mean_s = dict(mean_s)
    engine.lockstep = lockstep
    engine.gate = None
    # A distributed rank: `sdcscan run` refuses --cases with --distributed.
    engine.cfg = SimpleNamespace(unit=SimpleNamespace(id="cpu:0"), cases=None)
    engine.stopped = False
    engine.conn = SimpleNamespace(poll=lambda: False, send=lambda msg: None)
    ran: list[tuple[int, str]] = []

    def run_case(index: int, attempt: int) -> float:
        ran.append((index, order[index % len(order)]))
        lockstep.events.append(f"ran {order[index % len(order)]}")
        clock.now += engine.mean_s.get(order[index % len(order)], 1.0)
        return engine.mean_s.get(order[index % len(order)], 1.0)

    engine.run_case = run_case
    return engine, clock.now + deadline_in, ran


def test_a_case_every_rank_agreed_to_runs_even_when_the_wait_passed_the_latest_start(monkeypatch):
    clock = FakeClock()
    lockstep = FakeLockstep(clock, wait_s=3.0)
    # train_dp takes 10 s; the deadline is 12 s away: the vote says go (12 - 10 >= 0), but after a
    # 3 s wait for the peers, 3 + 10 > 12.
    engine, deadline, ran = _engine(monkeypatch, lockstep, ["train_dp", "train"], {"train_dp": 10.0}, 12.0)
    assert engine.run_plan(deadline) == "done"
    assert lockstep.events[:2] == ["agreed train_dp", "ran train_dp"]
    assert ran[0] == (0, "train_dp")


def test_a_per_unit_case_past_the_deadline_still_ends_the_plan_and_tells_the_peers(monkeypatch):
    clock = FakeClock()
    lockstep = FakeLockstep(clock, wait_s=0.0)
    engine, deadline, ran = _engine(monkeypatch, lockstep, ["train", "train_dp"], {"train": 5.0}, 4.0)
    assert engine.run_plan(deadline) == "done"
    assert ran == []
    assert lockstep.events == ["left"]


def test_a_declined_distributed_case_is_skipped_not_run(monkeypatch):
    clock = FakeClock()
    lockstep = FakeLockstep(clock, wait_s=0.0, agree=False)
    engine, deadline, ran = _engine(monkeypatch, lockstep, ["train_dp", "train"], {"train": 1.0}, 2.5)
    assert engine.run_plan(deadline) == "done"
    assert all(workload == "train" for _, workload in ran) and ran
