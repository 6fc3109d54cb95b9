"""`sdcscan ingest`: reports -> a Parquet dataset that `compare --from` (and Spark) reads.

For fleets that outgrow one machine: the reports are read once (in parallel, as `compare` reads
them, `fleet.convert`), and written as the fleet's tables (`fleet.tables`) in a dataset
(`fleet.dataset`, which describes the layout). `compare --from DIR` then runs the steps over them
(`fleet.sql_steps`): DuckDB on one machine, or the same SQL on Spark over the same files
(docs/fleet_sql.md). Running ingest again on the same reports adds copies, which `compare --from`
drops as duplicates exactly as `compare` drops repeated files.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from sdcscan.errors import UsageError
from sdcscan.fleet.convert import CHUNK_FILES, convert_all
from sdcscan.fleet.dataset import DatasetWriter, prepare_dataset
from sdcscan.fleet.inputs import expand_paths
from sdcscan.fleet.model import Skipped
from sdcscan.fleet.progress import WRITING, Counter, ProgressSink, no_progress
from sdcscan.fleet.reading import first_reasons, worker_count
from sdcscan.fleet.tables import (
    TABLES,
    require_fleet_extra,
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
