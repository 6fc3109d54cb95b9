"""Reductive triage: the smallest set of nodes that still reproduces a failure nobody could blame.

Meta's post on silent data corruption at scale calls it "reductive triage": re-run the failing
work on progressively smaller parts of the cluster, by binary search, until a small set reproduces
it and can be taken out. It also warns that SDCs do not always reproduce (data, power,
temperature), so a trial that passes is weak evidence; `attempts` repeats it. This module plans
the search and records every trial as evidence; the caller's `reproduces(nodes)` runs the case on
a subgroup (torch.distributed `new_group`) and answers True, False or None (could not run, timed
out). Pure: no clock, no I/O, no randomness of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from sdcscan.errors import UsageError

# Why the search stopped (Triage.stop).
STOP_ISOLATED = "isolated"  # no smaller set tried reproduces: the suspects are as small as it gets
STOP_MIN_SIZE = "min_size"  # any smaller set would have too few ranks for the collective
STOP_BUDGET = "budget"  # the trial budget ran out first
STOP_NO_RESULT = "no_result"  # a trial could not run, so nothing after it would be sound
STOP_NOT_REPRODUCED = "not_reproduced"  # the whole world did not reproduce the failure


@dataclass(frozen=True, slots=True)
class Node:
    """One host of the world and the ranks it runs."""

    name: str
    ranks: tuple[int, ...]


Reproduces: TypeAlias = Callable[[tuple[Node, ...]], "bool | None"]


@dataclass(frozen=True, slots=True)
class Trial:
    """One run of the failing case on a subset of the nodes."""

    nodes: tuple[str, ...]
    result: bool | None  # True: reproduced; False: did not; None: could not run


@dataclass(frozen=True, slots=True)
class Triage:
    """Where the search ended, and the trials that are its evidence."""

    suspects: tuple[str, ...]  # the smallest set seen to reproduce; () when none was
    stop: str  # one of STOP_*
    trials: tuple[Trial, ...]
    # When neither half alone reproduced but both together did: the two sides, as far as they were
    # narrowed. A link between them, or a fault that did not reproduce on every trial.
    sides: tuple[tuple[str, ...], tuple[str, ...]] | None = None

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        n = f"{len(self.trials)} trial{'' if len(self.trials) == 1 else 's'}"
        if self.stop == STOP_NOT_REPRODUCED:
            return f"the failure did not reproduce on the whole world ({n}): it may be transient; nothing narrowed"
        if not self.suspects:
            return f"the first trial, on the whole world, could not run ({n}): nothing narrowed"
        what = _what(self.suspects, self.sides)
        if self.stop == STOP_ISOLATED:
            return f"{what}, and no smaller set tried does ({n})"
        if self.stop == STOP_MIN_SIZE:
            return f"{what}; a smaller set would have too few ranks for the collective ({n})"
        if self.stop == STOP_BUDGET:
            return f"{what}; the trial budget ran out before anything smaller was settled ({n})"
        last = ", ".join(self.trials[-1].nodes)
        return f"{what}; a trial on {last} could not run, so the search stopped there ({n})"


def _what(suspects: tuple[str, ...], sides: tuple[tuple[str, ...], tuple[str, ...]] | None) -> str:
    """The suspects in a sentence."""
    if sides is not None:
        return (
            f"the failure needs nodes from both sides: {', '.join(sides[0])} together with {', '.join(sides[1])}"
            " reproduce it, neither side alone did (a link between them, or a fault that does not reproduce"
            " on every trial: raise attempts to tell)"
        )
    if len(suspects) == 1:
        return f"node {suspects[0]} alone reproduces the failure"
    return f"nodes {', '.join(suspects)} reproduce the failure together"


class _Stopped(Exception):
    """Ends the search early: the budget ran out or a trial could not run."""

    def __init__(self, stop: str) -> None:
        super().__init__(stop)
        self.stop = stop


class _Search:
    """The search's state: the trials so far and the smallest set seen to reproduce."""

    def __init__(
        self, world: tuple[Node, ...], reproduces: Reproduces, *, budget: int, min_size: int, attempts: int
    ):
        self.world_order = {node.name: i for i, node in enumerate(world)}
        self.run = reproduces
        self.budget, self.min_size, self.attempts = budget, min_size, attempts
        self.trials: list[Trial] = []
        self.best: tuple[Node, ...] = ()
        self.sides: tuple[tuple[Node, ...], tuple[Node, ...]] | None = None

    def fits(self, nodes: tuple[Node, ...]) -> bool:
        return sum(len(node.ranks) for node in nodes) >= self.min_size

    def union(self, a: tuple[Node, ...], b: tuple[Node, ...]) -> tuple[Node, ...]:
        return tuple(sorted(a + b, key=lambda node: self.world_order[node.name]))

    def reproduces(self, nodes: tuple[Node, ...]) -> bool:
        """Try `nodes` up to `attempts` times: one reproduction is enough, a pass needs them all."""
        for _ in range(self.attempts):
            if len(self.trials) >= self.budget:
                raise _Stopped(STOP_BUDGET)
            result = self.run(nodes)
            self.trials.append(Trial(tuple(node.name for node in nodes), result))
            if result is None:
                raise _Stopped(STOP_NO_RESULT)
            if result:
                # Every set tried lies inside the best one so far, so a reproduction is the new best.
                self.best = nodes
                return True
        return False


def _narrow(search: _Search, nodes: tuple[Node, ...]) -> str:
    """Halve `nodes` (known to reproduce) while a half reproduces; the stop reason."""
    while len(nodes) > 1:
        half = len(nodes) // 2
        first, second = nodes[:half], nodes[half:]
        if search.fits(first) and search.fits(second):
            if search.reproduces(first):
                nodes = first
            elif search.reproduces(second):
                nodes = second
            else:
                return _across(search, first, second)
            continue
        # A half would have too few ranks: leave out one node at a time instead.
        smaller = [nodes[:i] + nodes[i + 1 :] for i in range(len(nodes))]
        smaller = [s for s in smaller if search.fits(s)]
        if not smaller:
            return STOP_MIN_SIZE
        found = next((s for s in smaller if search.reproduces(s)), None)
        if found is None:
            return STOP_ISOLATED
        nodes = found
    return STOP_ISOLATED


def _across(search: _Search, first: tuple[Node, ...], second: tuple[Node, ...]) -> str:
    """Neither half alone reproduces, both together do: narrow each side with the other kept whole."""
    search.sides = (first, second)
    first = _shrink(search, first, second, keep_first=True)
    _shrink(search, second, first, keep_first=False)
    return STOP_ISOLATED


def _shrink(
    search: _Search, side: tuple[Node, ...], fixed: tuple[Node, ...], *, keep_first: bool
) -> tuple[Node, ...]:
    """Halve `side` while one half of it still reproduces together with `fixed`."""
    while len(side) > 1:
        half = len(side) // 2
        for part in (side[:half], side[half:]):
            together = search.union(part, fixed)
            if search.fits(together) and search.reproduces(together):
                side = part
                search.sides = (side, fixed) if keep_first else (fixed, side)
                break
        else:
            return side
    return side


def _checked(nodes: Sequence[Node], budget: int, min_size: int, attempts: int) -> tuple[Node, ...]:
    """The world as a tuple, or a UsageError naming what is wrong with the arguments."""
    world = tuple(nodes)
    names = [node.name for node in world]
    ranks = [r for node in world for r in node.ranks]
    if not world or len(set(names)) != len(names) or not all(node.ranks for node in world):
        raise UsageError(f"triage needs distinct nodes, each with ranks, got {names!r}")
    if len(set(ranks)) != len(ranks):
        raise UsageError("triage needs each rank on one node only")
    if budget < 1 or attempts < 1 or min_size < 1:
        raise UsageError(
            f"budget, attempts and min_size must be at least 1, got {budget}, {attempts}, {min_size}"
        )
    if len(ranks) < min_size:
        raise UsageError(f"the world has {len(ranks)} ranks, fewer than min_size={min_size}")
    return world


def reductive_triage(
    nodes: Sequence[Node],
    reproduces: Reproduces,
    *,
    budget: int,
    min_size: int = 2,
    attempts: int = 1,
    known_to_reproduce: bool = False,
) -> Triage:
    """Find the smallest set of nodes that still reproduces a failure, by recursive halving.

    Try each half of the set; recurse into the first that reproduces. If neither does but the
    whole did, the fault needs nodes of both halves (a link between them): narrow each side with
    the other kept whole, ending at a pair or a small set. When a half would have fewer than
    `min_size` ranks, sets with one node left out are tried instead.

    Args:
        nodes: The world's hosts in a fixed order (halves keep it), each with its ranks.
        reproduces: Runs the failing case on a subset of the nodes: True if it failed again, False
            if it passed, None if it could not run or timed out (the search stops there).
        budget: At most this many calls of `reproduces`, the whole world's included.
        min_size: The fewest ranks a subset may have (a collective needs peers).
        attempts: Calls before a subset counts as not reproducing; more than 1 for faults that do
            not reproduce every time (a single reproduction counts at once).
        known_to_reproduce: The whole world already reproduced it (the failing run itself): skip
            the first trial.

    Returns:
        The suspects (the smallest set seen to reproduce), why the search stopped, every trial.

    Raises:
        UsageError: No nodes, repeated names or ranks, a node without ranks, a budget, attempts or
            min_size below 1, or fewer ranks in the world than min_size.
    """
    world = _checked(nodes, budget, min_size, attempts)
    search = _Search(world, reproduces, budget=budget, min_size=min_size, attempts=attempts)
    try:
        if known_to_reproduce:
            search.best = world
        elif not search.reproduces(world):
            return Triage(suspects=(), stop=STOP_NOT_REPRODUCED, trials=tuple(search.trials))
        stop = _narrow(search, world)
    except _Stopped as stopped:
        stop = stopped.stop
    sides = tuple(tuple(node.name for node in side) for side in search.sides) if search.sides else None
    return Triage(
        suspects=tuple(node.name for node in search.best),
        stop=stop,
        trials=tuple(search.trials),
        sides=(sides[0], sides[1]) if sides else None,
    )
