"""Self-test declarations of `gemm_int8`: variants, the faults swept per site, and detection floors.

Kept apart from the workload so the workload module stays about the check; `sdcscan selftest` reads these
(the `SelftestWorkload` protocol in sdcscan/workloads/base.py; the sweep in sdcscan/selftest/sweep.py).
Torch-free, like spec.py beside it. docs/abft.md §1.3 and docs/fault_models.md give the arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

_SMALL = [[8, 64, 40]]  # selftest shape: m = 8 rows make an all-zero activation column (a blind spot) ~2^-64
# Room for what a GPU kernel's layout corrupts: warp-aligned runs and strides of 32, 16 x 16 tiles and
# 32-column blocks need rows and columns beyond one warp (two warps down a column, eight along a row).
_WIDE = [[64, 64, 256]]

# Matrix fault models swept at the output site besides every bit of one word (sdcscan/faults/__init__.py). Each
# defeats the row check alone: swaps and a compensating pair leave row sums unchanged; two flips of bit
# 31 (or of bit 0, half the time) cancel mod 2^32; an offset of 2^29 on every one of the 40 columns
# of the self-test shape adds 5·2^32 ≡ 0 to the row sum; 127 vanishes mod 127; a column offset of 127
# vanishes mod 127 in every row. 2^22 is the offset issue 11 measured at n = 1024 (here the row check
# sees it too, since 40·2^22 ≢ 0 mod 2^32).
OUTPUT_MODELS = (
    "swap_in_row",
    "swap_columns",
    "pair_in_row",
    "double_flip:0",
    "double_flip:31",
    "row_offset:4194304",
    "row_offset:536870912",
    "row_offset:127",
    "column_offset",
    "column_offset:127",
    "row_swap",  # whole rows at each other's addresses: only the row tags see them (issue 44)
    "row_address_bit",
    "row_address_bit:0",
    "row_address_bit:2",
)
# Fault models of how hardware fails (sdcscan/faults/hardware.py). Bursts strike one word anywhere, so
# the small shape serves; the others need the wide one. Bit 31 (the sign of these small products) is
# swept beside a random bit because 32 or 64 changes of ±2^31 in a row always cancel mod 2^32.
BURSTS = tuple(f"burst:{width}" for width in range(2, 9))
SPATIAL_MODELS = (
    "run32", "run32:31", "stride32", "stride32:31", "tile8", "tile8:31", "tile16",
    "stuck0", "stuck1", "stuck0:31", "stuck1:31", "wrong_rows", "row_swap", "row_address_bit:5",
)  # fmt: skip
# mod 127 cannot see a change of its checksum word that is a multiple of 127: a 7-bit burst whose bits
# all flip the same way (±127·2^s: the word is A·chk ≥ 0, below 2^22 at the self-test shape, so every
# 7-bit burst above bit 21 is one) and some 8-bit patterns (tests/test_fault_models.py enumerates them).
# Every other word is covered by the exact column or weighted check, so at least (n_ext − 1)/n_ext =
# 47/48 of those bursts are caught (198/200 measured for 7 bits). That is no guarantee, and a floor
# below 1 would fail a short self-test (the doctor's: 3 trials) by chance: reported, not floored.
_MOD127_CHECKSUM_BLIND = frozenset({"burst:7", "burst:8"})


class SelftestMixin:
    """`selftest_variants`, `selftest_bits`, `selftest_floor` and `blind_spots` of the SelftestWorkload
    protocol for gemm_int8."""

    blind_spots: ClassVar[tuple[str, ...]] = (
        "six or more coordinated errors that cancel in all three sum checks, e.g. (+d, -2d, +d) at three "
        "equally spaced columns of one row and the negation in another row; a tile whose +-2^b changes "
        "balance in every row (plain and position-weighted) and every column (below 1e-9 for random data)",
        "mod127: a burst that changes its checksum word by a multiple of 127 (seven equal bits flipped, "
        "e.g. a 7-bit burst above the word's highest set bit, and some 8-bit patterns); mod2_32 has no such word",
        "A corrupted before the GEMM (the product stays consistent: the negative control); a swap of equal words",
    )  # docs/abft.md §1, docs/fault_models.md
    selftest_variants: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "mod2_32": {"scheme": "mod2_32", "shapes": _SMALL, "ops_per_case": 1.0},
        "mod127": {"scheme": "mod127", "shapes": _SMALL, "ops_per_case": 1.0},
        "mod2_32_wide": {"scheme": "mod2_32", "shapes": _WIDE, "ops_per_case": 1.0},
        "mod127_wide": {"scheme": "mod127", "shapes": _WIDE, "ops_per_case": 1.0},
    }

    @classmethod
    def selftest_floor(cls, variant: str, site: str, bit: int | str) -> float | None:
        """1.0 wherever detection is guaranteed by the arithmetic, which is every output fault swept but
        mod 127's 7- and 8-bit bursts (reported: see _MOD127_CHECKSUM_BLIND).

        Output: one changed word breaks the row check (mod 2^32: any change; mod 127: any ±2^b) and a data
        word also the exact column and weighted checks, so a burst is caught wherever it lands but in
        mod 127's checksum word. A fault confined to one row (swap_in_row, pair_in_row, double_flip,
        row_offset, run32, stride32 along a row) changes that column's exact sum by exactly its error
        there. A fault confined to one column (column_offset, stride32 down a column) changes the exact
        weighted sum of a row by (j + 1)·δ, and swapped columns j1, j2 change it by
        (j1 − j2)·(C[i, j2] − C[i, j1]) in every row where they differ: never 0 once a value changed. A
        stuck bit changes every word it changes in the same direction, so each such column's exact sum
        moves. A tile escapes only if its ±2^b changes balance in every row, plain and weighted, and in
        every column. Rows copied from other rows keep their own checksum words: a changed row fails
        its weighted check unless the two rows' weighted sums are equal. Rows written whole at each
        other's addresses (row_swap, row_address_bit) carry their checksums with them and leave every
        column sum as it was; each carries its own row tag, though, another row's index: caught.
        Encoded: a flip at W_ext[j, l] moves column j of C by ±2^b·A[:, l] in every repeat, which the
        weighted check (data and weighted rows), the row check (row checksum rows) or the padding check
        sees unless column l of A is all 0 (mod127's checksum row: all in {0, 127, 254}): below
        (3/256)^8 < 1e-15 with the 8 rows of the self-test shape.
        """
        if site == "output" and variant.startswith("mod127") and bit in _MOD127_CHECKSUM_BLIND:
            return None
        if site in ("output", "encoded"):
            return 1.0
        return None

    @classmethod
    def selftest_bits(cls, variant: str, site: str) -> Sequence[int | str]:
        if variant.endswith("_wide"):  # the layout models, at the output only
            return list(SPATIAL_MODELS) if site == "output" else []
        if site == "output":  # every bit of an int32 word, the matrix models, then bursts
            return [*range(32), *OUTPUT_MODELS, *BURSTS]
        return list(range(8))  # int8/uint8 operands
