"""The `cases` table of a chunk of reports, built a unit at a time with numpy: the bulk of every fleet.

A fleet of 10,000 hosts is 8 million case rows. Built value by value (Python lists, then Arrow) they took
longer than reading the reports, and held a 64-character profile hash per row. Here a unit's columns
that do not change along its cases (report, profile, seed, cohort, group, unit, voter) are one value
each, repeated by numpy; the strings are dictionary-encoded (a dictionary of the chunk's values and an
int32 index per row); and a unit's cases, workloads and digests are turned into arrays once per
distinct tuple: the units of a healthy fleet share one digests tuple (`model.Interner`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
Index = npt.NDArray[np.int32]


def digest_key(digest: str) -> int:
    """The 63-bit key of a digest. `compare` refuses a dataset where two digests of one case share a key
    (about one chance in 10^13 for a case with a thousand different digests)."""
    return (
        int.from_bytes(
            hashlib.blake2b(digest.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big"
        )
        >> 1
    )


class _Dictionary:
    """Distinct strings in order of first sight, and the index of each."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def __call__(self, value: str) -> int:
        k = self.index.get(value)
        if k is None:
            k = self.index[value] = len(self.index)
        return k

    def values(self) -> list[str]:
        return list(self.index)


class CaseRows:
    """The rows of `cases` (`tables.SCHEMA`) of a chunk, unit by unit."""

    def __init__(self) -> None:
        self.per_unit: list[tuple[int, str, int, str, int, str, bool]] = []  # the columns fixed along a unit
        self.counts: list[int] = []
        self.indices: list[IntArray] = []
        self.workloads: list[Index] = []
        self.digests: list[Index] = []  # -1: no digest (null)
        self._workload, self._digest = _Dictionary(), _Dictionary()
        self._keys: list[int] = []  # digest_key of each digest in the dictionary
        self._seen_indices: dict[Sequence[int], IntArray] = {}
        self._seen_workloads: dict[Sequence[str], Index] = {}
        self._seen_digests: dict[tuple[str | None, ...], Index] = {}

    def add(
        self,
        head: tuple[int, str, int, str, int, str, bool],
        indices: Sequence[int],
        workloads: Sequence[str],
        digests: tuple[str | None, ...],
    ) -> None:
        """One unit's cases. `head`: (report, profile_sha256, seed, cohort, comparison_group, unit, voter)."""
        self.per_unit.append(head)
        self.counts.append(len(indices))
        self.indices.append(_cached(self._seen_indices, indices, lambda v: np.asarray(v, dtype=np.int64)))
        self.workloads.append(_cached(self._seen_workloads, workloads, self._workload_index))
        self.digests.append(_cached(self._seen_digests, digests, self._digest_index))

    def _workload_index(self, workloads: Sequence[str]) -> Index:
        return np.fromiter((self._workload(w) for w in workloads), dtype=np.int32, count=len(workloads))

    def _digest_index(self, digests: tuple[str | None, ...]) -> Index:
        out = np.empty(len(digests), dtype=np.int32)
        for k, d in enumerate(digests):
            if d is None:
                out[k] = -1
                continue
            i = out[k] = self._digest(d)
            if i == len(self._keys):
                self._keys.append(digest_key(d))
        return out

    def table(self, pa: Any, schema: Any) -> Any:
        """The Arrow table of `schema`'s columns (all of `cases`, or fewer), strings dictionary-encoded.

        Raises:
            UnicodeEncodeError: a string is not Unicode (a lone surrogate): Arrow strings are UTF-8.
        """
        counts = np.asarray(self.counts, dtype=np.int64)
        heads = list(zip(*self.per_unit, strict=True)) if self.per_unit else [()] * 7
        report, sha, seed, cohort, group, unit, voter = heads
        rows = np.repeat(np.arange(len(self.per_unit), dtype=np.int32), counts)
        digest = _concat(self.digests, np.int32)
        missing = digest < 0
        keys = np.asarray(self._keys, dtype=np.int64)
        names = [f.name for f in schema]
        columns = {
            "report": lambda: pa.array(np.repeat(np.asarray(report, dtype=np.int64), counts)),
            "profile_sha256": lambda: _dictionary(pa, rows, list(sha)),
            "seed": lambda: pa.array(np.repeat(np.asarray(seed, dtype=np.int64), counts)),
            "cohort": lambda: _dictionary(pa, rows, list(cohort)),
            "comparison_group": lambda: pa.array(np.repeat(np.asarray(group, dtype=np.int64), counts)),
            "unit": lambda: _dictionary(pa, rows, list(unit)),
            "case_index": lambda: pa.array(_concat(self.indices, np.int64)),
            "workload": lambda: _dictionary(pa, _concat(self.workloads, np.int32), self._workload.values()),
            "digest": lambda: pa.DictionaryArray.from_arrays(
                pa.array(digest, mask=missing, type=pa.int32()),
                pa.array(self._digest.values(), type=pa.string()),
            ),
            "digest_key": lambda: pa.array(
                keys[np.where(missing, 0, digest)] if len(keys) else np.zeros(len(digest), dtype=np.int64),
                mask=missing,
                type=pa.int64(),
            ),
            "voter": lambda: pa.array(np.repeat(np.asarray(voter, dtype=np.bool_), counts)),
        }
        return pa.Table.from_arrays([columns[name]() for name in names], names=names)


def _cached(seen: dict[Any, Any], key: Any, make: Any) -> Any:
    made = seen.get(key)
    if made is None:
        made = seen[key] = make(key)
    return made


def _concat(parts: list[Any], dtype: Any) -> Any:
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def _dictionary(pa: Any, indices: Index, values: list[str]) -> Any:
    """A dictionary-encoded string column: `values[indices[i]]` for each row."""
    return pa.DictionaryArray.from_arrays(
        pa.array(indices, type=pa.int32()), pa.array(values, type=pa.string())
    )
