"""Fault injection: `--inject UNIT:KIND[@RATE]` specs and the bit flips applied at workload fault sites.

It exists so users can prove end to end that their pipeline catches a bad unit, and so the
detectors are tested with the same code path as clean runs.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from sdcscan.errors import UsageError

DATA_KINDS = ("bitflip", "nan")  # corrupt a value at a workload fault site
PROCESS_KINDS = ("hang", "crash")  # the worker stops answering / dies inside a case
# The workload raises at its fault site, as a bug or a driver error would: proves that a raising
# workload makes its unit invalid (never pass) while the other units go on.
EXCEPTION_KINDS = ("raise",)
KINDS = DATA_KINDS + PROCESS_KINDS + EXCEPTION_KINDS

_SPEC = re.compile(r"^(?P<unit>(?:cpu|cuda):\d+):(?P<kind>[a-z]+)(?:@(?P<rate>[0-9.eE+-]+))?$")


class InjectedError(RuntimeError):
    """Raised inside a workload by `--inject UNIT:raise`."""


@dataclass(frozen=True, slots=True)
class Injection:
    """A parsed --inject: on `unit`, with chance `rate` per case, do `kind`."""

    unit: str
    kind: str
    rate: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "kind": self.kind, "rate": self.rate}


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One armed data fault: where to strike and, when given, which element and bit (else drawn by seed)."""

    kind: str
    site: str
    seed: int
    element: int | None = None
    bit: int | None = None  # negative counts from the top: -1 is the sign (or most significant) bit


def parse_inject(text: str) -> Injection:
    """Parse `cpu:1:bitflip@0.3`.

    Raises:
        UsageError: malformed spec, unknown kind, or rate outside (0, 1].
    """
    m = _SPEC.match(text.strip())
    if not m:
        raise UsageError(f"invalid --inject {text!r}: expected UNIT:KIND[@RATE], e.g. cpu:1:bitflip@0.3")
    kind = m.group("kind")
    if kind not in KINDS:
        raise UsageError(f"invalid --inject {text!r}: kind must be one of {', '.join(KINDS)}")
    try:
        rate = float(m.group("rate")) if m.group("rate") else 1.0
    except ValueError:
        raise UsageError(f"invalid --inject {text!r}: rate must be a number in (0, 1]") from None
    if not 0.0 < rate <= 1.0:
        raise UsageError(f"invalid --inject {text!r}: rate must be in (0, 1]")
    return Injection(m.group("unit"), kind, rate)


def draws(injection: Injection, case_seed: int, attempt: int = 0) -> bool:
    """Whether the injection strikes this case: deterministic in (case seed, attempt) so runs replay."""
    return random.Random(f"{case_seed}:{injection.unit}:{injection.kind}:{attempt}").random() < injection.rate


def corrupt_(tensor: Any, spec: FaultSpec) -> dict[str, Any]:
    """Corrupt one element of `tensor` in place (a bit flip or a NaN) and say what was done.

    Args:
        tensor: a contiguous torch tensor of any dtype, on any device.
        spec: the fault; element and bit are drawn from `spec.seed` when not given.
    Returns:
        {"kind", "element", "bit", "value_changed"} describing the corruption (bit is None for NaN).
    """
    if spec.kind == "raise":
        raise InjectedError(f"injected exception at fault site {spec.site!r}")
    rng = random.Random(spec.seed)
    flat = tensor.view(-1)
    element = spec.element if spec.element is not None else rng.randrange(flat.numel())
    before = flat[element].item()
    if spec.kind == "nan" and tensor.is_floating_point():
        flat[element] = float("nan")
        bit = None
    elif spec.kind == "nan":  # integers have no NaN: poison the top bit, the nearest integer analogue
        bit = 8 * tensor.element_size() - 1
        flip_bit_(tensor, element, bit)
    else:
        nbits = 8 * tensor.element_size()
        bit = spec.bit if spec.bit is not None else rng.randrange(nbits)
        bit = bit + nbits if bit < 0 else bit  # -1 is the top bit of whatever word the site holds
        flip_bit_(tensor, element, bit)
    after = flat[element].item()
    # A flip of +0.0 to -0.0 changes bits but no value: detectors are not expected to see it.
    value_changed = before != after  # NaN compares unequal, so a NaN result counts as changed
    return {"kind": spec.kind, "element": element, "bit": bit, "value_changed": value_changed}


def flip_bit_(tensor: Any, flat_index: int, bit: int) -> None:
    """XOR one bit of one element, viewing the element's storage as an integer word."""
    import torch

    words = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    size = tensor.element_size()
    nbits = 8 * size
    if not 0 <= bit < nbits:
        raise ValueError(f"bit {bit} out of range for a {nbits}-bit element")
    word = tensor.view(-1).view(words[size])
    # The sign bit of a signed word is -(1 << (nbits-1)); a plain 1 << 31 would overflow int32.
    mask = 1 << bit if (size == 1 or bit < nbits - 1) else -(1 << (nbits - 1))
    word[flat_index] ^= torch.tensor(mask, dtype=word.dtype, device=tensor.device)
