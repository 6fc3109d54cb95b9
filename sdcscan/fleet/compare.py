"""Compare many host reports: divergent units, partitions, undecided hosts, invariant failures, slow
units, coverage.

Every comparison runs the same way, whatever the input:

    reports -> the tables `sdcscan ingest` writes -> the SQL steps (`fleet.sql_steps`) in an engine
            -> the one assembler (`fleet.decide`) -> `FleetSummary`

`compare FILES` converts the files in worker processes and keeps the tables in memory, or, when they
outgrow SPILL_BYTES, in a temporary dataset; `compare --from DIR` reads a dataset; `summarize` takes
extracted reports (the distributed run's cluster report, goldens, tests). DuckDB runs the steps
in-process (`fleet.engine`); `--engine spark` runs them on Spark (`fleet.engine_spark`). The document
is the same in every case: the rules exist once.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdcscan.errors import UsageError
from sdcscan.fleet.convert import convert_all, report_tables
from sdcscan.fleet.dataset import DatasetWriter, check_marker
from sdcscan.fleet.decide import decide
from sdcscan.fleet.engine import DuckDB, Engine, duckdb_dataset, duckdb_tables, require_reports
from sdcscan.fleet.inputs import expand_paths
from sdcscan.fleet.model import HostReport, Skipped
from sdcscan.fleet.progress import JUDGING, Counter, ProgressSink, no_progress
from sdcscan.fleet.reading import first_reasons, worker_count
from sdcscan.fleet.summary import FleetSummary, Options
from sdcscan.fleet.tables import TABLES, arrow, report_id, require_fleet_extra

# Arrow bytes of converted reports kept in memory (about 44 per case row: 10,000 hosts of 8 units and
# 100 cases are 350 MB); beyond this `compare FILES` writes them to a temporary dataset and DuckDB reads
# them from disk (spilling its own work beyond its memory limit).
SPILL_BYTES = 512 * 2**20
# Columns of `cases` no step reads (a dataset keeps them for other engines' own queries): not held.
UNREAD_CASE_COLUMNS = ("profile_sha256", "seed", "cohort")
CHUNK_FILES = 128  # report files one worker converts per task
IN_MEMORY = "memory"  # the ingest id of tables that never leave this process


def summarize(
    reports: Sequence[HostReport],
    *,
    options: Options | None = None,
    skipped: Iterable[Skipped] = (),
    engine: Engine | None = None,
) -> FleetSummary:
    """Compare extracted reports (`fleet.model.Extractor`), any order: the same summary as `compare`.

    Args:
        reports: extracted reports.
        options: thresholds, hosts list, reference time, golden, fail_on_undecided.
        skipped: inputs already refused by the reader, listed in the summary.
        engine: DuckDB's threads and memory limit.

    Raises:
        ValueError: `options.hosts` is given without `options.now`.
    """
    opts = _checked(options)
    with judged_reports(reports, skipped=skipped, options=opts, engine=engine) as db:
        return decide(db, opts)


@contextmanager
def judged_reports(
    reports: Sequence[HostReport],
    *,
    skipped: Iterable[Skipped] = (),
    options: Options | None = None,
    engine: Engine | None = None,
) -> Iterator[DuckDB]:
    """DuckDB over extracted reports, every step run: for callers that read rows of their own (the
    references a golden records, the cases a distributed run disputes)."""
    require_fleet_extra()
    opts = options or Options()
    numbered = [(r, report_id(IN_MEMORY, k)) for k, r in enumerate(reports)]
    tables, refused = report_tables(numbered, without=UNREAD_CASE_COLUMNS)
    with duckdb_tables(tables or {}, [*skipped, *refused], opts.golden, engine or Engine()) as db:
        yield db


@dataclass(frozen=True)
class Source:
    """What `sdcscan compare` judges: report files (`paths`), or a dataset `sdcscan ingest` wrote
    (`dataset`), judged by DuckDB in this process or on Spark (`engine`)."""

    paths: tuple[str, ...] = ()
    dataset: str | None = None
    engine: str = "duckdb"  # or "spark": a dataset only
    spark_master: str | None = None
    spark_remote: str | None = None

    def check(self) -> None:
        """Raises: UsageError for a combination that cannot be judged (exit 2, before any work)."""
        if bool(self.paths) == bool(self.dataset):
            raise UsageError(
                "give report PATHS, or --from DIR (a dataset written by `sdcscan ingest`), not both"
            )
        if self.engine == "spark" and not self.dataset:
            raise UsageError(
                "--engine spark judges a dataset: ingest the reports, then compare --from DIR --engine spark"
            )
        if (self.spark_master or self.spark_remote) and self.engine != "spark":
            raise UsageError("--spark-master and --spark-remote go with --engine spark")
        if self.spark_master and self.spark_remote:
            raise UsageError("give --spark-master or --spark-remote, not both")


def compare(
    source: Source,
    options: Options | None = None,
    *,
    jobs: int | None = None,
    progress: ProgressSink = no_progress,
) -> FleetSummary:
    """`sdcscan compare`: the one entry point, whatever the source and the engine (see `compare_files`,
    `compare_from` and `engine_spark.compare_from_spark` for what each raises)."""
    source.check()
    if source.dataset is not None and source.engine == "spark":
        from sdcscan.fleet.engine_spark import compare_from_spark  # pyspark: an optional extra

        return compare_from_spark(
            source.dataset, options, master=source.spark_master, remote=source.spark_remote
        )
    engine = Engine(threads=jobs)
    if source.dataset is not None:
        return compare_from(source.dataset, options, engine, progress)
    return compare_files(source.paths, options, jobs=jobs, engine=engine, progress=progress)


def compare_files(
    paths: Iterable[str],
    options: Options | None = None,
    *,
    jobs: int | None = None,
    engine: Engine | None = None,
    progress: ProgressSink = no_progress,
) -> FleetSummary:
    """`sdcscan compare PATHS`: read report files (files, directories, globs) and compare them.

    Args:
        paths: what the person named.
        options: as for `summarize`.
        jobs: processes converting reports and DuckDB's threads; None: one per CPU when there are many files.
        engine: DuckDB's memory limit (its threads come from `jobs` when it gives none).
        progress: told after each chunk of files read, and when judging starts.

    Raises:
        UsageError: no usable report among the inputs (exit 2).
        ReportError: a reading process died, or DuckDB failed (exit 3).
    """
    opts = _checked(options)
    require_fleet_extra()
    files, skipped = expand_paths(paths)
    settings = engine or Engine(threads=jobs)
    workers = worker_count(jobs, len(files), files_per_worker=CHUNK_FILES)
    counter = Counter(len(files), progress)
    with tempfile.TemporaryDirectory(prefix="sdcscan-compare-") as spill:
        held = _Held(Path(spill))
        for result in convert_all(files, IN_MEMORY, workers, UNREAD_CASE_COLUMNS, partitioned=False):
            skipped += result.skipped
            held.add(result.reports, result.tables)
            counter.read(result.files, result.reports, result.case_rows)
        if not held.reports:
            raise UsageError(f"no usable report to compare: {first_reasons(skipped) or 'no input'}")
        counter.phase(JUDGING)
        if held.writer is not None:
            held.writer.write_skipped(skipped)
            held.writer.commit()
            with duckdb_dataset(held.root, opts.golden, settings) as db:
                return decide(db, opts)
        with duckdb_tables(held.tables(), skipped, opts.golden, settings) as db:
            return decide(db, opts)


def compare_from(
    directory: str | os.PathLike[str],
    options: Options | None = None,
    engine: Engine | None = None,
    progress: ProgressSink = no_progress,
) -> FleetSummary:
    """`sdcscan compare --from DIR`: compare the reports of a dataset written by `sdcscan ingest`
    (`progress` is told when judging starts: DuckDB reads the files as it runs the steps).

    Raises:
        UsageError: pyarrow or duckdb missing, not a dataset, or a dataset with no report (exit 2).
        ReportError: the dataset is damaged (unreadable files, two reports or groups with one key): exit 3.
        ValueError: `options.hosts` is given without `options.now`.
    """
    opts = _checked(options)
    require_fleet_extra()
    root = Path(directory)
    check_marker(root)
    Counter(0, progress).phase(JUDGING)
    with duckdb_dataset(root, opts.golden, engine or Engine()) as db:
        require_reports(db)
        return decide(db, opts)


def _checked(options: Options | None) -> Options:
    opts = options or Options()
    if opts.hosts is not None and opts.now is None:
        raise ValueError("options.now is required with options.hosts")
    return opts


class _Held:
    """Converted reports: Arrow tables in memory, moved to a temporary dataset past SPILL_BYTES."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.reports = 0
        self.bytes = 0
        self.parts: dict[str, list[Any]] = {t: [] for t in TABLES}
        self.writer: DatasetWriter | None = None

    def add(self, reports: int, tables: list[tuple[str, dict[str, Any]]]) -> None:
        self.reports += reports
        for part, made in tables:
            if self.writer is not None:
                self._write(part, made)
                continue
            for name in TABLES:
                self.parts[name].append((part, made[name]))
                self.bytes += made[name].nbytes
        if self.writer is None and self.bytes > SPILL_BYTES:
            self.writer = DatasetWriter(self.root, IN_MEMORY, without=UNREAD_CASE_COLUMNS)
            held, self.parts = self.parts, {t: [] for t in TABLES}
            for name, pieces in held.items():
                for part, table in pieces:
                    self.writer.write(name, part, table)

    def _write(self, part: str, made: dict[str, Any]) -> None:
        assert self.writer is not None
        for name in TABLES:
            self.writer.write(name, part, made[name])

    def tables(self) -> dict[str, Any]:
        pa = arrow()
        return {
            name: pa.concat_tables([t for _, t in pieces]) for name, pieces in self.parts.items() if pieces
        }


__all__ = [
    "FleetSummary",
    "Options",
    "compare_files",
    "compare_from",
    "judged_reports",
    "summarize",
]
