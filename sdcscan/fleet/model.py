"""What `compare` keeps of a report: a compact, interned extract, so 10,000 reports fit in little memory.

A report's raw JSON is dropped as soon as it is extracted. Identical tuples (the case indices, the
digests of a healthy unit, the workload sequence) are shared between units through an `Interner`,
so a fleet of healthy units costs a few pointers per unit rather than a Python object per case.
Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, TypeGuard, TypeVar, cast

from sdcscan.errors import ReportError
from sdcscan.fleet.kernel_evidence import SentinelSection, read_section
from sdcscan.parts import describe
from sdcscan.report import shown, validate_report
from sdcscan.report.document import Finding, Host, Mismatch, Unit
from sdcscan.timefmt import parse_iso_utc

_T = TypeVar("_T")
_S = TypeVar("_S")
PlanKey = tuple[str, int]  # (run.profile.sha256, run.seed): two units ran the same case i only within a plan

# Report findings by which a unit's own run named it failing (`sdcscan.judgement.wording`): its digest lost a
# majority vote of its host, did not reproduce on re-run, or one of its own checks fired. An `undecided`
# suspect is not among them: the run could not tell which of its units was wrong.
CONVICTING_FINDINGS = frozenset({"divergent", "not_reproducible", "invariant"})
RETEST_CLASSES = frozenset({"persistent", "transient", "case", "untested"})
MAX_CPU_MODEL_CHARS = 100  # `host.cpu_model` as kept: a model name, not a document


class Interner:
    """Return one shared object per distinct value (strings and tuples), like `sys.intern` for tuples."""

    def __init__(self) -> None:
        self._seen: dict[object, object] = {}

    def __call__(self, value: _T) -> _T:
        return cast(_T, self._seen.setdefault(value, value))

    def __contains__(self, value: object) -> bool:
        return value in self._seen


@dataclass(frozen=True, slots=True)
class Invariant:
    """Invariant failures a report carries for one unit (ABFT, golden matmul, NaN/Inf, golden digest)."""

    mismatches: int
    first_case: int | None
    workloads: tuple[str, ...]
    checks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UnitRecord:
    """One unit of one report: identity, verdict, the digests it voted with, its throughput."""

    unit: str
    cohort: str
    verdict: str
    reason: str | None
    indices: tuple[int, ...]
    digests: tuple[str | None, ...]  # None where the case did not produce a comparable digest
    workloads: tuple[str, ...]
    throughput: tuple[tuple[str, float, str], ...]  # (workload, ops_per_s, ops_unit), sorted
    invariant: Invariant | None
    retest: str | None = None  # its own run's re-test classification (RETEST_CLASSES), if any
    calibration: tuple[tuple[str, str, int, float], ...] = ()  # gemm_fp's (dtype, checker, K, e_max)
    efficiency: tuple[tuple[str, float, str], ...] = ()  # (workload, achieved / its own plain-op peak, "")
    checked: tuple[
        tuple[str, float, str], ...
    ] = ()  # (workload, checked ops as an integer, op): sdcscan.proof
    detection: tuple[tuple[str, float, str], ...] = ()  # (workload, d, evidence) where the report gives one
    part: str | None = (
        None  # the physical part in words (`sdcscan.parts.describe`), where the report names it
    )


@dataclass(frozen=True, slots=True)
class HostReport:
    """One usable report, reduced to what `compare` and goldens need."""

    source: str
    sha256: str
    host: str  # host.hostname, as the report says it (what a --hosts inventory lists)
    run_id: str
    plan: PlanKey
    ended_at: float  # POSIX seconds, UTC
    verdict: str
    units: tuple[UnitRecord, ...]
    machine_id: str | None = None  # host.machine_id: a hash of the machine's identity, None if absent
    profile: str = ""  # run.profile.name, for the commands `compare` suggests
    # (unit id, CONVICTING_FINDINGS kinds) for each unit the report's own findings name failing, sorted.
    # Kept on the report, not the unit, because it comes from the report's top-level `findings`.
    blamed: tuple[tuple[str, tuple[str, ...]], ...] = ()
    machine_tag: str | None = None  # set where machines share this hostname (the machine id)
    cpu_model: str | None = None  # host.cpu_model: groups hosts for the fleet's sentinel signal
    sentinel: SentinelSection | None = None  # the report's kernel-log evidence (`fleet.sentinel`), if any

    @property
    def key(self) -> str:
        """The host as findings name it: one machine, even where two machines share a hostname."""
        return self.host if self.machine_tag is None else f"{self.host} (machine {self.machine_tag})"

    def own_blame(self, unit: UnitRecord) -> tuple[str, ...]:
        """How this report's own run named `unit` failing (finding kinds), or () when it did not.

        A finding alone is not a conviction: the unit's verdict must say `fail` as well.
        """
        if not self.blamed or unit.verdict != "fail":
            return ()
        return next((kinds for uid, kinds in self.blamed if uid == unit.unit), ())


@dataclass(frozen=True, slots=True)
class Skipped:
    """An input that was not used, and why."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class Superseded:
    """A report that does not vote: a newer report of the same host and plan replaces it."""

    report: HostReport
    by: HostReport


@dataclass(slots=True)
class Extractor:
    """Turns report dicts into `HostReport`s, sharing identical strings and tuples between them."""

    intern: Interner = field(default_factory=Interner)

    def extract(self, data: object, *, source: str, sha256: str = "") -> HostReport:
        """Validate a parsed report and keep only what compare needs.

        Args:
            data: the parsed JSON document.
            source: where it came from (shown in `skipped` and evidence).
            sha256: hash of the file's bytes, to recognise identical copies.

        Raises:
            ReportError: the document is not a usable report; the message says why.
        """
        # Every field read below has its type once validate_report accepts the document.
        report = validate_report(data, label="report")
        run, hostname = report["run"], report["host"]["hostname"]
        if not hostname:
            raise ReportError("report: host.hostname is empty")
        invariants = _invariant_records(report.get("mismatches", []))
        units = tuple(self._unit(u, invariants.get(u["id"], [])) for u in report["units"])
        if len({u.unit for u in units}) != len(units):
            raise ReportError("report: a unit id appears twice")
        return HostReport(
            source=source,
            sha256=sha256,
            host=self.intern(hostname),
            run_id=run["id"],
            plan=self.intern((self.intern(run["profile"]["sha256"]), run["seed"])),
            ended_at=parse_time(run.get("ended_at")),
            verdict=report["verdict"],
            units=tuple(sorted(units, key=lambda u: u.unit)),
            machine_id=_machine_id(report["host"]),
            profile=self.intern(run["profile"]["name"]),
            blamed=_own_blame(report["findings"]),
            cpu_model=self._cpu_model(report["host"].get("cpu_model")),
            sentinel=read_section(report.get("sentinel")),
        )

    def _unit(self, unit: Unit, records: list[Mismatch]) -> UnitRecord:
        cols = unit["cases"]
        indices, digests, workloads = cols["index"], cols["digest"], cols["workload"]
        statuses: list[str] = list(cols["status"])
        if len(set(indices)) != len(indices):
            keep = _first_occurrences(indices)
            indices, digests, workloads = _pick(indices, keep), _pick(digests, keep), _pick(workloads, keep)
            statuses = _pick(statuses, keep)
        st = tuple(statuses)
        if "mismatch" in st or "error" in st:
            # Only clean outcomes vote: a mismatch is already an invariant finding, an error judged nothing.
            digests = [d if s == "ok" else None for d, s in zip(digests, st, strict=True)]
        intern = self.intern
        return UnitRecord(
            unit=intern(unit["id"]),
            cohort=intern(unit["cohort"]),
            verdict=unit["verdict"],
            reason=unit.get("reason"),
            indices=intern(tuple(indices)),
            digests=self._shared(digests),
            workloads=self._shared(workloads),
            throughput=self._throughput(unit),
            invariant=_invariant(unit, st, workloads, indices, records),
            retest=_retest_class(unit.get("retest")),
            calibration=self._calibration(unit.get("calibration")),
            efficiency=self._efficiency(unit),
            checked=self._checked(unit, "checked_ops", "op"),
            detection=self._checked(unit, "detection", "evidence"),
            part=describe(unit["kind"], unit.get("part") or {}) or None,
        )

    def _cpu_model(self, value: object) -> str | None:
        """host.cpu_model (not validated: nothing is judged by it), or None when not a non-empty string."""
        return self.intern(value[:MAX_CPU_MODEL_CHARS]) if isinstance(value, str) and value.strip() else None

    def _calibration(self, held: object) -> tuple[tuple[str, str, int, float], ...]:
        """The e_max gemm_fp used, per (dtype, checker, K); entries of the wrong shape are left out (the
        field is optional and no verdict rests on it)."""
        if not isinstance(held, list):
            return ()
        out = []
        for h in held:
            if not isinstance(h, dict):
                continue
            dtype, checker, k, e_max = (h.get(key) for key in ("dtype", "checker", "k", "e_max"))
            value = _finite(e_max)
            if isinstance(dtype, str) and isinstance(checker, str) and _is_int(k) and value is not None:
                out.append((self.intern(dtype[:40]), self.intern(checker[:40]), k, value))
        return self.intern(tuple(sorted(out)))

    def _shared(self, seq: list[_S]) -> tuple[_S, ...]:
        """The fleet's one copy of this sequence; its strings are shared too when it is new."""
        t = tuple(seq)
        if t in self.intern:  # the common case: a healthy unit, same outcome as many before it
            return self.intern(t)
        return self.intern(tuple(self.intern(x) for x in t))

    def _throughput(self, unit: Unit) -> tuple[tuple[str, float, str], ...]:
        """(workload, ops/s, ops unit) per workload; validate_report made each a finite number and a string."""
        out = [
            (self.intern(workload), float(rec["ops_per_s"]), self.intern(rec["ops_unit"]))
            for workload, rec in unit.get("throughput", {}).items()
        ]
        return tuple(sorted(out))

    def _checked(
        self, unit: Unit, key: Literal["checked_ops", "detection"], unit_key: Literal["op", "evidence"]
    ) -> tuple[tuple[str, float, str], ...]:
        """(workload, value, its op or evidence) of each workload's `checked` (validate_report: a number in
        range, or a null detection, which gives no row)."""
        out = []
        for workload, rec in (unit.get("checked") or {}).items():
            value = _checked_reading(key, rec[key])
            if value is not None:
                out.append((self.intern(workload), value, self.intern(rec[unit_key])))
        return tuple(sorted(out))

    def _efficiency(self, unit: Unit) -> tuple[tuple[str, float, str], ...]:
        """(workload, efficiency, "") where the report gives one (validate_report: a number or null)."""
        out = []
        for workload, rec in unit.get("throughput", {}).items():
            value = _finite(rec.get("efficiency"))
            if value is not None:
                out.append((self.intern(workload), value, ""))
        return tuple(sorted(out))


def _checked_reading(key: str, value: object) -> float | None:
    """A `checked` value as `compare` sums it: checked ops as a whole number (SQL sums them exactly as
    integers), a detection as it is; None when the report gives none."""
    x = _finite(value)
    return None if x is None else float(round(x)) if key == "checked_ops" else x


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: object) -> float | None:
    """`value` as a finite float, or None: not a number, a bool, NaN, infinite or too large for a float."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        as_float = float(value)
    except OverflowError:  # an integer beyond 1e308: JSON allows it
        return None
    return as_float if math.isfinite(as_float) else None


def _first_occurrences(indices: list[int]) -> list[int]:
    """The positions of the first record of each case index (a repeated index would vote twice)."""
    seen: set[int] = set()
    keep = []
    for i, idx in enumerate(indices):
        if idx not in seen:
            seen.add(idx)
            keep.append(i)
    return keep


def _pick(column: list[_S], keep: list[int]) -> list[_S]:
    return [column[i] for i in keep]


def _own_blame(findings: list[Finding]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(unit, kinds) of the report's own findings that name a unit failing (validate_report typed them)."""
    kinds: dict[str, set[str]] = {}
    for f in findings:
        if f["kind"] in CONVICTING_FINDINGS and f["unit"] is not None:
            kinds.setdefault(f["unit"], set()).add(f["kind"])
    return tuple(sorted((u, tuple(sorted(k))) for u, k in kinds.items()))


def _retest_class(retest: object) -> str | None:
    """A unit's `retest.classification`, or None when absent or not a known word (it is not validated)."""
    if not isinstance(retest, dict):
        return None
    value = retest.get("classification")
    return value if isinstance(value, str) and value in RETEST_CLASSES else None


def _machine_id(host: Host) -> str | None:
    """`host.machine_id`: absent or null is None (validate_report refused anything but a short hash)."""
    return host.get("machine_id")


def _invariant_records(mismatches: list[Mismatch]) -> dict[str, list[Mismatch]]:
    """The report's top-level invariant-failure records, by unit."""
    by_unit: dict[str, list[Mismatch]] = {}
    for rec in mismatches:
        by_unit.setdefault(rec["unit"], []).append(rec)
    return by_unit


def _invariant(
    unit: Unit,
    statuses: tuple[str, ...],
    workloads: list[str],
    indices: list[int],
    records: list[Mismatch],
) -> Invariant | None:
    """Summarise a unit's invariant failures, from its count, its case statuses and the mismatch records."""
    bad = [i for i, s in enumerate(statuses) if s == "mismatch"] if "mismatch" in statuses else []
    count = max(unit["mismatches"], len(bad), len(records))
    if count <= 0:
        return None
    cases = [indices[i] for i in bad] + [r["index"] for r in records]
    wls = {workloads[i] for i in bad} | {r["workload"] for r in records}
    checks = {r["check"] for r in records}
    return Invariant(count, min(cases) if cases else None, tuple(sorted(wls)), tuple(sorted(checks)))


def parse_time(text: object) -> float:
    """A report's `run.ended_at` -> POSIX seconds (`timefmt.parse_iso_utc`, with a report's error).

    Raises:
        ReportError: missing or not an ISO-8601 time.
    """
    if not isinstance(text, str):
        raise ReportError("report: run.ended_at is missing")
    try:
        return parse_iso_utc(text)
    except (ValueError, OverflowError):  # OverflowError: year 1 or 9999 moved out of range by its zone
        raise ReportError(f"report: run.ended_at {shown(text)} is not an ISO-8601 time") from None
