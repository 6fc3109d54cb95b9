"""Fault models of how hardware fails, applied in place at a workload's fault site.

NVIDIA's gate-level stuck-at study ("The Anatomy of Silent Data Corruption", arXiv 2605.04213) found
that single-bit flips are under 40% of bit-flip events and that corrupted addresses are warp-aligned
and periodic. A detector proved on one bit of one element says little about those, so these models
strike several bits of a word or the same bit of many elements laid out as a GPU kernel lays out its
work: a warp's 32 consecutive results, one lane of every warp (every 32nd element), an MMA tile, a
column block behind one stuck datapath bit, and row fetches from a wrong address.

Every model that strikes many elements flips (or forces) the *same bit* in each of them rather than
writing one shared wrong value. A stuck-at fault sits in one gate: in a datapath bit that a warp's
lanes, a lane's successive results or a tile's results pass through, it corrupts that bit position in
every result that crosses it, each result keeping its own other bits. A shared wrong value would be a
row or column offset (the `row_offset`/`column_offset` models of sdcscan.faults); per-element bit
changes are also the harder case for a checksum, since their signs differ and can cancel in a sum.

Torch is imported inside the functions: the parent process parses `--inject` kinds from here.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# Fault models a user can drill with `--inject UNIT:KIND` and the self-test sweeps by label
# ("burst:4", "tile8:30"). The parameter after the colon is the bit for BIT_KINDS (default: drawn
# from the seed; negative counts from the top), the width for burst, the lookups or rows for wrong_rows.
HARDWARE_KINDS = (
    "burst",  # 2-8 adjacent bits of one word flipped (one element anywhere in the tensor)
    "run32",  # one warp's 32 consecutive results in a row, warp-aligned: the same bit flipped in each
    "stride32",  # one lane of every warp: every 32nd element of a row or of a column, same bit flipped
    "tile8",  # an aligned 8 x 8 block (one MMA tile's results), same bit flipped in each
    "tile16",  # an aligned 16 x 16 block
    "stuck0",  # one bit forced to 0 in every row of an aligned block of 32 columns
    "stuck1",  # one bit forced to 1 there
    "wrong_rows",  # row ids: a wrong row fetched for several lookups; a matrix: rows copied from others
    "row_swap",  # two whole rows of a matrix exchanged: each written to the other's address
    "row_address_bit",  # a stuck row-address bit: every row i written at row i XOR 2^b, whole
)
BIT_KINDS = ("run32", "stride32", "tile8", "tile16", "stuck0", "stuck1")
ROW_ADDRESS_KINDS = ("row_swap", "row_address_bit")  # rows written to other rows' addresses, whole
WARP = 32  # lanes of a warp, and the column block of a stuck bit
BURST_WIDTHS = (2, 8)  # a burst's width when none is given: drawn from this range, inclusive
WRONG_ROWS = 4  # lookups (or rows) struck by wrong_rows when no count is given
_WORDS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def corrupt_hardware_(
    tensor: torch.Tensor,
    kind: str,
    seed: int,
    *,
    bit: int | None = None,
    param: float | None = None,
    columns: int | None = None,
    element: int | None = None,
) -> dict[str, object]:
    """Apply one of HARDWARE_KINDS in place; say what was struck and how many values changed.

    Args:
        tensor: a contiguous tensor of any dtype; matrix models view it as rows of its last dimension
            (a vector is one row).
        kind: one of HARDWARE_KINDS.
        seed: where, which bit and (burst) which width, when not given.
        bit: BIT_KINDS: the bit, negative from the top (-1: the sign or most significant bit); burst:
            its lowest bit.
        param: burst: its width; wrong_rows: how many lookups or rows.
        columns: matrix models only: confine them to the first `columns` columns (the data).
        element: burst only: the flat index of the word it strikes.
    Returns:
        {"kind", ..., "value_changed"}: matrix models give "rows" and "columns" as [start, stop, step]
        of the region struck, "elements" struck and "changed" (elements whose value changed: a stuck bit
        that already holds its value, or +0.0 turned to -0.0, changes none).
    Raises:
        ValueError: an unknown kind, an empty tensor, a width outside 1..bits of the word, or
            wrong_rows on a float vector or a one-row matrix.
    """
    rng = random.Random(seed)
    if tensor.numel() == 0:
        raise ValueError(f"fault model {kind} needs a non-empty tensor")
    if kind == "burst":
        return _burst_(tensor, rng, param, element, bit)
    if kind == "wrong_rows" and tensor.dim() == 1 and not tensor.is_floating_point():
        return _wrong_ids_(tensor, rng, param)
    matrix = _as_matrix(tensor, columns)
    if kind == "wrong_rows":
        return _wrong_rows_(matrix, rng, param)
    if kind in ROW_ADDRESS_KINDS:  # a row moves whole, checksum columns and all: `columns` is ignored
        return _moved_rows_(_as_matrix(tensor, None), kind, rng, bit)
    if kind not in BIT_KINDS:
        raise ValueError(f"unknown fault model {kind!r}; expected one of {HARDWARE_KINDS}")
    nbits = 8 * tensor.element_size()
    b = _bit(bit, nbits, rng)
    rows, cols = region(kind, (matrix.shape[0], matrix.shape[1]), rng)
    target = matrix[rows, cols]  # a view: basic slices, so the writes below reach the tensor
    changed = _set_bits_(target, 1 << b, "or" if kind == "stuck1" else "and" if kind == "stuck0" else "xor")
    return {
        "kind": kind,
        "bit": b,
        "rows": [rows.start, rows.stop, rows.step],
        "columns": [cols.start, cols.stop, cols.step],
        "elements": target.numel(),
        "changed": changed,
        "value_changed": changed > 0,
    }


def region(kind: str, shape: tuple[int, int], rng: random.Random) -> tuple[slice, slice]:
    """Rows and columns (slices with explicit start, stop, step) a BIT_KINDS model strikes in a matrix."""
    m, n = shape
    if kind == "run32":  # a warp-aligned run; a row shorter than a warp is struck whole
        i = rng.randrange(m)
        start = WARP * rng.randrange(n // WARP) if n >= WARP else 0
        return slice(i, i + 1, 1), slice(start, min(start + WARP, n), 1)
    if kind == "stride32":  # one lane of every warp along a row, or down a column
        if rng.random() < 0.5:
            i = rng.randrange(m)
            return slice(i, i + 1, 1), slice(rng.randrange(min(WARP, n)), n, WARP)
        j = rng.randrange(n)
        return slice(rng.randrange(min(WARP, m)), m, WARP), slice(j, j + 1, 1)
    if kind in ("tile8", "tile16"):  # tiles are aligned; those at the edges are cut short, as kernels do
        t = 8 if kind == "tile8" else 16
        r0, c0 = t * rng.randrange(math.ceil(m / t)), t * rng.randrange(math.ceil(n / t))
        return slice(r0, min(r0 + t, m), 1), slice(c0, min(c0 + t, n), 1)
    c0 = WARP * rng.randrange(math.ceil(n / WARP))  # stuck0 / stuck1: every row of a column block
    return slice(0, m, 1), slice(c0, min(c0 + WARP, n), 1)


def _as_matrix(tensor: torch.Tensor, columns: int | None) -> torch.Tensor:
    """Rows of the last dimension (a vector is one row), cut to the first `columns` columns."""
    matrix = tensor.view(1, -1) if tensor.dim() <= 1 else tensor.view(-1, tensor.shape[-1])
    return matrix if columns is None else matrix[:, :columns]


def _bit(bit: int | None, nbits: int, rng: random.Random) -> int:
    b = bit if bit is not None else rng.randrange(nbits)
    b = b + nbits if b < 0 else b
    if not 0 <= b < nbits:
        raise ValueError(f"bit {bit} out of range for a {nbits}-bit element")
    return b


def _set_bits_(target: torch.Tensor, mask: int, how: str) -> int:
    """XOR, OR or AND-NOT `mask` into every element's word, in place; elements whose value changed.

    A word that changed without changing its value (+0.0 and -0.0) is not counted, as for a bit flip.
    """
    import torch

    nbits = 8 * target.element_size()
    words = target.view(getattr(torch, _WORDS[target.element_size()]))
    before_words, before = words.clone(), target.clone()
    if how == "xor":
        words.bitwise_xor_(_as_word(mask, nbits))
    elif how == "or":
        words.bitwise_or_(_as_word(mask, nbits))
    else:
        words.bitwise_and_(_as_word(~mask & ((1 << nbits) - 1), nbits))
    return int(((words != before_words) & (target != before)).sum())


def _as_word(value: int, nbits: int) -> int:
    """An unsigned bit pattern as the Python int of the word type: uint8 is unsigned, wider words
    are signed (bit nbits - 1 is their sign)."""
    return value - (1 << nbits) if nbits > 8 and value >= 1 << (nbits - 1) else value


def _burst_(
    tensor: torch.Tensor, rng: random.Random, width: float | None, element: int | None, low: int | None
) -> dict[str, object]:
    """Flip `width` adjacent bits (drawn from BURST_WIDTHS when None) of one element anywhere; the
    element and the lowest bit are drawn when not given."""
    nbits = 8 * tensor.element_size()
    w = int(width) if width is not None else rng.randint(*BURST_WIDTHS)
    if not 1 <= w <= nbits:
        raise ValueError(f"burst width {w} out of range for a {nbits}-bit element")
    flat = tensor.view(-1)
    element = element if element is not None else rng.randrange(flat.numel())
    low = low if low is not None else rng.randrange(nbits - w + 1)
    if not 0 <= low <= nbits - w:
        raise ValueError(f"a {w}-bit burst from bit {low} does not fit a {nbits}-bit element")
    changed = _set_bits_(flat[element : element + 1], ((1 << w) - 1) << low, "xor")
    return {"kind": "burst", "element": element, "bits": [low, low + w], "value_changed": changed > 0}


def _moved_rows_(matrix: torch.Tensor, kind: str, rng: random.Random, bit: int | None) -> dict[str, object]:
    """Whole rows written to other rows' addresses. row_swap: two rows drawn at random exchange places.
    row_address_bit: a row-address bit b (drawn below the highest row's, or given) reads the wrong
    way for every row, so row i holds row i XOR 2^b: pairs of rows exchange places, all of them at once
    (NVIDIA's gate-level study finds corrupted addresses warp-aligned and periodic)."""
    m = matrix.shape[0]
    if m < 2:
        raise ValueError(f"{kind} needs a matrix of at least 2 rows, got {tuple(matrix.shape)}")
    if kind == "row_swap":
        first, second = rng.sample(range(m), 2)
        order = list(range(m))
        order[first], order[second] = second, first
        detail: dict[str, object] = {"rows": [first, second]}
    else:
        top = (m - 1).bit_length()
        b = bit if bit is not None else rng.randrange(top)
        b = b + top if b < 0 else b
        if not 0 <= b < top:
            raise ValueError(f"row_address_bit: bit {b} does not address {m} rows")
        order = [i ^ (1 << b) if i ^ (1 << b) < m else i for i in range(m)]
        detail = {"bit": b, "rows_moved": sum(1 for i, j in enumerate(order) if i != j)}
    before = matrix.clone()
    matrix.copy_(before[order])
    changed = int((matrix != before).any(1).sum())
    return {"kind": kind, **detail, "changed": changed, "value_changed": changed > 0}


def _spaced(count: int, rng: random.Random, param: float | None) -> list[int]:
    """`param` (default WRONG_ROWS) positions evenly spaced over `count`, at one drawn offset: when the
    spacing is at least the longest bag, every struck lookup lies in a bag of its own."""
    wanted = min(count, int(param) if param is not None else WRONG_ROWS)
    if wanted < 1:
        raise ValueError(f"wrong_rows needs at least one lookup or row (got {param})")
    step = count // wanted
    first = rng.randrange(step)
    return [first + t * step for t in range(wanted)]


def _wrong_ids_(ids: torch.Tensor, rng: random.Random, param: float | None) -> dict[str, object]:
    """Row ids: the same address bit flipped in several lookups, as a faulty address line fetches the
    wrong row for each. The bit is below the highest id's bit length, so the rows stay plausible."""
    positions = _spaced(ids.numel(), rng, param)
    bit = rng.randrange(max(1, int(ids.max()).bit_length()))
    ids[positions] ^= 1 << bit
    return {"kind": "wrong_rows", "elements": positions, "bit": bit, "value_changed": True}


def _wrong_rows_(matrix: torch.Tensor, rng: random.Random, param: float | None) -> dict[str, object]:
    """A matrix: rows overwritten by the rows whose index differs in one address bit, as when the rows
    of an output were computed from (or written to) a wrong address."""
    m = matrix.shape[0]
    if m < 2:
        raise ValueError(
            f"wrong_rows needs row ids or a matrix of at least 2 rows, got {tuple(matrix.shape)}"
        )
    rows = _spaced(m, rng, param)
    bit = rng.randrange(max(1, (m - 1).bit_length()))
    sources = [(i ^ (1 << bit)) % m for i in rows]  # never i: 2^bit < m
    before = matrix.clone()
    matrix[rows] = before[sources]
    changed = int((matrix[rows] != before[rows]).any(1).sum())
    return {"kind": "wrong_rows", "rows": rows, "sources": sources, "value_changed": changed > 0}
