"""Self-test declarations of `embbag_int8`: variants, the faults swept per site, and detection floors.

Kept apart from the workload so the workload module stays about the check; `sdcscan selftest` reads these
(the `SelftestWorkload` protocol in sdcscan/workloads/base.py; the sweep in sdcscan/selftest/sweep.py).
Torch-free, like spec.py beside it. docs/abft.md §2.5-2.6 and docs/fault_models.md give the arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

_SMALL = {"rows": 4096, "dim": 16, "bags": 8, "pooling": [20, 40]}  # selftest: ~1 ms per trial
# Bags wide enough for warp-aligned runs and strides of 32 and 16 x 16 tiles of the output (dim 128:
# four warps a bag; 64 bags: two warps down a column).
_WIDE = {**_SMALL, "dim": 128, "bags": 64}
# Floors measured with `sdcscan selftest` and scripts/bench_embbag_detection.py (docs/abft.md §2.5).
# Realistic mode, in bits of a table byte: the high nibble of an 8-bit value (its lower bits change an
# element by 1/16 of that or less and are reported only); every bit of a 4-bit byte, whose quantization
# step is 1/15 of the row's range.
_REALISTIC_TABLE_FLOORS = {8: dict.fromkeys(range(4, 8), 0.99), 4: dict.fromkeys(range(8), 0.99)}
# Fault models of how hardware fails (sdcscan/faults/hardware.py): bursts in one output word or table
# byte, a wrong row fetched for four bags at once, and (wide variants) the layout models of the output.
BURSTS = ("burst:2", "burst:4", "burst:8")
LAYOUT_MODELS = ("run32", "stride32", "tile8", "tile16", "stuck0", "stuck1")
# The same at fixed bits: the XOR models at the lowest exponent bit of the fp32 output (each element it
# strikes doubles or halves), and the sign stuck at 0 and at 1. A stuck sign moves every element it
# changes the same way (negatives up, or positives down), so a bag's sum moves by twice their total.
# Anything else that changes several elements of one bag can cancel in its plain sum: halving 4.0 and
# doubling 2.0 in one bag is -2 + 2 (measured before issue 44: two row-wise stride32 of 200 at a random
# bit, bits 15 and 17 of four elements, two up and two down); exact mode's column-weighted sum weighs the
# two differently, so it is floored at 1.0 for every layout model. Realistic mode's trigger
# also sums a bag under a balanced ±1 pattern, so cancelling there needs equal and opposite changes at
# elements of the same sign in it: 99% at the exponent bit, reported at random bits (whose low mantissa
# bits sit within its rounding bound).
FIXED_LAYOUT_MODELS = ("run32:23", "stride32:23", "tile8:23", "tile16:23", "stuck0:31", "stuck1:31")
# The same bit flipped in each byte of a warp-aligned run of 32 table bytes (a row of the narrow
# variants is struck whole): up in some values, down in others, so a bag's plain sum can stay (issue 44);
# exact mode's column-weighted sum sees it.
TABLE_RUNS = ("run32:1", "run32:4", "run32:7")


class SelftestMixin:
    """`selftest_variants`, `selftest_bits`, `selftest_floor` and `blind_spots` of the SelftestWorkload
    protocol for embbag_int8."""

    blind_spots: ClassVar[tuple[str, ...]] = (
        "realistic mode: a change within the rigorous rounding bound of the element it hits (low q bits of "
        "rows orders of magnitude below their bag's largest, near-constant rows, output mantissa bits 0-6 as "
        "measured on an AVX2 EPYC, up to 0-9 by the rigorous bound)",
        "exact mode: a wrong-row fetch between rows of equal plain and column-weighted sums; changes of a bag's "
        "elements whose total and column-weighted total (odd weights below 2^14) are both multiples of 2^32 "
        "on the 2^-7 grid: elements exchanged or flipped up and down in a run cancel in the plain sum alone",
        "a q bit flipped in a row stored with scale 0 (no value changes); an id corrupted before the lookup "
        "(the checksum uses the same id: the negative control)",
    )  # docs/abft.md §2.6, docs/fault_models.md
    selftest_variants: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "exact": {"mode": "exact", "weighted": True, "bits": [8], **_SMALL},
        "exact_4bit": {"mode": "exact", "weighted": True, "bits": [4], **_SMALL},
        "realistic": {"mode": "realistic", "bits": [8], **_SMALL},
        "realistic_4bit": {"mode": "realistic", "weighted": True, "bits": [4], **_SMALL},
        "exact_wide": {"mode": "exact", "weighted": True, "bits": [8], **_WIDE},
        "realistic_wide": {"mode": "realistic", "bits": [8], **_WIDE},
    }

    @classmethod
    def selftest_floor(cls, variant: str, site: str, bit: int | str) -> float | None:
        """Exact mode sees every value-changing flip or burst of one pooled element or one output, and
        every wrong-row fetch of one bit (each row's sum carries its index's parity), for one lookup or
        for one lookup in each of several bags; realistic mode is held to 99% on the high bits of a table
        value and on wrong-row fetches, and reports the rest. The layout models of the output and the runs
        of a table row change several elements of one bag, which can cancel in its plain sum: exact mode's
        column-weighted sum sees them (floor 1.0 since issue 44); realistic mode is floored at an exponent
        bit of the output (FIXED_LAYOUT_MODELS) and reports the rest."""
        if bit in LAYOUT_MODELS or bit in TABLE_RUNS:  # exact: the column-weighted sum sees what cancels
            return 1.0 if variant.startswith("exact") else None
        if bit in FIXED_LAYOUT_MODELS:
            return 0.99 if variant.startswith("realistic") else 1.0
        if variant.startswith("exact"):
            return 1.0 if site in ("output", "table", "fetch") else None
        if site == "fetch":
            return 0.99
        bits = 4 if variant.endswith("4bit") else 8
        return _REALISTIC_TABLE_FLOORS[bits].get(bit) if site == "table" and isinstance(bit, int) else None

    @classmethod
    def selftest_bits(cls, variant: str, site: str) -> Sequence[int | str]:
        """Every bit of an output word, of a table byte, of a raw id, and bursts in a word or a byte; for
        `fetch`, the bits that keep a row id inside the selftest's table (a power of two of rows), each a
        wrong-row fetch, and a wrong row fetched for four bags. Wide variants: the output's layout models."""
        if variant.endswith("_wide"):
            return [*FIXED_LAYOUT_MODELS, *LAYOUT_MODELS] if site == "output" else []
        rows = {**_SMALL, **cls.selftest_variants[variant]}["rows"]
        extra: dict[str, Sequence[str]] = {
            "output": BURSTS,
            "table": (*BURSTS, *TABLE_RUNS),
            "fetch": ("wrong_rows",),
        }
        width = {"output": 32, "table": 8, "indices": 64, "fetch": rows.bit_length() - 1}[site]
        return [*range(width), *extra.get(site, ())]
