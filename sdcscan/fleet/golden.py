"""Goldens: the fleet's consensus digest per (plan, cohort, case), so one host can be judged with no peers.

`fleet.golden_record` writes one, keeping only cases the fleet settles as `compare` would (one vote per
host); `index_golden` is what `sdcscan run --golden` looks each unit's plan and cohort up in, and
`sdcscan.judgement.evidence.check_golden` (the one comparison, weighed by the judge as evidence) compares
the unit with it. No I/O except `load_golden`.
"""

from __future__ import annotations

import os
from typing import cast

from typing_extensions import NotRequired, TypedDict

from sdcscan.errors import ReportError, UsageError
from sdcscan.files import read_json
from sdcscan.fleet.model import PlanKey
from sdcscan.judgement.evidence import GoldenEntry

GOLDEN_VERSION = 1
MAX_GOLDEN_BYTES = 256 << 20

GoldenIndex = dict[tuple[PlanKey, str], GoldenEntry]  # (plan, cohort) -> entry


# The golden document. Fields marked "not checked" are what `record` writes; `validate_golden` leaves
# them alone (no reader relies on them), so a golden from elsewhere may hold anything there.


class GoldenCases(TypedDict):
    """One entry's cases, column-wise: the i-th entries of each list form one case."""

    index: list[int]
    workload: list[str]
    digest: list[str]
    votes: NotRequired[list[int]]  # units that produced the digest (not checked)
    voters: NotRequired[list[int]]  # units that ran the case (not checked)


class GoldenPlan(TypedDict):
    """The golden of one (plan, cohort)."""

    profile_sha256: str
    seed: int
    cohort: str
    cases: GoldenCases
    units: NotRequired[int]  # not checked


class RefusedCase(TypedDict):
    """A case `record` left out: the fleet did not settle it, or too few units produced its digest."""

    profile_sha256: str
    seed: int
    cohort: str
    index: int
    workload: str
    reason: str


class GoldenTool(TypedDict):
    name: str
    version: str


class Golden(TypedDict):
    """A golden file, as `record` writes it and `validate_golden` accepts it."""

    golden_version: int
    entries: list[GoldenPlan]
    tool: NotRequired[GoldenTool]  # not checked
    reports: NotRequired[int]  # not checked
    refused: NotRequired[list[RefusedCase]]  # not checked


class GoldenError(UsageError):
    """A golden file is unreadable or not a golden: exit 2, the message says why."""


def validate_golden(data: object, *, label: str = "golden") -> Golden:
    """Check a golden document's structure; return it unchanged.

    Raises:
        GoldenError: not a golden of a version this sdcscan reads, or malformed.
    """
    if not isinstance(data, dict) or "golden_version" not in data:
        raise GoldenError(
            f"{label}: not a golden file (no golden_version); make one with `sdcscan golden record`"
        )
    if data["golden_version"] != GOLDEN_VERSION:
        raise GoldenError(
            f"{label}: golden_version {data['golden_version']!r} is not supported "
            f"(this sdcscan reads {GOLDEN_VERSION})"
        )
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise GoldenError(f"{label}: malformed golden (entries is not a list)")
    for e in entries:
        ok = isinstance(e, dict) and isinstance(e.get("profile_sha256"), str)
        ok = ok and _is_int(e.get("seed")) and isinstance(e.get("cohort"), str)
        cols = e.get("cases") if ok else None
        if not isinstance(cols, dict) or any(
            not isinstance(cols.get(c), list) for c in ("index", "workload", "digest")
        ):
            raise GoldenError(f"{label}: malformed golden entry")
        if not len(cols["index"]) == len(cols["workload"]) == len(cols["digest"]):
            raise GoldenError(f"{label}: golden entry with case columns of different lengths")
        # Indices are dict keys and digests are compared with a report's: wrong types would raise later.
        if not all(map(_is_int, cols["index"])) or not all(
            isinstance(x, str) for x in (*cols["workload"], *cols["digest"])
        ):
            raise GoldenError(
                f"{label}: malformed golden entry (a case index, workload or digest of the wrong type)"
            )
        if len(set(cols["index"])) != len(cols["index"]):
            # One case, two reference digests: whichever a reader kept, the other would fail every
            # unit that computes the case right. A recorded golden never repeats an index.
            raise GoldenError(f"{label}: malformed golden entry (a case index appears twice)")
    return cast(Golden, data)  # every field a reader relies on was checked above


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def load_golden(path: str | os.PathLike[str]) -> Golden:
    """Read and validate a golden file.

    Raises:
        GoldenError: unreadable, too large, not JSON, or not a golden; the message names the file.
    """
    try:
        data = read_json(path, what="golden", max_bytes=MAX_GOLDEN_BYTES)
    except ReportError as err:
        raise GoldenError(str(err)) from None  # a bad --golden is a usage error (exit 2)
    return validate_golden(data, label=str(path))


def index_golden(golden: Golden) -> GoldenIndex:
    """(plan, cohort) -> {case index: (digest, workload)} for fast lookups."""
    out: GoldenIndex = {}
    for e in validate_golden(golden)["entries"]:
        c = e["cases"]
        out[((e["profile_sha256"], e["seed"]), e["cohort"])] = {
            i: (d, w) for i, d, w in zip(c["index"], c["digest"], c["workload"], strict=True)
        }
    return out
