"""A fleet dataset on disk: the directory `sdcscan ingest` writes and `compare --from` reads.

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

Ingesting appends; nothing is rewritten. Files are written under hidden temporary names and renamed
only when the whole ingest succeeded, `reports` last: a report's row appears only after all its rows
do, and an interrupted ingest leaves nothing a reader sees (its hidden `.part-*.tmp` files may be
deleted).
"""

from __future__ import annotations

import importlib
import json
import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sdcscan.errors import UsageError
from sdcscan.files import FILE_MODE, write_json_atomic
from sdcscan.fleet.model import Skipped
from sdcscan.fleet.tables import (
    FORMAT,
    FORMAT_VERSION,
    MARKER,
    SCHEMA,
    SKIPPED_TABLE,
    TABLES,
    Partition,
    arrow,
    arrow_schema,
)
from sdcscan.outcomes import printable

MAX_OPEN_FILES = 64  # Parquet files open at once; more partitions than this reopen new part files
COMPRESSION = "zstd"  # read by DuckDB, Spark (3.2+) and Trino

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


def _value_type(kind: Any) -> Any:
    """The type of the values of a (possibly dictionary-encoded) Arrow type."""
    return kind.value_type if arrow().types.is_dictionary(kind) else kind
