"""What a pass proves: the operations each workload's checks covered, and a 95% bound on the silent-corruption
rate those checks leave room for.

A unit that passed ran n operations whose results an invariant verified (ABFT checksums, an exact golden)
without one failure. If the unit miscomputed each operation independently with probability p and a check
saw each corruption with probability at least d, the chance of no failure is at most exp(-n·p·d); it falls
below 5% once p > 3/(n·d) (the rule of three: -ln 0.05 = 2.996, rounded up). So a pass bounds the rate at
3/(n·d) per operation, at 95% confidence. A unit that failed miscomputed: it gets no bound.

`d` is not measured here. It is the floor the self-test (`sdcscan selftest`, each workload's
selftest_spec.py) holds for the fault models of how hardware fails (sdcscan/fault_models.py: bursts, warp
runs and strides, tiles, stuck bits, wrong rows), where the arithmetic guarantees one; models the self-test
only reports (its stated blind spots, docs/fault_models.md) lie outside the bound. tests/test_proof.py
derives each `detection` below from those floors, so the two cannot drift apart.

A digest covers a case's output for consensus: it proves nothing until it is compared with a peer's or a
golden's (`sdcscan compare`, `--golden`). Such coverage is counted (`evidence` "digest") and never bounded
here: no self-test measures what a digest of a training run sees.

Torch-free and free of other sdcscan imports: the judgement, the report's validator, `compare`, the
Prometheus writer and the console all read it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

CONFIDENCE: Final = 0.95
RULE_OF_THREE: Final = 3.0  # -ln(1 - CONFIDENCE) = 2.996, rounded up: the bound stays an upper bound
Evidence = Literal["invariant", "digest"]


@dataclass(frozen=True)
class Coverage:
    """How one workload's throughput ops become checked ops, and the detection its checks are held to.

    Attributes:
        op: what one checked op is, in words ("multiply-add").
        per_op: checked ops per op of the workload's throughput count (`Outcome.ops`, in its ops_unit).
        times: a key of the case's `detail` whose value multiplies that (embbag's `dim`), or None.
        evidence: "invariant" (a check verified each result) or "digest" (hashed for consensus only).
        detection: d, the self-test's floor over the hardware fault models; None: no bound.
        applies: `detail` values under which the floor holds (the self-test's variants); a case outside
            them is counted as checked, but its workload gets no bound on that unit.
        why: where `detection` comes from, in one sentence.
    """

    op: str
    per_op: float
    evidence: Evidence
    detection: float | None
    why: str
    times: str | None = None
    applies: Mapping[str, str] = field(default_factory=dict)


# The one table (README "How to read pass"; docs/fault_models.md gives the arithmetic behind each floor).
COVERAGE: Final[Mapping[str, Coverage]] = {
    "gemm_int8": Coverage(
        op="multiply-add",
        per_op=0.5,  # ops count 2 per multiply-add (2·m·n·k per GEMM)
        evidence="invariant",
        detection=1.0,
        applies={"scheme": "mod2_32"},
        why="mod 2^32: every hardware fault model at the output and in the encoded weights is floored at 1.0 "
        "(exact row, column and weighted checks); mod 127 is not bounded: 7- and 8-bit bursts of its "
        "checksum word are a blind spot (198/200 measured)",
    ),
    "gemm_fp": Coverage(
        op="multiply-add",
        per_op=0.5,
        evidence="invariant",
        detection=0.99,
        applies={"inputs": "abs_normal"},
        why="V-ABFT on |N|+0.5 inputs: warp runs, strides and tiles at the lowest exponent bit and stuck "
        "sign or exponent bits (every change at least a factor of 2) are floored at 0.99 in every dtype; "
        "changes within the rounding (random mantissa bits) and zero-mean inputs are reported, not floored",
    ),
    "embbag_int8": Coverage(
        op="pooled element",
        per_op=1.0,
        times="dim",  # a lookup pools one row of `dim` elements
        evidence="invariant",
        detection=0.99,
        why="the lower of its modes' floors: exact mode holds 1.0 for bursts, wrong rows and stuck signs, "
        "realistic mode 0.99 for wrong rows and layout models at an exponent bit; several elements of one "
        "bag that cancel on the 2^-7 grid are exact mode's blind spot",
    ),
    "matmul_golden": Coverage(
        op="multiply-add",
        per_op=0.5,  # flops: 2·m·n·k per product
        evidence="invariant",
        detection=1.0,
        why="every output value is compared with an exact integer golden: every fault model, every bit, 1.0",
    ),
    "train": Coverage(
        op="multiply-add",
        per_op=0.5,  # 6 flops per weight and sample: 3 multiply-adds
        evidence="digest",
        detection=None,
        why="its digest proves nothing until compared with peers or a golden, and no self-test measures "
        "which corruptions of a training step reach it",
    ),
}


def checked_ops(workload: str, ops: float, detail: Mapping[str, object]) -> float | None:
    """The checked ops of one case that did `ops` (in its workload's ops_unit); None: not counted (a
    workload without coverage, or a detail without the value `times` names)."""
    cov = COVERAGE.get(workload)
    if cov is None or not _positive(ops):
        return None
    factor = cov.per_op
    if cov.times is not None:
        times = detail.get(cov.times)
        if not _positive(times):
            return None
        factor *= float(times)  # type: ignore[arg-type]  # _positive made it a number
    return ops * factor


def floor_holds(workload: str, detail: Mapping[str, object]) -> bool:
    """Whether the workload's detection floor applies to a case with this `detail`."""
    cov = COVERAGE.get(workload)
    return cov is not None and all(detail.get(k) == v for k, v in cov.applies.items())


def rate_bound(checked: float, detection: float | None) -> float | None:
    """The 95% upper bound on silent corruptions per op after `checked` ops without a failure, each
    corruption caught with probability at least `detection`: RULE_OF_THREE / (checked · detection).
    None when nothing was checked or no detection is known."""
    if detection is None or not _positive(detection) or not _positive(checked):
        return None
    return RULE_OF_THREE / (checked * detection)


def withdrawn(checked: Mapping[str, Mapping[str, object]]) -> dict[str, dict[str, object]]:
    """A unit's `checked` section with every rate bound removed: its verdict was changed from pass after
    its own run gave the bounds (a cluster report's consensus found it wrong), so they prove nothing."""
    return {w: {**c, "sdc_rate_bound": None} for w, c in checked.items()}


def sentence(
    checked: float,
    op: str,
    evidence: str,
    bound: float | None,
    verdict: str,
    *,
    detection: float | None = None,
) -> str:
    """One workload's coverage on one unit in words: "no corruption in 4.1e12 checked multiply-adds: rate <
    7.4e-13 per op (95%)"."""
    ops = f"{sci(checked)} {op}s"
    if evidence == "digest":
        return f"{ops} covered by digests: proof only once compared with peers or a golden"
    if bound is not None:
        return f"no corruption in {sci(checked)} checked {op}s: rate < {sci(bound, up=True)} per op (95%)"
    if verdict == "fail":
        return f"{sci(checked)} checked {op}s; no bound: the unit miscomputed"
    if verdict != "pass":
        return f"{sci(checked)} checked {op}s; no bound: the unit's verdict is {verdict}"
    why = "no detection floor" if detection is None else "nothing checked"
    return f"{sci(checked)} checked {op}s; no bound ({why} for these parameters)"


def sci(x: float, *, up: bool = False) -> str:
    """`x` to two significant digits as 4.1e12 (rounded up with `up`, so a bound stays a bound)."""
    if not math.isfinite(x) or x <= 0:
        return f"{x:g}"
    exp = math.floor(math.log10(x))
    mant = x / 10**exp
    mant = math.ceil(mant * 10 - 1e-9) / 10 if up else round(mant, 1)
    if mant >= 10:
        mant, exp = mant / 10, exp + 1
    text = f"{mant:.1f}".removesuffix(".0")
    return text if exp == 0 else f"{text}e{exp}"


def _positive(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0
