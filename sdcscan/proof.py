"""What a pass proves: the operations each workload's checks covered, and a 95% bound on the silent-corruption
rate those checks leave room for.

A unit that passed ran n operations whose results an invariant verified (ABFT checksums, an exact golden)
without one failure. If the unit miscomputed each operation independently with probability p and a check
saw each corruption with probability at least d, the chance of no failure is at most exp(-n·p·d); it falls
below 5% once p > 3/(n·d) (the rule of three: -ln 0.05 = 2.996, rounded up). So a pass bounds the rate at
3/(n·d) per operation, at 95% confidence. A unit that failed miscomputed: it gets no bound.

`d` is not measured here. It is the floor the self-test (`sdcscan selftest`, each workload's
selftest_spec.py) holds for the fault models of how hardware fails (sdcscan/faults/hardware.py: bursts, warp
runs and strides, tiles, stuck bits, wrong rows), where the arithmetic guarantees one; models the self-test
only reports (its stated blind spots, docs/fault_models.md) lie outside the bound. Each workload states
its checked op and `d` in its spec (`WorkloadSpec.coverage`, a `Coverage`, which also counts a case's
checked ops); tests/test_proof.py derives each `d` from the self-test floors, so the two cannot drift
apart.

A digest covers a case's output for consensus: it proves nothing until it is compared with a peer's or a
golden's (`sdcscan compare`, `--golden`). Such coverage is counted (`evidence` "digest") and never bounded
here: no self-test measures what a digest of a training run sees.

Torch-free and free of other sdcscan imports: the judgement, the report's validator, `compare`, the
Prometheus writer and the console all read it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

CONFIDENCE: Final = 0.95
RULE_OF_THREE: Final = 3.0  # -ln(1 - CONFIDENCE) = 2.996, rounded up: the bound stays an upper bound


def rate_bound(checked: float, detection: float | None) -> float | None:
    """The 95% upper bound on silent corruptions per op after `checked` ops without a failure, each
    corruption caught with probability at least `detection`: RULE_OF_THREE / (checked · detection).
    None when nothing was checked or no detection is known."""
    if detection is None or not positive(detection) or not positive(checked):
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


def positive(x: object) -> bool:
    """A finite number above 0 (not a bool): what a count of ops or a detection must be to enter a bound."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0
