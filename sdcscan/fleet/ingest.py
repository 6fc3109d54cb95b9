"""`sdcscan ingest`: reports -> a Parquet dataset that `compare --from` (and Spark or Trino) reads.

For fleets that outgrow one machine: the reports are read once (in parallel, as `compare` reads
them), reduced to the same extract (`fleet.model.Extractor`), and written as tables of plain rows.
`compare --from DIR` then runs the steps over them (`fleet.steps`): DuckDB on one machine, or the same SQL
on Spark over the same files (docs/fleet_sql.md).

Layout of the dataset directory DIR:

    DIR/sdcscan-fleet.json                  marker: format and version (written first, once)
    DIR/TABLE/plan=PLAN/ended_on=DAY/part-INGEST-N.parquet
    DIR/skipped/part-INGEST-N.parquet       inputs an ingest did not use, with the reason

TABLE is `reports` (one row per report), `units` (per report and unit), `cases` (per report, unit and
case: the bulk), `throughput` (per report, unit, workload and measure), `calibrations` (per report,
unit and gemm_fp calibration key), `sentinel_sections` (per report with a kernel-log `sentinel`
section) and `sentinel_outliers` (per report and outlier core it names). The directories are Hive
partitions by plan (`SHA256-SEED`, the profile hash and the seed) and by the UTC day the run ended,
so a weekly ingest adds files beside the old ones and an engine can prune by day. The partition
values are only names: every column the SQL reads (`profile_sha256`, `seed`, ...) is in the files.

Ingesting appends; nothing is rewritten. Running ingest again on the same reports adds copies, which
`compare --from` drops as duplicates exactly as `compare` drops repeated files. Files are written
under hidden temporary names and renamed only when the whole ingest succeeded, `reports` last: a
report's row appears only after all its rows do, and an interrupted ingest leaves nothing a reader
sees (its hidden `.part-*.tmp` files may be deleted).

Reports whose text cannot be stored as UTF-8 (a lone surrogate escaped in the JSON) are skipped and
listed: Parquet strings are UTF-8. `compare` on the JSON files reads them. The text of a kernel-log
`sentinel` section is the exception: optional evidence, it keeps U+FFFD for a lone surrogate instead.

pyarrow is imported inside the functions that need it: importing this module costs nothing, and a
missing pyarrow is a one-line usage error (`require_fleet_extra`).
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import json
import math
import os
import re
import signal
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sdcscan.errors import ReportError, UsageError
from sdcscan.files import FILE_MODE, write_json_atomic
from sdcscan.fleet.case_rows import CaseRows
from sdcscan.fleet.inputs import expand_paths
from sdcscan.fleet.kernel_evidence import SentinelSection
from sdcscan.fleet.model import HostReport, Invariant, Skipped
from sdcscan.fleet.progress import WRITING, Counter, ProgressSink, no_progress
from sdcscan.fleet.reading import first_reasons, read_chunk, worker_count
from sdcscan.outcomes import printable

FORMAT = "sdcscan-fleet-parquet"
FORMAT_VERSION = 2  # 2: the sentinel tables (a version-1 dataset lacks its reports' kernel-log evidence)
MARKER = "sdcscan-fleet.json"
INSTALL_HINT = "pip install 'pyarrow>=15' 'duckdb>=1.0'"  # dependencies of sdcscan: a broken install
# Written in this order at commit: a `reports` row is what makes a report's other rows count.
TABLES = ("cases", "units", "throughput", "calibrations", "sentinel_sections", "sentinel_outliers", "reports")
SKIPPED_TABLE = "skipped"
CHUNK_FILES = 128  # reports one worker task reads and converts
IN_FLIGHT_PER_WORKER = 2  # tasks queued per worker: enough to keep it busy, few enough to bound memory
MAX_OPEN_FILES = 64  # Parquet files open at once; more partitions than this reopen new part files
COMPRESSION = "zstd"  # read by DuckDB, Spark (3.2+) and Trino
PARENT_POLL_S = 0.5
GC_THRESHOLD = 100_000  # allocations between a worker's collections of the youngest generation
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SURROGATE = re.compile("[\ud800-\udfff]")

# Columns of every table: (name, type). Types are Arrow's; in SQL: int64 BIGINT, float64 DOUBLE,
# string VARCHAR, bool BOOLEAN, list<string> ARRAY(VARCHAR). Kept as plain data so that importing
# this module needs no pyarrow, and docs/fleet_sql.md can be checked against it.
SCHEMA: dict[str, tuple[tuple[str, str], ...]] = {
    "reports": (
        ("report", "int64"),  # this ingest's id of the report: the key of every table
        ("source", "string"),  # the file it was read from
        ("sha256", "string"),  # of the file's (gunzipped) bytes
        ("hostname", "string"),
        ("machine_id", "string"),  # null when the report has none
        ("run_id", "string"),
        ("profile_name", "string"),
        ("profile_sha256", "string"),
        ("seed", "int64"),
        ("ended_at", "float64"),  # POSIX seconds, UTC
        ("verdict", "string"),
        ("units", "int64"),
        ("case_rows", "int64"),  # cases over all units (a duplicate with more cases is kept)
        ("tested_units", "int64"),  # units that left a digest or failed an invariant check
    ),
    "units": (
        ("report", "int64"),
        ("profile_sha256", "string"),
        ("seed", "int64"),
        ("comparison_group", "int64"),  # `comparison_group(profile_sha256, seed, cohort)`
        ("unit", "string"),
        ("cohort", "string"),
        ("verdict", "string"),
        ("reason", "string"),
        ("retest", "string"),  # the run's re-test classification, or null
        ("convicted", "bool"),  # the host's own run named it failing: it does not vote
        ("own_run_findings", "list<string>"),  # the finding kinds by which its run named it
        ("case_rows", "int64"),
        ("digests", "int64"),  # cases that left a digest to compare
        ("invariant_mismatches", "int64"),  # null when no invariant check failed
        ("invariant_first_case", "int64"),
        ("invariant_workloads", "list<string>"),
        ("invariant_checks", "list<string>"),
    ),
    "cases": (
        ("report", "int64"),
        ("profile_sha256", "string"),
        ("seed", "int64"),
        ("cohort", "string"),
        ("comparison_group", "int64"),  # the SQL groups and joins on this, never on the strings
        ("unit", "string"),
        ("case_index", "int64"),
        ("workload", "string"),
        ("digest", "string"),  # null: the case left no comparable digest
        ("digest_key", "int64"),  # `digest_key(digest)`: what the SQL votes with (integers are fast)
        ("voter", "bool"),  # false for units their own run convicted
    ),
    "throughput": (
        ("report", "int64"),
        ("profile_sha256", "string"),
        ("seed", "int64"),
        ("cohort", "string"),
        ("unit", "string"),
        ("workload", "string"),
        ("measure", "string"),  # `ops_per_s` (fleet.perf.MEASURES)
        ("reading", "float64"),
        ("reading_unit", "string"),
    ),
    "calibrations": (
        ("report", "int64"),
        ("profile_sha256", "string"),
        ("seed", "int64"),
        ("cohort", "string"),
        ("unit", "string"),
        ("dtype", "string"),
        ("checker", "string"),
        ("k", "string"),  # gemm_fp's K, in decimal: a report may hold any integer
        ("e_max", "float64"),
    ),
    # A report's kernel-log evidence, as `fleet.sentinel.read_section` keeps it (`compare --from` gives
    # the `sentinel` findings `compare` gives: `fleet.sentinel_steps`).
    "sentinel_sections": (
        ("report", "int64"),  # one row per report whose `sentinel` section is an object
        ("cpu_model", "string"),  # host.cpu_model as `compare` keeps it (groups hosts), or null
        ("since", "string"),  # the kernel-log window the section says it read, or null
        ("until", "string"),
    ),
    "sentinel_outliers": (
        ("report", "int64"),
        ("unit", "string"),  # `cpu:N`
        ("programs", "int64"),  # distinct programs that crashed on it; null: not a count in the report
        ("expected", "float64"),  # what its peers make likely, or null
        ("p_value", "float64"),  # or null
        ("examples", "list<string>"),  # a few program names
    ),
    SKIPPED_TABLE: (("path", "string"), ("reason", "string")),
}

Partition = str  # `plan=PLAN/ended_on=DAY`
UNPARTITIONED = "plan=all/ended_on=all"  # the one partition of the rows `compare FILES` converts


def require_fleet_extra() -> None:
    """Check that pyarrow and duckdb can be imported.

    Raises:
        UsageError: one of them is missing (exit 2), with the command that installs them.
    """
    try:
        for name in ("pyarrow", "pyarrow.parquet", "duckdb"):
            importlib.import_module(name)
    except ImportError as err:
        raise UsageError(
            f"comparing a fleet needs pyarrow and duckdb ({err.name or 'one'} is not installed): {INSTALL_HINT}"
        ) from None


def arrow() -> Any:
    """The pyarrow module (imported here, on first use, and typed Any: pyarrow ships no type hints)."""
    return importlib.import_module("pyarrow")


def arrow_schema(table: str | Sequence[tuple[str, str]]) -> Any:
    """The pyarrow schema of `table` (a key of SCHEMA), or of a list of (name, type) columns."""
    pa = arrow()

    types = {
        "int64": pa.int64(),
        "float64": pa.float64(),
        "string": pa.string(),
        "bool": pa.bool_(),
        "list<string>": pa.list_(pa.string()),
    }
    columns = SCHEMA[table] if isinstance(table, str) else table
    return pa.schema([(name, types[kind]) for name, kind in columns])


def partition_of(plan: tuple[str, int], ended_at: float) -> Partition:
    """The directory of a report's rows: `plan=SHA256-SEED/ended_on=YYYY-MM-DD`.

    A profile hash that is not 64 lower-case hex digits (a hand-made report) is named by its own
    hash instead: a partition name must never carry `/`, `=` or `..` from a file into a path.
    """
    sha, seed = plan
    name = sha if _HEX64.fullmatch(sha) else "h" + hashlib.sha256(sha.encode("utf-8", "replace")).hexdigest()
    try:
        day = datetime.fromtimestamp(ended_at, timezone.utc).date().isoformat()
    except (OverflowError, ValueError, OSError):
        day = "unknown"
    return f"plan={name}-{seed}/ended_on={day}"


def comparison_group(profile_sha256: str, seed: int, cohort: str) -> int:
    """The 63-bit key of a (plan, cohort): its units' digests are compared with each other only.

    An integer, so that grouping 10^9 case rows hashes 8 bytes, not a 64-character profile hash and a
    cohort name. `compare --from` refuses a dataset where two groups share a key.
    """
    text = f"{profile_sha256}\0{seed}\0{cohort}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") >> 1


def report_id(ingest: str, position: int) -> int:
    """A 63-bit id for the report at `position` of one ingest (`compare --from` refuses a collision)."""
    digest = hashlib.blake2b(f"{ingest}:{position}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


# ---------------------------------------------------------------------------------------------------
# Extracts -> rows.


@dataclass
class _Columns:
    """The rows of one partition, column by column, for every partitioned table."""

    data: dict[str, dict[str, list[object]]] = field(
        default_factory=lambda: {t: {c: [] for c, _ in SCHEMA[t]} for t in TABLES if t != "cases"}
    )
    cases: CaseRows = field(default_factory=CaseRows)  # the bulk, built with numpy

    def add(self, r: HostReport, rid: int) -> None:
        """Append the rows of one report."""
        sha, seed = r.plan
        tested = 0
        case_rows = 0
        groups: dict[str, int] = {}
        for u in r.units:
            own = r.own_blame(u)
            n = len(u.indices)
            group = groups.get(u.cohort)
            if group is None:
                group = groups[u.cohort] = comparison_group(sha, seed, u.cohort)
            case_rows += n
            digests = n - u.digests.count(None)
            if digests or u.invariant is not None:
                tested += 1
            self.cases.add(
                (rid, sha, seed, u.cohort, group, u.unit, not own), u.indices, u.workloads, u.digests
            )
            head = (
                rid,
                sha,
                seed,
                group,
                u.unit,
                u.cohort,
                u.verdict,
                u.reason,
                u.retest,
                bool(own),
                list(own),
            )
            _append(self.data["units"], (*head, n, digests, *_invariant_columns(u.invariant)))
            for measure, readings in (("ops_per_s", u.throughput), ("efficiency", u.efficiency)):
                for workload, value, value_unit in readings:
                    if math.isfinite(value):
                        row = (rid, sha, seed, u.cohort, u.unit, workload, measure, value, value_unit)
                        _append(self.data["throughput"], row)
            for dtype, checker, k, e_max in u.calibration:
                held = (rid, sha, seed, u.cohort, u.unit, dtype, checker, str(k), e_max)
                _append(self.data["calibrations"], held)
        if r.sentinel is not None:
            self._sentinel(rid, r.cpu_model, r.sentinel)
        ids = (rid, r.source, r.sha256, r.host, r.machine_id, r.run_id, r.profile, sha, seed, r.ended_at)
        _append(self.data["reports"], (*ids, r.verdict, len(r.units), case_rows, tested))

    def _sentinel(self, rid: int, cpu_model: str | None, section: SentinelSection) -> None:
        """The rows of a report's sentinel section, whose values `read_section` already vetted.

        Its text is optional evidence: a lone surrogate in it becomes U+FFFD rather than refusing the
        whole report (and its votes) as other text that is not Unicode does.
        """
        row = (rid, _unicode(cpu_model), _unicode(section.since), _unicode(section.until))
        _append(self.data["sentinel_sections"], row)
        for c in section.outliers:
            held = (rid, c.unit, c.programs, c.expected, c.p_value, [_unicode(e) for e in c.examples])
            _append(self.data["sentinel_outliers"], held)

    def tables(self, without: Sequence[str] = ()) -> dict[str, Any]:
        """Arrow tables of the rows, `cases` without the columns `without` names (raises
        UnicodeEncodeError for a string that is not Unicode)."""
        pa = arrow()
        out = {t: pa.Table.from_pydict(self.data[t], schema=arrow_schema(t)) for t in TABLES if t != "cases"}
        out["cases"] = self.cases.table(pa, [f for f in arrow_schema("cases") if f.name not in without])
        return out


def _value_type(kind: Any) -> Any:
    """The type of the values of a (possibly dictionary-encoded) Arrow type."""
    return kind.value_type if arrow().types.is_dictionary(kind) else kind


def _append(cols: dict[str, list[object]], row: tuple[object, ...]) -> None:
    for values, value in zip(cols.values(), row, strict=True):
        values.append(value)


def _unicode(text: str | None) -> str | None:
    """`text` with lone surrogates (which UTF-8 cannot hold) replaced by U+FFFD."""
    return None if text is None else _SURROGATE.sub("\ufffd", text)


def _invariant_columns(inv: Invariant | None) -> tuple[int | None, int | None, list[str], list[str]]:
    if inv is None:
        return (None, None, [], [])
    return (inv.mismatches, inv.first_case, list(inv.workloads), list(inv.checks))


@dataclass
class ChunkResult:
    """What one task made of its files: Arrow tables per partition, reports converted, inputs skipped."""

    tables: list[tuple[Partition, dict[str, Any]]]
    reports: int
    skipped: list[Skipped]
    files: int  # files read (converted or skipped)

    @property
    def case_rows(self) -> int:
        return sum(made["cases"].num_rows for _, made in self.tables)


def convert_chunk(
    paths: list[str], ingest: str, first: int, without: Sequence[str] = (), partitioned: bool = True
) -> ChunkResult:
    """Read `paths` (`fleet.reading.read_chunk`) and turn the reports into Arrow tables by partition.

    Args:
        paths: report files, in order.
        ingest: this ingest's id (report ids derive from it and the file's position).
        first: position of `paths[0]` among all files of the ingest.
        without: columns of `cases` left out.
        partitioned: by plan and day (`partition_of`), as a dataset is laid out; else all in UNPARTITIONED
            (`compare FILES`: no engine reads the partitions, and one table per chunk is quicker to make).
    """
    items = read_chunk(paths)
    by_partition: dict[Partition, list[tuple[HostReport, int]]] = {}
    skipped: list[Skipped] = []
    for k, item in enumerate(items):
        if isinstance(item, Skipped):
            skipped.append(item)
        else:
            part = partition_of(item.plan, item.ended_at) if partitioned else UNPARTITIONED
            by_partition.setdefault(part, []).append((item, report_id(ingest, first + k)))
    tables: list[tuple[Partition, dict[str, Any]]] = []
    converted = 0
    for part, reports in sorted(by_partition.items()):
        made, refused = report_tables(reports, without)
        skipped += refused
        if made is not None:
            tables.append((part, made))
            converted += len(reports) - len(refused)
    return ChunkResult(tables, converted, skipped, len(paths))


def report_tables(
    reports: list[tuple[HostReport, int]], without: Sequence[str] = ()
) -> tuple[dict[str, Any] | None, list[Skipped]]:
    """Arrow tables of some reports (`cases` without the columns `without` names); a report whose text
    is not Unicode is refused, alone."""
    cols = _Columns()
    for r, rid in reports:
        cols.add(r, rid)
    try:
        return cols.tables(without), []
    except UnicodeEncodeError:
        pass  # rare (a hostile file): find the report(s) one by one, keep the others
    cols, refused = _Columns(), []
    for r, rid in reports:
        alone = _Columns()
        alone.add(r, rid)
        try:
            alone.tables()
        except UnicodeEncodeError:
            refused.append(Skipped(r.source, "holds text that is not valid Unicode (a lone surrogate)"))
            continue
        cols.add(r, rid)
    if len(refused) == len(reports):
        return None, refused
    return cols.tables(without), refused


# ---------------------------------------------------------------------------------------------------
# Writing: partitioned files, renamed into place at commit.


class DatasetWriter:
    """Writes Arrow tables into a dataset directory; nothing is visible until `commit`.

    One Parquet file per (table, partition) is open at a time, at most MAX_OPEN_FILES in all; the least
    recently used is closed when another is needed (a later write to it starts a new part file).

    Args:
        root: the dataset directory (`prepare_dataset` made it one).
        ingest: this ingest's id, in every file name (ingests never overwrite each other's files).
        without: columns of `cases` its tables leave out (`compare`'s temporary dataset).
    """

    def __init__(self, root: Path, ingest: str, *, without: Sequence[str] = ()) -> None:
        self.root, self.ingest = root, ingest
        self.without = tuple(without)  # columns of `cases` left out (a private dataset only DuckDB reads)
        self._open: OrderedDict[tuple[str, Partition], Any] = OrderedDict()
        self._written: list[tuple[str, Path, Path]] = []  # (table, temporary, final)
        self.rows: dict[str, int] = dict.fromkeys(TABLES, 0)

    def write(self, table: str, partition: Partition, data: Any) -> None:
        """Append an Arrow table of `table`'s schema to the partition's open file.

        String columns may be dictionary-encoded (they are written as such, which is faster); a file
        keeps the schema of its first table, later ones are cast to it.
        """
        if data.num_rows == 0:
            return
        key = (table, partition)
        writer = self._open.pop(key, None)
        if writer is None:
            writer = self._new_file(table, self.root / table / partition, data.schema)
        self._open[key] = writer  # most recently used last
        writer.write_table(data if data.schema == writer.schema else data.cast(writer.schema))
        self.rows[table] += data.num_rows

    def write_skipped(self, skipped: Sequence[Skipped]) -> None:
        """The inputs this ingest did not use, in one unpartitioned file."""
        if not skipped:
            return
        data = arrow().Table.from_pydict(
            {"path": [s.path for s in skipped], "reason": [s.reason for s in skipped]},
            schema=arrow_schema(SKIPPED_TABLE),
        )
        writer = self._new_file(SKIPPED_TABLE, self.root / SKIPPED_TABLE, data.schema)
        writer.write_table(data)
        writer.close()

    def _new_file(self, table: str, directory: Path, schema: Any) -> Any:
        """A new (temporary) part file of `table` in `directory`.

        Raises:
            ValueError: `schema` is not the table's (up to dictionary-encoded strings): a bug.
        """
        pq = importlib.import_module("pyarrow.parquet")
        plain = [
            (f.name, f.type) for f in arrow_schema(table) if table != "cases" or f.name not in self.without
        ]
        if [(f.name, _value_type(f.type)) for f in schema] != plain:
            raise ValueError(f"not the schema of table {table}: {schema}")
        while len(self._open) >= MAX_OPEN_FILES:
            self._open.popitem(last=False)[1].close()
        directory.mkdir(parents=True, exist_ok=True)
        name = f"part-{self.ingest}-{len(self._written):06d}.parquet"
        tmp, final = directory / f".{name}.tmp", directory / name
        self._written.append((table, tmp, final))
        return pq.ParquetWriter(str(tmp), schema, compression=COMPRESSION)

    def files(self) -> int:
        """Files written so far."""
        return len(self._written)

    def commit(self) -> None:
        """Close every file and rename them into place, `reports` last."""
        self._close_all()
        order = {t: k for k, t in enumerate((SKIPPED_TABLE, *TABLES))}
        for _, tmp, final in sorted(self._written, key=lambda w: order[w[0]]):
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, final)
        self._written.clear()

    def abort(self) -> None:
        """Close and delete every file written: the dataset is as it was."""
        self._close_all()
        for _, tmp, _ in self._written:
            tmp.unlink(missing_ok=True)
        self._written.clear()

    def _close_all(self) -> None:
        while self._open:
            self._open.popitem(last=False)[1].close()


def prepare_dataset(path: str | os.PathLike[str]) -> Path:
    """Make `path` a dataset directory to append to: create it, or check the one there.

    Raises:
        UsageError: it is not a directory, is a non-empty directory that is not a dataset, holds a
            dataset of another format version, or cannot be created.
    """
    root = Path(path)
    marker = root / MARKER
    try:
        if root.exists() and not root.is_dir():
            raise UsageError(f"--to {printable(str(root))}: not a directory")
        if root.is_dir() and not marker.exists() and any(root.iterdir()):
            raise UsageError(
                f"--to {printable(str(root))}: a directory that is not an sdcscan dataset "
                f"(no {MARKER}); name a new or empty directory"
            )
        root.mkdir(parents=True, exist_ok=True)
        if marker.exists():
            check_marker(root)
        else:
            write_json_atomic(marker, _marker(), indent=1)
    except OSError as err:
        raise UsageError(f"--to {printable(str(root))}: cannot use it: {err.strerror or err}") from None
    return root


def _marker() -> dict[str, object]:
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "tables": {t: [f"{c} {k}" for c, k in cols] for t, cols in SCHEMA.items()},
        "docs": "docs/fleet_sql.md of sdcscan",
    }


def check_marker(root: Path) -> None:
    """Check that `root` is a dataset this sdcscan reads.

    Raises:
        UsageError: no marker, or a marker of another format or version.
    """
    marker = root / MARKER
    shown_root = printable(str(root))
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(
            f"{shown_root}: not an sdcscan dataset (no {MARKER}); write one with `sdcscan ingest REPORTS --to DIR`"
        ) from None
    except (OSError, ValueError) as err:
        raise UsageError(f"{shown_root}: unreadable {MARKER}: {err}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != FORMAT_VERSION:
        raise UsageError(
            f"{shown_root}: {MARKER} is not format {FORMAT} version {FORMAT_VERSION} (this sdcscan's); "
            "ingest the reports into a new directory"
        )


# ---------------------------------------------------------------------------------------------------
# The ingest.


@dataclass(frozen=True)
class IngestResult:
    """What an ingest wrote."""

    directory: str
    reports: int
    rows: dict[str, int]
    files: int
    skipped: tuple[Skipped, ...]

    def to_dict(self) -> dict[str, object]:
        """The `ingest --json` document."""
        return {
            "directory": self.directory,
            "reports": self.reports,
            "rows": self.rows,
            "files": self.files,
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
        }


def ingest(
    paths: Iterable[str],
    to: str | os.PathLike[str],
    *,
    workers: int | None = None,
    progress: ProgressSink = no_progress,
) -> IngestResult:
    """Read reports (files, directories, globs, as `compare` reads them) and append them to a dataset.

    Args:
        paths: what the person named.
        to: the dataset directory; created when missing.
        workers: processes reading reports; None: one per CPU when there are many files.
        progress: told after each chunk of files and when the dataset is written.

    Raises:
        UsageError: pyarrow or duckdb missing, `to` unusable (both before anything is read), or no
            usable report among the inputs (nothing is written).
        ReportError: a reading process died (out of memory, killed).
    """
    require_fleet_extra()
    root = prepare_dataset(to)
    files, skipped = expand_paths(paths)
    if not files:
        raise UsageError(f"no report file to ingest: {first_reasons(skipped) or 'no input'}")
    ingest_id = uuid.uuid4().hex[:16]
    writer = DatasetWriter(root, ingest_id)
    counter = Counter(len(files), progress)
    try:
        for result in convert_all(
            files, ingest_id, worker_count(workers, len(files), files_per_worker=CHUNK_FILES)
        ):
            counter.read(result.files, result.reports, result.case_rows)
            skipped += result.skipped
            for part, tables in result.tables:
                for name in TABLES:
                    writer.write(name, part, tables[name])
        skipped.sort(key=lambda s: (s.path, s.reason))
        reports = counter.reports
        if not reports:
            raise UsageError(f"no usable report to ingest: {first_reasons(skipped)}")
        counter.phase(WRITING)
        writer.write_skipped(skipped)
        written = writer.files()
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    return IngestResult(str(root), reports, dict(writer.rows), written, tuple(skipped))


def convert_all(
    files: list[str], ingest: str, workers: int, without: Sequence[str] = (), partitioned: bool = True
) -> Iterator[ChunkResult]:
    """Each chunk's result (`convert_chunk`) in file order; at most a few chunks in flight per worker
    (bounded memory)."""
    chunks = [(files[i : i + CHUNK_FILES], i) for i in range(0, len(files), CHUNK_FILES)]
    if workers <= 1:
        for paths, first in chunks:
            yield convert_chunk(paths, ingest, first, without, partitioned)
        return
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_worker_setup)
    pending: deque[Future[ChunkResult]] = deque()
    todo = iter(chunks)
    try:
        for paths, first in todo:
            pending.append(pool.submit(convert_chunk, paths, ingest, first, without, partitioned))
            if len(pending) >= workers * IN_FLIGHT_PER_WORKER:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    except BrokenProcessPool:
        raise ReportError("a process reading reports died (out of memory? try --jobs 1)") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _worker_setup() -> None:
    """Ctrl-C is the parent's to handle; a worker whose parent was killed outright ends itself.

    A worker allocates parsed JSON trees, which hold no reference cycles: reference counting frees them,
    and the cyclic collector, run every 700 allocations by default, only walks the chunk's live objects
    again and again (about 8% of a worker's time, `scripts/bench_compare.py` fleets). It runs rarely here.
    """
    gc.set_threshold(GC_THRESHOLD)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)  # nothing to clean up: the parent deletes the temporary files it owns
