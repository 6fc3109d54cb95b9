"""Reports -> the fleet's tables (`fleet.tables`), chunk by chunk, in worker processes.

Each worker reads a chunk of files (`fleet.reading.read_chunk`: the same extract `compare` always
used) and returns Arrow tables, by partition for a dataset or in one piece for `compare FILES`.
Reports whose text cannot be stored as UTF-8 (a lone surrogate escaped in the JSON) are skipped and
listed: Arrow strings are UTF-8. The text of a kernel-log `sentinel` section is the exception:
optional evidence, it keeps U+FFFD for a lone surrogate instead.
"""

from __future__ import annotations

import gc
import math
import os
import re
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from sdcscan.errors import ReportError
from sdcscan.fleet.case_rows import CaseRows
from sdcscan.fleet.kernel_evidence import SentinelSection
from sdcscan.fleet.model import HostReport, Invariant, Skipped
from sdcscan.fleet.reading import read_chunk
from sdcscan.fleet.tables import (
    CHECKED_SPLIT,
    SCHEMA,
    TABLES,
    UNPARTITIONED,
    Partition,
    arrow,
    arrow_schema,
    comparison_group,
    partition_of,
    report_id,
)

CHUNK_FILES = 128  # reports one worker task reads and converts
IN_FLIGHT_PER_WORKER = 2  # tasks queued per worker: enough to keep it busy, few enough to bound memory
PARENT_POLL_S = 0.5
GC_THRESHOLD = 100_000  # allocations between a worker's collections of the youngest generation
_SURROGATE = re.compile("[\ud800-\udfff]")

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
            _append(self.data["units"], (*head, n, digests, *_invariant_columns(u.invariant), u.part))
            # Speeds (fleet.perf.MEASURES) and what the checks covered (sdcscan.proof): `slow_samples`
            # keeps only the speeds.
            for measure, readings in (
                ("ops_per_s", u.throughput),
                ("efficiency", u.efficiency),
                *checked_measures(u.checked),
                ("detection", u.detection),
            ):
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


def checked_measures(
    checked: Sequence[tuple[str, float, str]],
) -> list[tuple[str, list[tuple[str, float, str]]]]:
    """A unit's checked ops as two measures of whole numbers below 2^53, `checked_ops_high` (of 2^32) and
    `checked_ops_low`: every engine sums their integer casts exactly, in any order (`fleet.sql_steps.CHECKED_OPS`),
    where a float sum would depend on the order of the rows."""
    parts = [(w, divmod(int(n), CHECKED_SPLIT), op) for w, n, op in checked]
    return [
        ("checked_ops_high", [(w, float(high), op) for w, (high, _), op in parts]),
        ("checked_ops_low", [(w, float(low), op) for w, (_, low), op in parts]),
    ]


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
