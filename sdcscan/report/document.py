"""The report, declared once: what `sdcscan run` writes and every reader of reports may rely on.

Each object of the JSON document is a `TypedDict` here. From these declarations come:
- the static types of the writer (`sdcscan.judgement.assemble`) and of every reader (`compare`'s
  extract, the cluster merger, the console, JUnit, Prometheus, the history), checked by mypy;
- the validator every reader gets its report through (`sdcscan.report.validation`);
- the shipped JSON Schema `report.schema.json` (`sdcscan.report.schema`; a test fails when the file
  differs from what it generates).

A field's annotation may carry markers:
- `Doc`: its description in the schema.
- `Range`, `Pattern`: bounds the validator enforces and the schema states.
- `WRITTEN`: optional for readers (older or foreign reports may lack it) but always written by
  `sdcscan run`, so the schema lists it as required.
- `UNCHECKED`: no reader relies on its shape (those that read it guard every value themselves), so
  the validator accepts any value there; the schema still describes what the writer puts there.
Keys not declared are free: a report may carry more (new optional keys may appear within a version).
Keys here are a contract; bump SCHEMA_VERSION on an incompatible change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, Literal

from typing_extensions import NotRequired, TypedDict

from sdcscan.outcomes import StatusWord

__all__ = [
    "SCHEMA_PATH",
    "SCHEMA_VERSION",
    "UNCHECKED",
    "WRITTEN",
    "Calibration",
    "Cases",
    "Checked",
    "Dispute",
    "Distributed",
    "Doc",
    "Finding",
    "Host",
    "MetricStats",
    "Metrics",
    "Mismatch",
    "Outlier",
    "Pattern",
    "Range",
    "RankEntry",
    "Report",
    "Retest",
    "RetestCase",
    "RetestClass",
    "RetestEvidence",
    "Run",
    "Sentinel",
    "StatusWord",
    "Throughput",
    "Unit",
    "UnitKind",
    "VerdictWord",
]  # fmt: skip

SCHEMA_VERSION: Final = 1
SCHEMA_PATH = Path(__file__).with_name("report.schema.json")  # generated from this declaration


@dataclass(frozen=True)
class Doc:
    """A field's description in the schema."""

    text: str


@dataclass(frozen=True)
class Range:
    """Bounds of a number: `low <= x <= high`, `x > above`."""

    low: int | float | None = None
    high: int | float | None = None
    above: int | float | None = None


@dataclass(frozen=True)
class Pattern:
    """A regular expression a string matches in full (the schema's `pattern`)."""

    regex: str


@dataclass(frozen=True)
class _Marker:
    name: str


WRITTEN = _Marker("written")  # optional for readers, always written by sdcscan run
UNCHECKED = _Marker("unchecked")  # no reader relies on its shape: the validator accepts any value

INT64_MAX = 2**63 - 1  # what the history database (SQLite) can store
NonNegative = Annotated[int, Range(low=0)]
# One unit's checked ops in one run at most: 1e17 a second for 10,000 s (compare sums them exactly).
MAX_CHECKED_OPS = 1e21
Seconds = Annotated[float, Range(low=0)]

# The words, as in sdcscan.outcomes (tests/test_report_document.py keeps them equal).
VerdictWord = Literal["pass", "fail", "invalid", "interrupted"]
RetestClass = Literal["persistent", "transient", "case", "untested"]
RetestEvidence = Literal["invariant", "consensus"]
UnitKind = Literal["cpu", "cuda"]


class Tool(TypedDict):
    """The program that wrote the report."""

    version: str
    name: NotRequired[Annotated[Literal["sdcscan"], WRITTEN]]


class Profile(TypedDict):
    """The profile the run followed, by name and by the hash of its resolved content."""

    name: str
    sha256: Annotated[str, Pattern("[0-9a-f]{64}")]
    path: NotRequired[str | None]


class RankEntry(TypedDict):
    """One rank of a distributed run as the cluster report lists it."""

    rank: NonNegative
    host: str
    local_rank: NonNegative
    unit: Annotated[str, Pattern("(cpu|cuda):[0-9]+")]
    device: str | None
    report: str | None
    verdict: VerdictWord


class Distributed(TypedDict):
    """Distributed runs only. A rank's report: where the rank sat (rank, local_rank, master, hosts,
    injections, ...). The cluster report (`sdcscan.launch.cluster_report`): the world, and each rank's unit,
    report and verdict in `ranks`."""

    world_size: Annotated[int, Range(low=1)]
    backend: NotRequired[str]
    rank: NotRequired[NonNegative]
    ranks: NotRequired[list[RankEntry]]
    local_rank: NotRequired[NonNegative]
    local_world_size: NotRequired[Annotated[int, Range(low=1)]]
    master: NotRequired[str]
    run_id: NotRequired[str]
    hostname: NotRequired[str]
    hosts: NotRequired[list[str]]
    injections: NotRequired[list[dict[str, object]]]
    timeout_s: NotRequired[float]
    agreements: NotRequired[NonNegative]
    agree_s: NotRequired[Seconds]
    exchanges: NotRequired[NonNegative]
    exchange_s: NotRequired[Seconds]
    cases_compared: NotRequired[NonNegative]
    cases_disagreeing: NotRequired[NonNegative]
    disagreements: NotRequired[list[dict[str, object]]]
    bandwidth: NotRequired[list[dict[str, object]]]
    lockstep: NotRequired[list[dict[str, object]]]
    broken: NotRequired[str | None]
    missing: NotRequired[list[int]]


class Pacing(TypedDict):
    """Whether the host's load let a background run screen, and after how long a wait."""

    screen: bool
    forced: bool
    waited_s: Seconds
    unscreened_s: NotRequired[float | None]
    load_per_cpu: NotRequired[float | None]
    threshold: NotRequired[float | None]


class Background(TypedDict, total=False):
    """Background (Ripple) mode only: the priority the run's parent was granted, and the host pacing
    (whether the host's load let it screen, after how long a wait)."""

    parent_priority: dict[str, object]
    pacing: Pacing


class Run(TypedDict):
    """What ran: the plan (profile, seed, workloads), the budget and the times."""

    id: str
    profile: Profile
    seed: Annotated[int, Range(low=0, high=INT64_MAX)]
    budget_s: Annotated[float, Range(above=0)]
    duration_s: Seconds
    cases_per_unit: NotRequired[
        Annotated[
            int,
            Range(low=1),
            Doc(
                "`--cases`: each unit stopped after this many cases of the plan, or sooner at the budget's end."
            ),
        ]
    ]
    seed_source: NotRequired[Annotated[Literal["cli", "profile", "week"], WRITTEN, UNCHECKED]]
    started_at: NotRequired[Annotated[str | None, WRITTEN]]
    ended_at: NotRequired[Annotated[str | None, WRITTEN]]
    argv: NotRequired[Annotated[list[str], WRITTEN]]
    workloads: NotRequired[Annotated[list[str], WRITTEN]]
    injections: NotRequired[Annotated[list[dict[str, object]], WRITTEN, UNCHECKED]]
    journal: NotRequired[str | None]
    journal_lost: NotRequired[
        Annotated[
            str,
            Doc(
                "Why the journal does not hold every finished case (a full disk, a removed directory), "
                "when it does not; `journal` is null then."
            ),
        ]
    ]
    interrupted_by: NotRequired[str | None]
    distributed: NotRequired[Annotated[Distributed, UNCHECKED]]
    background: NotRequired[Annotated[Background, UNCHECKED]]


class Host(TypedDict):
    """The machine the run screened."""

    hostname: str
    hosts: NotRequired[
        Annotated[
            list[str],
            UNCHECKED,
            Doc(
                "Cluster report only: every host of the world, in rank order; hostname joins them with commas."
            ),
        ]
    ]
    machine_id: NotRequired[
        Annotated[
            str | None,
            Pattern("[0-9A-Za-z]{1,64}"),
            Doc(
                "A short hash of the machine's identity (/etc/machine-id), never the raw id; null or absent "
                "when unreadable. compare keeps machines that share a hostname apart by it."
            ),
        ]
    ]
    cpu_model: NotRequired[Annotated[str, UNCHECKED, Doc("The CPU's model name, as the kernel gives it.")]]
    logical_cpus: NotRequired[Annotated[int | None, UNCHECKED]]
    memory_bytes: NotRequired[Annotated[int | None, UNCHECKED]]
    os: NotRequired[Annotated[str, UNCHECKED]]
    kernel: NotRequired[Annotated[str, UNCHECKED]]
    machine: NotRequired[Annotated[str, UNCHECKED]]


class Throughput(TypedDict):
    """One workload's rate on a unit, its plain-op peak and where its case time went."""

    ops_per_s: float
    ops_unit: str
    cases: float
    seconds: NotRequired[Annotated[float, WRITTEN]]
    peak_ops_per_s: NotRequired[
        Annotated[
            float | None,
            Doc(
                "The unit's measured rate of the plain op(s) this workload runs, at its shapes, in ops_unit "
                "per second, for the cases that ran (each at its own dtype and shape); null when it could "
                "not be measured."
            ),
        ]
    ]
    efficiency: NotRequired[
        Annotated[float | None, Doc("ops_per_s / peak_ops_per_s; null when the peak is unknown.")]
    ]
    shares: NotRequired[
        Annotated[
            dict[str, float],
            Doc("Fractions of the summed case seconds spent in each timed phase of the workload."),
        ]
    ]


_CHECKED_OPS = "Operations whose results the checks verified or a digest covered, in cases whose checks ran."
_EVIDENCE = "invariant: each result was verified; digest: it proves something only once compared with peers."
_DETECTION = "d: the self-test's floor for the hardware fault models; null where none applies (digests)."
_RATE_BOUND = "95% upper bound on silent corruptions per op: 3 / (checked_ops * detection), if it passed."


class Checked(TypedDict):
    """What a workload's checks covered on a unit, and the rate bound a pass proves (`sdcscan.proof`)."""

    checked_ops: Annotated[float, Range(low=0, high=MAX_CHECKED_OPS), Doc(_CHECKED_OPS)]
    op: Annotated[str, Doc("What one checked operation is, e.g. multiply-add or pooled element.")]
    evidence: Annotated[Literal["invariant", "digest"], Doc(_EVIDENCE)]
    detection: Annotated[float | None, Range(above=0, high=1), Doc(_DETECTION)]
    sdc_rate_bound: Annotated[float | None, Range(above=0), Doc(_RATE_BOUND)]


class Calibration(TypedDict):
    """The e_max gemm_fp checked with for one (dtype, checker, K), and where it came from."""

    dtype: str
    checker: str
    k: Annotated[int, Range(low=1)]
    e_max: float
    source: str


class RetestCase(TypedDict):
    """One failing case re-run on its unit and on a peer of its cohort."""

    index: NonNegative
    workload: str
    evidence: RetestEvidence
    classification: RetestClass
    reruns: NonNegative
    reproduced: NonNegative
    peers: list[str]
    peer_failures: NonNegative


class Retest(TypedDict):
    """How the unit's failing cases behaved when re-run on it and on a peer of its cohort.
    classification: the most telling one among its cases (persistent > transient > case > untested),
    null when no case failed."""

    classification: RetestClass | None
    counts: dict[str, NonNegative]
    cases: list[RetestCase]


class UnitPacing(TypedDict, total=False):
    """Background mode only: the priority the unit's worker was granted, whether it paced itself to its
    core's or GPU's idle time, and how long and how often it waited."""

    gate: bool
    waited_s: Seconds
    waits: NonNegative
    priority: dict[str, object]


class Cases(TypedDict):
    """Per-case records, column-wise: the i-th entries of each list form one record (all of one length)."""

    index: list[Annotated[int, Range(low=0, high=INT64_MAX)]]
    workload: list[str]
    digest: list[str | None]
    status: list[StatusWord]
    seconds: list[Seconds]


class Part(TypedDict, total=False):
    """The physical part behind a unit, for its replacement: each field where the host could read it."""

    socket: Annotated[NonNegative, Doc("A CPU's package (physical_package_id).")]
    core: Annotated[NonNegative, Doc("A CPU's physical core within its package (core_id).")]
    smt_siblings: Annotated[list[NonNegative], Doc("The logical CPUs sharing that physical core.")]
    microcode: Annotated[str, Doc("The CPU's microcode revision, as the kernel gives it (0x2b000590).")]
    ppin: Annotated[str, Doc("The package's Protected Processor Inventory Number (root only).")]
    uuid: Annotated[str, Doc("A GPU's UUID (NVML).")]
    serial: Annotated[str, Doc("A GPU's board serial number (NVML).")]
    vbios: Annotated[str, Doc("A GPU's VBIOS version (NVML).")]
    board_part: Annotated[str, Doc("A GPU's board part number (NVML).")]
    pci: Annotated[str, Doc("A GPU's PCI bus id.")]


class Unit(TypedDict):
    """One CPU core or GPU: its verdict, why, and every case it ran."""

    id: Annotated[
        str,
        Pattern("(rank[0-9]+/)?(cpu|cuda):[0-9]+"),
        Doc("kind:N; in a distributed run's cluster report rank{R}/kind:N (unit ids repeat across hosts)."),
    ]
    kind: UnitKind
    cohort: str
    verdict: VerdictWord
    reason: str | None
    cases_run: NonNegative
    workloads: list[str]
    mismatches: NonNegative
    cases: Cases
    model: NotRequired[Annotated[str, WRITTEN]]
    part: NotRequired[Annotated[Part, Doc("The physical part to replace when the unit fails.")]]
    throughput: NotRequired[Annotated[dict[str, Throughput], WRITTEN]]
    checked: NotRequired[
        Annotated[
            dict[str, Checked],
            Doc("Per workload: the operations its checks covered and the rate bound a pass proves."),
        ]
    ]
    first_bad_case: NotRequired[int | None]
    notes: NotRequired[Annotated[list[str], WRITTEN]]
    rank: NotRequired[
        Annotated[NonNegative, UNCHECKED, Doc("Cluster report only: the rank that tested the unit.")]
    ]
    host: NotRequired[Annotated[str, UNCHECKED, Doc("Cluster report only: the rank's host.")]]
    local_rank: NotRequired[
        Annotated[NonNegative, UNCHECKED, Doc("Cluster report only: the rank's place on its host.")]
    ]
    device: NotRequired[
        Annotated[
            str | None, UNCHECKED, Doc("Cluster report only: the GPU's UUID or PCI bus id; null on a CPU.")
        ]
    ]
    pci: NotRequired[
        Annotated[
            str, UNCHECKED, Doc("A GPU's PCI bus id (0000:3b:00.0), as NVML and the kernel log name it.")
        ]
    ]
    pacing: NotRequired[Annotated[UnitPacing, UNCHECKED]]
    calibration: NotRequired[
        Annotated[
            list[Calibration],
            UNCHECKED,
            Doc(
                "The e_max gemm_fp checked with, per (dtype, checker, K), and where it came from; peers of a cohort must agree."
            ),
        ]
    ]
    retest: NotRequired[Annotated[Retest, UNCHECKED]]


class Mismatch(TypedDict):
    """One check that fired on one case: where, what was expected, what came."""

    unit: str
    index: int
    workload: str
    check: str
    where: str
    expected: str
    actual: str
    mask: NotRequired[Annotated[str | None, WRITTEN]]


class Dispute(TypedDict):
    """A case whose digests differ within a cohort: each unit's digest and the majority, if any."""

    workload: str
    digests: dict[str, str | None]
    index: NotRequired[Annotated[int, WRITTEN]]
    cohort: NotRequired[Annotated[str, WRITTEN]]
    majority: NotRequired[Annotated[str | None, WRITTEN]]


class CaseError(TypedDict):
    """A case whose workload raised (the first 100)."""

    unit: str
    index: int
    workload: str
    error: str | None


class CaseStats(TypedDict):
    """A unit's gauge over the samples taken while it ran a case."""

    mean: float
    max: float
    samples: int


class MetricStats(TypedDict, total=False):
    """One metric over the run: its reduced `value` (by `reduce`: mean, max, min or last), the first and
    last readings; a counter's `delta` (Prometheus exports it)."""

    delta: float | None
    value: Annotated[float | None, UNCHECKED]
    reduce: Annotated[str, UNCHECKED]
    before: Annotated[float | None, UNCHECKED]
    after: Annotated[float | None, UNCHECKED]
    series: Annotated[
        dict[str, object],
        UNCHECKED,
        Doc("Gauges only: `points` over the run, one every `every_s` seconds, each reduced like `value`."),
    ]
    in_cases: Annotated[
        CaseStats,
        UNCHECKED,
        Doc(
            "A unit's utilisation, SM clock and power over the samples taken while it ran a case (start-up, "
            "re-run gaps and waits left out): their mean, max and count."
        ),
    ]


Metrics = dict[str, MetricStats | None]


class Telemetry(TypedDict, total=False):
    """What the host's and the units' sensors said during the run (scope -> metric -> stats), with
    how often they were read and which sources answered."""

    host: Metrics | None
    units: dict[str, Metrics | None] | None
    hosts: Annotated[
        dict[str, Metrics | None],
        UNCHECKED,
        Doc(
            "Cluster report only: each host's metrics (from its first rank: its ranks share the host's counters)."
        ),
    ]
    interval_s: Annotated[float, UNCHECKED]
    samples: Annotated[int, UNCHECKED]
    started_at: Annotated[str | None, UNCHECKED]
    ended_at: Annotated[str | None, UNCHECKED]
    sources: Annotated[dict[str, object], UNCHECKED]
    notes: Annotated[list[str], UNCHECKED]


class Finding(TypedDict):
    """One thing the run found, in words: its kind, the unit it names (if any), what to do next."""

    kind: str
    unit: str | None
    message: str
    next: NotRequired[str | None]


class Outlier(TypedDict):
    """A core far more programs crashed on than its peers make likely."""

    unit: str
    programs: int
    expected: float
    p_value: float
    peers: NotRequired[int]
    events: NotRequired[int]
    examples: NotRequired[list[str]]


class Sentinel(TypedDict):
    """The kernel's own log of the run's window (sdcscan sentinel): events per unit, cores far more
    programs crashed on than their peers make likely. Evidence beside the tests; it never changes the
    verdict."""

    since: str
    until: str
    sources: list[str]
    notes: list[str]
    units: dict[str, dict[str, object]]
    outliers: list[Outlier]
    stats: NotRequired[dict[str, NonNegative]]
    cpus: NotRequired[Annotated[int, Range(low=1)]]
    host_counts: NotRequired[dict[str, NonNegative]]


class Report(TypedDict):
    """One run of `sdcscan run` on one host. Keys are stable within a version; new optional keys may appear."""

    schema_version: Literal[1]
    tool: Tool
    verdict: VerdictWord
    run: Run
    host: Host
    units: list[Unit]
    findings: list[Finding]
    exit_code: NotRequired[Annotated[int, WRITTEN]]
    software: NotRequired[Annotated[dict[str, object], WRITTEN, UNCHECKED]]
    cohorts: NotRequired[Annotated[dict[str, dict[str, object]], WRITTEN, UNCHECKED]]
    mismatches: NotRequired[Annotated[list[Mismatch], WRITTEN]]
    disputes: NotRequired[list[Dispute]]
    errors: NotRequired[Annotated[list[CaseError], UNCHECKED]]
    telemetry: NotRequired[Telemetry]
    sentinel: NotRequired[Annotated[Sentinel, UNCHECKED]]


def build_report(
    *,
    tool: Tool,
    verdict: VerdictWord,
    exit_code: int,
    run: Run,
    host: Host,
    software: dict[str, object],
    cohorts: dict[str, dict[str, object]],
    units: list[Unit],
    mismatches: list[Mismatch],
    disputes: list[Dispute],
    errors: list[CaseError],
    telemetry: Telemetry,
    findings: list[Finding],
) -> Report:
    """The one constructor of every report sdcscan writes: a host's (`judgement.assemble`) and a
    distributed run's cluster report (`launch.cluster_report`). Every top-level key it writes is a
    required argument here, so a builder that forgets one is a type error; `sentinel`, the kernel-log
    evidence, is added afterwards where a log was read."""
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": tool,
        "verdict": verdict,
        "exit_code": exit_code,
        "run": run,
        "host": host,
        "software": software,
        "cohorts": cohorts,
        "units": units,
        "mismatches": mismatches,
        "disputes": disputes,
        "errors": errors,
        "telemetry": telemetry,
        "findings": findings,
    }
