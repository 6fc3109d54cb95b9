"""What the doctor runs: its units, how its budget is shared, and each child's command line. Pure.

The budget is shared as the doctor goes (`Allotter`): each item is first sure of its floor, the least
that shows something, and gets its weight's share of the time actually left beyond the floors of
every item still to come; so a child that ran long is paid for by the spare time of the items after
it, not by their floors, and the doctor ends near its budget whatever this host's speed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sdcscan.errors import UsageError
from sdcscan.profile import Profile
from sdcscan.run.plan import cases_per_round
from sdcscan.units import Unit, select_units

DEFAULT_BUDGET_S = 300.0
# With a GPU among the units: a GPU unit took 37-46 s to start under the doctor profile before issue 42
# (twice on an H200, once on an H100), so a 5-minute doctor's 50 s determinism runs left it a few seconds
# of cases, or none. Since issue 42 one started in 13.6 s on an H200, and a doctor of 362 s passed there
# (README "On a GPU"). 8 minutes stay the default until more GPUs have passed with less.
GPU_START_SEEN = "14 s on an H200 (37-46 s before its pools were drawn on the device)"
DEFAULT_GPU_BUDGET_S = 480.0
MIN_BUDGET_S = 80.0  # below this the drill runs would be mostly start-up and show nothing
SEED = 20261127  # one fixed plan: two doctors on two hosts ran the same cases
PROFILE = "doctor"  # every per-unit workload (profiles/doctor.yaml)
DRILL_PROFILE = "quick"  # the injection drill: fast to start, cases short enough to strike often
INJECTIONS = ("bitflip", "nan", "hang", "crash")
# Every drill strikes every case, so its outcome does not hang on how many cases a slow host finishes:
# at rate 0.5 the doctor's seed first struck cpu:0's NaN drill at its sixth case, and a loaded CI host
# ended that 9 s run after fewer (exit 0, doctor untrusted). A hang or a crash in the first case also
# lets the watchdog, not chance, decide how long those drills take. That intermittent faults are
# caught, the re-run schedule's own tests show, where the host does not decide how long a run is.

# The determinism runs run these rounds of the plan on every unit (`sdcscan run --cases`), not as many
# as their time holds: on a loaded CI host two runs of about 15 s (30.6 s together) had only train's case
# in common, start-up taking most of each, so no other workload ran in both (doctor untrusted). A fixed
# count compares every workload however slow the host; a fast host ends early and leaves the rest of its
# share to the drills. The first round also carries each workload's first-case warm-up; three more
# dilute it in the speed table.
DETERMINISM_ROUNDS = 4
# With a GPU among the units, more: its speed table shows NVML samples (one a second) over case time, and
# four rounds of GPU cases (0.1-0.4 s each by the doctor profile's projections) would give it a few
# samples, warm-up included. Forty rounds are about as long as the 60 s runs the H200 passed with; the
# budget still bounds them, so a short --budget cuts them, not the drills' floors.
DETERMINISM_ROUNDS_GPU = 40

RESERVE_S = 2.0  # kept for judging, the summary and the bundles at the end (under 0.1 s on a 2-vCPU Xeon)
RUN_START_S = 1.0  # a run's budget counts from its own start: leave its interpreter's exit this long
SELFTEST_START_S = 3.0  # importing torch and preparing each variant, outside the selftest's budget
UNITS_PER_KIND = 2  # one to strike and a peer that must pass; two also make a cohort to compare

# Floors: below these an item shows nothing, and is skipped with the reason.
MIN_SELFTEST_S = 8.0
# The doctor profile's start-up (7.3 s on a 2-vCPU Xeon, `scripts/bench_startup.py --profile doctor`;
# 9.8-12.2 s seen on a slow CI host) and one case of each workload on both units.
MIN_DETERMINISM_RUN_S = 12.0
# quick's start-up (1.4 s on that Xeon) and a few cases: the bitflip, NaN and crash drills named the
# struck unit with `--budget 5s` there. A hang is seen only after the watchdog's 5 s floor.
MIN_DRILL_S = {"bitflip": 7.0, "nan": 7.0, "hang": 9.0, "crash": 7.0}
# What a run takes beyond the seconds it was given (its interpreter, its report), until one is seen:
# 0-1.5 s on the Xeon and the CI host.
RUN_OVERRUN_S = 1.0

# Shares of the time beyond the floors; the items run in this order. A determinism run that finishes its
# rounds early hands what it did not use on, so its share bounds a slow host's run more than it spends.
WEIGHT_SELFTEST = 0.16  # all kinds together
WEIGHT_DETERMINISM_RUN = 0.3  # each of two runs
WEIGHT_DRILL_RUN = 0.06  # each of four runs


def doctor_units(found: Sequence[Unit], spec: str | None) -> list[Unit]:
    """The units the doctor uses: the first two of each kind, or those `--units` names.

    Raises:
        UsageError: `spec` names no unit, or a unit this host does not have.
    """
    if spec is not None:
        return select_units(list(found), spec)
    chosen: list[Unit] = []
    for kind in ("cpu", "cuda"):
        chosen.extend([u for u in found if u.kind == kind][:UNITS_PER_KIND])
    if not chosen:
        raise UsageError("this host has no unit sdcscan can test")
    return chosen


def default_budget(units: Sequence[Unit]) -> float:
    """The budget when `--budget` is not given: longer where a GPU unit must start."""
    return DEFAULT_GPU_BUDGET_S if any(u.kind == "cuda" for u in units) else DEFAULT_BUDGET_S


def short_for_gpus(budget_s: float, units: Sequence[Unit]) -> str | None:
    """A warning when a GPU unit is among `units` and the budget is under what GPU hosts needed."""
    gpus = [u.id for u in units if u.kind == "cuda"]
    if not gpus or budget_s >= DEFAULT_GPU_BUDGET_S:
        return None
    return (
        f"{', '.join(gpus)} may not get to run every workload twice in {budget_s:g} s: a GPU unit took "
        f"{GPU_START_SEEN} to start under the doctor's plan; give --budget "
        f"{DEFAULT_GPU_BUDGET_S / 60:g}m or more, or expect 'use a longer --budget' (exit 3)"
    )


def check_budget(budget_s: float) -> None:
    """Raises: UsageError when the budget is too short for every step to show something."""
    if budget_s < MIN_BUDGET_S:
        raise UsageError(f"--budget {budget_s:g}s is too short: the doctor needs at least {MIN_BUDGET_S:g}s")


def first_of_each_kind(units: Sequence[Unit]) -> list[Unit]:
    """One unit of each kind, in kind order: where the self-test runs and the drill strikes."""
    firsts: dict[str, Unit] = {}
    for unit in units:
        firsts.setdefault(unit.kind, unit)
    return [firsts[k] for k in sorted(firsts)]


@dataclass(frozen=True)
class Item:
    """One child the doctor runs: its share of the spare time, its floor, and what kind of child it is
    (items of one family take alike beyond the seconds they are given)."""

    weight: float
    floor: float
    family: str  # "selftest" or "run"


@dataclass
class Allotter:
    """Shares the time until `ends_at` (less RESERVE_S) among named items, in order: each its floor and
    its weight's share of what is left beyond the floors (and expected overruns) of those after it."""

    ends_at: float
    items: dict[str, Item]
    overrun: dict[str, float] = field(default_factory=lambda: {"run": RUN_OVERRUN_S, "selftest": 0.0})

    @classmethod
    def for_kinds(cls, kinds: Sequence[str], ends_at: float) -> Allotter:
        items = {
            f"selftest {k}": Item(WEIGHT_SELFTEST / len(kinds), MIN_SELFTEST_S, "selftest") for k in kinds
        }
        items.update(
            {f"determinism {i}": Item(WEIGHT_DETERMINISM_RUN, MIN_DETERMINISM_RUN_S, "run") for i in (1, 2)}
        )
        items.update(
            {f"drill {kind}": Item(WEIGHT_DRILL_RUN, MIN_DRILL_S[kind], "run") for kind in INJECTIONS}
        )
        return cls(ends_at, items)

    def take(self, name: str, now: float) -> float:
        """Seconds for item `name` now; it leaves the queue. When the time left cannot hold every floor,
        it gets its floor while the time lasts, and the items after it what remains."""
        item = self.items.pop(name)
        left = self.ends_at - RESERVE_S - now - self.overrun[item.family]
        room = left - sum(i.floor + self.overrun[i.family] for i in self.items.values())
        if room <= item.floor:
            return max(0.0, min(item.floor, left))
        weights = item.weight + sum(i.weight for i in self.items.values())
        return item.floor + (room - item.floor) * item.weight / weights

    def took(self, family: str, given: float, spent: float) -> None:
        """A child of `family` given `given` seconds took `spent`: what comes after expects as much."""
        self.overrun[family] = max(self.overrun[family], spent - given)

    def floor_of(self, name: str) -> float:
        return self.items[name].floor


def selftest_argv(device: str, seconds: float) -> list[str]:
    """`sdcscan selftest` on one device for about `seconds`, its result on stdout."""
    budget = max(1, int(seconds - SELFTEST_START_S))
    return ["selftest", "--device", device, "--budget", f"{budget}s", "--json"]


@dataclass(frozen=True)
class RunPlan:
    """One `sdcscan run` the doctor starts: its plan, units, budget and report, typed, so the doctor
    reads its budget from here and never back out of a command line."""

    units: tuple[str, ...]
    profile: str
    budget_s: int  # whole seconds: `--budget` as the child gets it
    out: str
    inject: tuple[str, ...] = ()
    cases: int | None = None  # `--cases`: the same cases in every run, however fast the host

    def argv(self) -> list[str]:
        """The child's command line (after `sdcscan`)."""
        argv = ["run", "-p", self.profile, "--units", ",".join(self.units), "--seed", str(SEED)]
        argv += ["--budget", f"{self.budget_s}s", "-o", self.out, "--no-history"]
        for spec in self.inject:
            argv += ["--inject", spec]
        if self.cases is not None:
            argv += ["--cases", str(self.cases)]
        return argv


def run_plan(
    units: Sequence[Unit],
    seconds: float,
    out: str,
    *,
    profile: str = PROFILE,
    inject: Sequence[str] = (),
    cases: int | None = None,
) -> RunPlan:
    """`sdcscan run` of the doctor's fixed plan on `units` for at most `seconds` (and `cases` cases a
    unit, where given), its report at `out`."""
    budget_s = max(1, int(seconds - RUN_START_S))
    return RunPlan(tuple(u.id for u in units), profile, budget_s, out, tuple(inject), cases)


def determinism_cases(profile: Profile, units: Sequence[Unit]) -> int:
    """Cases a determinism run runs on each of `units`: DETERMINISM_ROUNDS rounds of `profile`'s plan, or
    DETERMINISM_ROUNDS_GPU where a GPU is among them."""
    rounds = DETERMINISM_ROUNDS_GPU if any(u.kind == "cuda" for u in units) else DETERMINISM_ROUNDS
    return rounds * cases_per_round(profile)


def injection_specs(kind: str, struck: Sequence[Unit]) -> list[str]:
    """`--inject` values striking each of `struck` with `kind` in every case."""
    return [f"{u.id}:{kind}@1.0" for u in struck]
