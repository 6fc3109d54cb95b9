"""`sdcscan selftest`: show that each check fires on injected bit flips and fault models, and stays silent otherwise.

The workloads swept are those implementing the `SelftestWorkload` protocol (sdcscan/workloads/base.py):
``negative_sites`` (fault sites the check cannot see by design, e.g. an un-encoded operand before
encoding: they must stay silent), ``selftest_variants`` (variant name → parameter overrides),
``selftest_bits`` (bit positions swept per site, "any": a random bit per trial, or fault model labels
such as "swap_in_row" or "tile8:23": sdcscan.faults.from_label), ``selftest_floor``
(minimum detection fraction, None: report only) and ``for_selftest`` (builds the workload).

Per (workload, variant) the workload is built by ``for_selftest({**defaults, **overrides})`` and prepared
once; then, per trial seed, one clean case and one case per (site, bit) with that bit flip or fault model armed
through the workload's own ``ctx.fault`` site, checked by its own ``run``. A trial whose fault changed no value
(+0 → −0, a stuck bit that already held its value) is not counted. Trials run seed-major so a workload may reuse work between cases that share a seed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

import torch

from sdcscan.errors import UsageError
from sdcscan.faults import from_label
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, UNCOVERED, Case
from sdcscan.selftest.floors import below_floor
from sdcscan.workloads import SPECS, load
from sdcscan.workloads.base import Context, SelftestWorkload, Workload, has_selftest

DEFAULT_TRIALS = 100
DEFAULT_SEED = 0
MIN_TRIALS = 3  # a variant under a time budget still runs this many: fewer would show nothing
# A fault judged against a floor is drawn again, from a new seed, while it changes no value (a stuck-at-0
# bit that is already 0 everywhere it strikes, as on matmul_golden's small integers): the floor is a rate
# among faults that change a value, and a trial of the others shows nothing.
REDRAWS = 8


class _Record(TypedDict):
    """What every row of the self-test's table says."""

    workload: str
    variant: str
    site: str  # a fault site, or "clean"
    bit: int | str | None  # None on the clean row
    trials: int
    passed: bool


class FaultRecord(_Record):
    """One (site, bit) of a variant: how often its flips were detected."""

    detected: int
    rate: float | None
    floor: float | None
    negative_control: bool
    unchanged: int
    not_reached: int
    exercised: bool  # False: every draw left the values equal, so no trial was counted


class CleanRecord(_Record):
    """A variant's clean trials: the check must stay silent."""

    false_positives: int
    rows_checked: int
    first_false_positive: str | None


@dataclass(slots=True)
class _Tally:
    """Counts for one (site, bit) of one variant."""

    site: str
    bit: int | str
    floor: float | None
    negative: bool
    trials: int = 0
    detected: int = 0
    unchanged: int = 0  # flips that changed no value: not counted
    not_reached: int = 0  # the site was never passed through ctx.fault: a workload bug

    def record(self, workload: str, variant: str) -> FaultRecord:
        rate = self.detected / self.trials if self.trials else None
        unexercised = self.trials == 0 and self.unchanged > 0  # every draw left the values equal
        if self.negative:
            passed = self.detected == 0 and self.not_reached == 0
        else:  # an unexercised fault has nothing to judge, and nothing failed
            passed = self.not_reached == 0 and (
                self.floor is None
                or unexercised
                or (self.trials > 0 and not below_floor(self.detected, self.trials, self.floor))
            )
        return {
            "workload": workload,
            "variant": variant,
            "site": self.site,
            "bit": self.bit,
            "trials": self.trials,
            "detected": self.detected,
            "rate": rate,
            "floor": self.floor,
            "negative_control": self.negative,
            "unchanged": self.unchanged,
            "not_reached": self.not_reached,
            "exercised": not unexercised,
            "passed": passed,
        }


@dataclass(slots=True)
class _Clean:
    trials: int = 0
    false_positives: int = 0
    rows_checked: int = 0
    errors: list[str] = field(default_factory=list)


def selftest_workloads(names: list[str] | None = None) -> list[type[SelftestWorkload]]:
    """The workload classes to sweep: those named (each must have a self-test), or all that have one.

    Raises:
        UsageError: an unknown workload, or one without a self-test.
    """
    if not names:
        return [cls for cls in map(load, sorted(SPECS)) if has_selftest(cls)]
    classes = [load(n) for n in names]  # unknown names first, each with a did-you-mean
    found = [cls for cls in classes if has_selftest(cls)]
    if len(found) < len(classes):
        missing = next(cls.name for cls in classes if not has_selftest(cls))
        with_st = ", ".join(c.name for c in selftest_workloads())
        raise UsageError(f"workload {missing!r} has no self-test (ones that do: {with_st})")
    return found


def run_selftest(
    names: list[str] | None = None,
    *,
    trials: int = DEFAULT_TRIALS,
    seed: int = DEFAULT_SEED,
    on_variant: Callable[[str, str], None] | None = None,
    calibration: str | None = None,
    device: str = "cpu",
    budget_s: float | None = None,
) -> dict[str, Any]:
    """Sweep the self-test of each workload and variant.

    Args:
        names: workloads to test (None: every one with selftest_variants).
        trials: trials per (site, bit), and clean trials per variant (at most, with `budget_s`).
        seed: run seed; trial seeds derive from it.
        on_variant: called with (workload, variant) before each variant (progress).
        calibration: a calibration file for the workloads that take one (gemm_fp).
        device: "cpu", "cpu:N" or "cuda:N"; the caller pins and configures the unit as a worker does.
        budget_s: seconds for the whole sweep, shared evenly by the variants still to run: a variant
            stops starting trials when its share is spent, after at least MIN_TRIALS (None: no limit).
    The sweep runs on one CPU thread, as a per-core unit does.

    Returns:
        {"seed", "trials", "device", "rows": [...], "notes": [...], "blind_spots": {...}, "passed"};
        `trials` is the most any variant ran; `rows` holds one clean record per
        (workload, variant) and one record per (workload, variant, site, bit); `notes` are the workloads'
        facts about this device (e.g. that it is uncalibrated); `blind_spots` what each workload's checks
        cannot catch by design, so a reader of the table knows what a 0% row would not have shown.
    Raises:
        UsageError: bad arguments.
    """
    if trials < 1:
        raise UsageError(f"--trials must be at least 1 (got {trials})")
    rows: list[FaultRecord | CleanRecord] = []
    notes: list[str] = []
    classes = selftest_workloads(names)
    variants = [(cls, variant) for cls in classes for variant in cls.selftest_variants]
    ends_at = None if budget_s is None else time.monotonic() + budget_s
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a per-core unit runs, and as e_max was calibrated
    try:
        for done, (cls, variant) in enumerate(variants):
            if on_variant is not None:
                on_variant(cls.name, variant)
            extra = {"calibration": calibration} if calibration and "calibration" in cls.spec.defaults else {}
            until = None if ends_at is None else _share(ends_at, len(variants) - done)
            rows.extend(_run_variant(cls, variant, _Trials(trials, until), seed, extra, notes, device))
    finally:
        torch.set_num_threads(threads)
    passed = all(r["passed"] for r in rows)
    blind_spots = {cls.name: list(cls.blind_spots) for cls in classes}
    return {
        "seed": seed,
        "trials": max((r["trials"] for r in rows if r["site"] == "clean"), default=0),
        "device": device,
        "rows": rows,
        "notes": notes,
        "blind_spots": blind_spots,
        "passed": passed,
    }


@dataclass(frozen=True, slots=True)
class _Trials:
    """How many trials a variant runs: `most`, or fewer once `until` (time.monotonic) has passed."""

    most: int
    until: float | None = None

    def more(self, done: int) -> bool:
        if done >= self.most:
            return False
        return done < MIN_TRIALS or self.until is None or time.monotonic() < self.until


def _share(ends_at: float, variants_left: int) -> float:
    """When the next variant must stop starting trials: an even share of the time left."""
    now = time.monotonic()
    return now + max(0.0, ends_at - now) / variants_left


def _run_variant(
    cls: type[SelftestWorkload],
    variant: str,
    trials: _Trials,
    seed: int,
    extra: Mapping[str, object],
    notes: list[str],
    device: str,
) -> list[FaultRecord | CleanRecord]:
    """Clean and injected trials for one variant, seed-major; returns its records."""
    params = {**cls.spec.defaults, **cls.selftest_variants[variant], **extra}
    workload = cls.for_selftest(params)
    unit, kind = (device, device.partition(":")[0]) if ":" in device else ("cpu:0", "cpu")
    ctx = Context(
        unit=unit, device=torch.device(device if kind == "cuda" else "cpu"), run_seed=seed, params=params
    )
    workload.prepare(ctx)
    notes.extend(n for n in ctx.notes if n not in notes)
    negative = cls.negative_sites
    sites = list(dict.fromkeys([*cls.spec.fault_sites, *negative]))
    tallies = [
        _Tally(
            site, bit, None if site in negative else cls.selftest_floor(variant, site, bit), site in negative
        )
        for site in sites
        for bit in cls.selftest_bits(variant, site)
    ]
    clean = _Clean()
    t = 0
    while trials.more(t):
        case_seed = _derive(seed, cls.name, variant, t)
        case = Case(index=t, workload=cls.name, seed=case_seed, occurrence=0, params=params)
        uncovered = _clean_trial(workload, ctx, case, clean)
        if uncovered:  # a datapath this unit lacks (TF32 on a CPU): nothing to show, nothing failed
            notes.append(f"{cls.name} {variant}: not self-tested on this unit ({uncovered})")
            return []
        for tally in tallies:
            _fault_trial(workload, ctx, case, tally)
        t += 1
    return [_clean_record(cls.name, variant, clean), *(x.record(cls.name, variant) for x in tallies)]


def _clean_trial(workload: Workload, ctx: Context, case: Case, clean: _Clean) -> str:
    """Run a clean case into `clean`; returns why the case checked nothing ("" when it checked)."""
    ctx.begin_case(None)
    outcome = workload.run(ctx, case)
    uncovered = outcome.detail.get(UNCOVERED, "")
    if uncovered:
        return str(uncovered)
    clean.trials += 1
    rows = outcome.detail.get("rows_checked", 0)  # a count the checking workloads put in their detail
    if isinstance(rows, (int, float)):
        clean.rows_checked += int(rows)
    if outcome.status != STATUS_OK:  # a mismatch or an error: either way the check did not stay silent
        clean.false_positives += 1
        clean.errors.append(outcome.error or "; ".join(m.where for m in outcome.mismatches[:1]))
    return ""


def _fault_trial(workload: Workload, ctx: Context, case: Case, tally: _Tally) -> None:
    """One trial of a (site, bit): a fault judged against a floor is drawn up to REDRAWS more times while
    it changes no value; each draw that changes none is counted as `unchanged`."""
    draws = 1 + (REDRAWS if tally.floor is not None else 0)
    for draw in range(draws):
        parts = (case.seed, tally.site, str(tally.bit), *((draw,) if draw else ()))
        ctx.begin_case(from_label(tally.bit, tally.site, _derive(*parts)))
        outcome = workload.run(ctx, case)
        if ctx.injected is None:
            tally.not_reached += 1
            return
        if ctx.injected["value_changed"]:
            tally.trials += 1
            tally.detected += outcome.status == STATUS_MISMATCH
            return
        tally.unchanged += 1


def _clean_record(workload: str, variant: str, clean: _Clean) -> CleanRecord:
    return {
        "workload": workload,
        "variant": variant,
        "site": "clean",
        "bit": None,
        "trials": clean.trials,
        "false_positives": clean.false_positives,
        "rows_checked": clean.rows_checked,
        "first_false_positive": clean.errors[0] if clean.errors else None,
        "passed": clean.false_positives == 0,
    }


def _derive(*parts: object) -> int:
    """A 63-bit seed from any parts: stable across runs and Python versions (no hash())."""
    return random.Random(":".join(map(str, parts))).getrandbits(63)
