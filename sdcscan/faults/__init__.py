"""Fault injection: `--inject UNIT:KIND[@RATE]` specs and the bit flips applied at workload fault sites.

It exists so users can prove end to end that their pipeline catches a bad unit, and so the
detectors are tested with the same code path as clean runs.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sdcscan.errors import UsageError
from sdcscan.faults.hardware import BIT_KINDS, HARDWARE_KINDS, corrupt_hardware_

if TYPE_CHECKING:  # the parent parses --inject and must not import torch; workers flip the bits
    import torch

# Corrupt values at a workload fault site: one bit, a NaN, or a fault model of how hardware fails
# (sdcscan/faults/hardware.py: bursts, warp runs and strides, tiles, stuck bits, wrong rows).
DATA_KINDS = ("bitflip", "nan", *HARDWARE_KINDS)
PROCESS_KINDS = ("hang", "crash")  # the worker stops answering / dies inside a case
# The workload raises at its fault site, as a bug or a driver error would: proves that a raising
# workload makes its unit invalid (never pass) while the other units go on.
EXCEPTION_KINDS = ("raise",)
KINDS = DATA_KINDS + PROCESS_KINDS + EXCEPTION_KINDS

_SPEC = re.compile(r"^(?P<unit>(?:cpu|cuda):\d+):(?P<kind>[a-z][a-z0-9_]*)(?:@(?P<rate>[0-9.eE+-]+))?$")


class InjectedError(RuntimeError):
    """Raised inside a workload by `--inject UNIT:raise`."""


@dataclass(frozen=True, slots=True)
class Injection:
    """A parsed --inject: on `unit`, with chance `rate` per case, do `kind`."""

    unit: str
    kind: str
    rate: float = 1.0

    def to_dict(self) -> dict[str, object]:
        return {"unit": self.unit, "kind": self.kind, "rate": self.rate}


# Fault models of two or more coordinated changes in a matrix (rows × columns), for the self-test's
# tables: each is built to defeat one checksum on its own (a plain row sum is blind to a swap within
# the row, a column swap, a compensating pair; a mod-2^32 sum to two flips of bit 31 in a row).
# Their parameter, after a colon in a label such as "double_flip:31" or "relerr:1e-3", is a bit for
# double_flip, an offset for the *_offset models (absolute on integer tensors; relative to the largest
# |value| of the row or column on float tensors) and ε for relerr.
MATRIX_KINDS = (
    "swap_in_row",  # two elements of one row exchange places
    "swap_columns",  # two whole columns exchange places
    "pair_in_row",  # +δ on one element and −δ on another of the same row
    "double_flip",  # the same bit flipped in two elements of one row
    "row_offset",  # δ added to every element of one row
    "column_offset",  # δ added to every element of one column
    "relerr",  # one element multiplied by (1 + ε) (float tensors only)
)


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One armed data fault: where to strike and, when given, which element and bit (else drawn by seed).

    `repeat` picks which pass through the site strikes, for workloads that repeat work inside a case
    (None: drawn from the seed among the passes the workload declares). `param` is a matrix fault's
    parameter (see MATRIX_KINDS), a burst's width or wrong_rows' count (sdcscan.faults.hardware).
    """

    kind: str
    site: str
    seed: int
    element: int | None = None
    bit: int | None = None  # negative counts from the top: -1 is the sign (or most significant) bit
    repeat: int | None = None
    param: float | None = None

    def strikes_pass(self, index: int, passes: int) -> bool:
        """Whether pass `index` of `passes` through the site is the one this fault corrupts."""
        target = (
            self.repeat if self.repeat is not None else random.Random(f"{self.seed}:pass").randrange(passes)
        )
        return index == target % max(1, passes)


def from_label(label: int | str, site: str, seed: int) -> FaultSpec:
    """The fault a self-test label names: a bit (int), "any" (a random bit), a matrix fault model
    (MATRIX_KINDS) or a fault model of how hardware fails (HARDWARE_KINDS: "burst:4", "tile8:30").

    Raises:
        ValueError: an unknown model, or a parameter that is not a number.
    """
    if isinstance(label, int):
        return FaultSpec("bitflip", site, seed, bit=label)
    if label == "any":
        return FaultSpec("bitflip", site, seed)
    kind, _, param = label.partition(":")
    if kind not in MATRIX_KINDS + HARDWARE_KINDS:
        known = MATRIX_KINDS + HARDWARE_KINDS
        raise ValueError(f"unknown fault model {label!r}; expected a bit, 'any' or one of {known}")
    if kind == "double_flip" or (kind in (*BIT_KINDS, "row_address_bit") and param):
        return FaultSpec(kind, site, seed, bit=int(param))
    return FaultSpec(kind, site, seed, param=float(param) if param else None)


def site_for(kind: str, sites: tuple[str, ...]) -> str:
    """The fault site `--inject` strikes: the workload's first, except that a wrong-row fetch goes to
    the site where rows are fetched (embbag_int8's `fetch`) where the workload has one."""
    return "fetch" if kind == "wrong_rows" and "fetch" in sites else sites[0]


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


def corrupt_(tensor: torch.Tensor, spec: FaultSpec, columns: int | None = None) -> dict[str, object]:
    """Corrupt `tensor` in place (a bit flip, a NaN or a fault model) and say what was done.

    Args:
        tensor: a contiguous torch tensor of any dtype, on any device.
        spec: the fault; element and bit are drawn from `spec.seed` when not given.
        columns: matrix fault models only: confine them to the first `columns` columns (the data).
    Returns:
        {"kind", "element", "bit", "value_changed"} describing the corruption (bit is None for NaN);
        the models of corrupt_matrix_ and fault_models.corrupt_hardware_ say where they struck instead.
    """
    if spec.kind == "raise":
        raise InjectedError(f"injected exception at fault site {spec.site!r}")
    if spec.kind in MATRIX_KINDS:
        return corrupt_matrix_(tensor, spec, columns)
    if spec.kind in HARDWARE_KINDS:
        return corrupt_hardware_(
            tensor,
            spec.kind,
            spec.seed,
            bit=spec.bit,
            param=spec.param,
            columns=columns,
            element=spec.element,
        )
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


def flip_bit_(tensor: torch.Tensor, flat_index: int, bit: int) -> None:
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


def corrupt_matrix_(matrix: torch.Tensor, spec: FaultSpec, columns: int | None = None) -> dict[str, object]:
    """Apply a matrix fault model (MATRIX_KINDS) in place to a 2-D tensor, or to its first `columns` columns.

    Row, columns and values are drawn from `spec.seed`. A swap of equal values changes nothing and is
    reported as such (`value_changed` False), as is a flip of +0.0 to −0.0.

    Raises:
        ValueError: not a 2-D tensor, too few columns for the model, or relerr on an integer tensor.
    """
    import torch

    cols = matrix.shape[1] if columns is None else columns
    if matrix.dim() != 2 or cols < 2 or matrix.shape[0] < 1:
        raise ValueError(
            f"fault model {spec.kind} needs a matrix of at least 1 x 2, got {tuple(matrix.shape)}"
        )
    rng = random.Random(spec.seed)
    i = rng.randrange(matrix.shape[0])
    j1, j2 = rng.sample(range(cols), 2)
    view = matrix[:, :cols]
    before = view.clone()
    if spec.kind == "swap_in_row":
        view[i, j1], view[i, j2] = before[i, j2], before[i, j1]
    elif spec.kind == "swap_columns":
        view[:, [j1, j2]] = before[:, [j2, j1]]
    elif spec.kind == "pair_in_row":
        delta = _offset(view[i], spec.param, rng)
        view[i, j1] += delta
        view[i, j2] -= delta
    elif spec.kind == "double_flip":
        bit = spec.bit if spec.bit is not None else rng.randrange(8 * matrix.element_size())
        for j in (j1, j2):
            cell = view[i, j : j + 1].clone()
            flip_bit_(cell, 0, bit)
            view[i, j] = cell[0]
    elif spec.kind == "row_offset":
        view[i] += _offset(view[i], spec.param, rng)
    elif spec.kind == "column_offset":
        view[:, j1] += _offset(view[:, j1], spec.param, rng)
    else:  # relerr
        if not matrix.is_floating_point():
            raise ValueError("fault model relerr needs a float tensor")
        eps = spec.param if spec.param is not None else 10.0 ** -rng.uniform(1, 6)
        view[i, j1] = before[i, j1] * (1.0 + eps)
    words = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[matrix.element_size()]
    changed = not torch.equal(before.view(words), view.view(words)) and not torch.equal(before, view)
    return {"kind": spec.kind, "row": i, "columns": [j1, j2], "bit": spec.bit, "value_changed": changed}


def _offset(values: torch.Tensor, param: float | None, rng: random.Random) -> float:
    """δ for the offset and pair models: `param` as is on integers (else a random 1..2^16); on floats,
    `param` (default 0.5) times the largest |value| of the row or column (1.0 where all are zero)."""
    if not values.is_floating_point():
        return int(param) if param is not None else rng.randrange(1, 2**16)
    scale = float(values.double().abs().max()) or 1.0
    return (param if param is not None else 0.5) * scale
