"""Where the fleet rules run: the tables `sdcscan ingest` writes, every step of `fleet.sql_steps` run over
them, and the few ways the assembler (`fleet.decide`) asks for rows.

`Rows` is that interface. DuckDB (here) implements it in-process, over a dataset directory
(`duckdb_dataset`) or over Arrow tables in memory (`duckdb_tables`, what `compare FILES` and the
distributed run's cluster report use); Spark implements it in `fleet.engine_spark`. The SQL is the
same text everywhere, so every engine gives the same rows and the same document.

pyarrow and duckdb are imported inside the functions that need them: `--help` and the per-host `run`
never load them.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from sdcscan.errors import ReportError, UsageError
from sdcscan.fleet.case_rows import digest_key
from sdcscan.fleet.model import Skipped
from sdcscan.fleet.sql_steps import GOLDEN_COLUMNS, STEPS
from sdcscan.fleet.tables import MARKER, SCHEMA, SKIPPED_TABLE, TABLES, arrow, arrow_schema, comparison_group
from sdcscan.outcomes import printable

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection

    from sdcscan.fleet.golden import GoldenIndex

DEFAULT_MEMORY_LIMIT = "1GB"  # DuckDB's own buffers; beyond this its aggregates spill to disk
PROFILE_ENV = "SDCSCAN_WAREHOUSE_PROFILE"  # set: each step's time on stderr
INT64 = (-(2**63), 2**63 - 1)

# A row of the `golden` table: (comparison_group, case_index, digest, digest_key, workload).
GoldenRow = tuple[int, int, str, int, str]


class Rows(Protocol):
    """What the assembler asks an engine, after every step has run.

    Rows come typed by the SQL (BIGINT as int, DOUBLE as float, arrays as lists), as plain tuples.
    """

    def rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """All rows of a query (`?` marks the parameters)."""
        ...

    def batches(self, sql: str, params: Sequence[object] = ()) -> Iterator[tuple[Any, ...]]:
        """A query's rows, a batch at a time (a million rows never sit in one list)."""
        ...

    def column(self, sql: str, params: Sequence[object] = ()) -> npt.NDArray[np.float64]:
        """The first column (DOUBLE) of a query's rows, as one array (millions of values, compactly)."""
        ...

    def wanted(self, ids: Iterable[int]) -> AbstractContextManager[str]:
        """A temporary table `(report)` holding `ids`, to join with; yields its name."""
        ...

    def table(
        self, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[object]]
    ) -> AbstractContextManager[str]:
        """A temporary table of rows from Python (`columns`: (name, Arrow type)); yields its name."""
        ...

    def kept(self, sql: str) -> AbstractContextManager[str]:
        """A temporary table of a query's rows, computed once for the queries that read it; yields its
        name."""
        ...


@dataclass(frozen=True)
class Engine:
    """How DuckDB runs: threads (None: one per CPU; `compare --jobs` sets it) and its memory limit
    (beyond it, it spills to a temporary directory)."""

    threads: int | None = None
    memory_limit: str = DEFAULT_MEMORY_LIMIT


def golden_rows(golden: GoldenIndex | None) -> list[GoldenRow]:
    """The golden as rows of the `golden` table (GOLDEN_COLUMNS), for any engine.

    Entries no report can match (a seed or case index beyond 64 bits) are left out.
    """
    rows: list[GoldenRow] = []
    for ((sha, seed), cohort), entry in sorted((golden or {}).items()):
        if INT64[0] <= seed <= INT64[1]:
            key = comparison_group(sha, seed, cohort)
            rows += [
                (key, i, d, digest_key(d), w)
                for i, (d, w) in sorted(entry.items())
                if INT64[0] <= i <= INT64[1]
            ]
    return rows


def rows_table(columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[object]]) -> Any:
    """Rows from Python as a pyarrow table of `columns`."""
    data = {c: [r[k] for r in rows] for k, (c, _) in enumerate(columns)}
    return arrow().Table.from_pydict(data, schema=arrow_schema(columns))


def golden_table(golden: GoldenIndex | None) -> Any:
    """`golden_rows` as a pyarrow table (write it with `pyarrow.parquet.write_table` for another engine)."""
    return rows_table(GOLDEN_COLUMNS, golden_rows(golden))


def skipped_table(skipped: Iterable[Skipped]) -> Any:
    """Inputs refused before the engine, as a `skipped` table."""
    return rows_table(SCHEMA[SKIPPED_TABLE], [(s.path, s.reason) for s in skipped])


def dataset_files(root: Path, table: str) -> list[str]:
    """A dataset's Parquet files of one table, largest first.

    DuckDB estimates a scan's rows from its first file, and a tiny first file (one host's report on a
    day of its own) made it build hash tables on 10^8 case rows.
    """
    pattern = "*.parquet" if table == SKIPPED_TABLE else "*/*/*.parquet"
    found = [(p.stat().st_size, str(p)) for p in (root / table).glob(pattern)]
    return [name for _, name in sorted(found, key=lambda f: (-f[0], f[1]))]


@contextmanager
def duckdb_dataset(root: Path, golden: GoldenIndex | None, engine: Engine) -> Iterator[DuckDB]:
    """DuckDB over a dataset directory, with the golden registered and every step run.

    Raises:
        ReportError: DuckDB could not read the files or run a step (exit 3).
    """

    def register(db: DuckDB) -> None:
        for table in (*TABLES, SKIPPED_TABLE):
            files = dataset_files(root, table)
            if files:
                db.con.read_parquet(files, hive_partitioning=False).create_view(table)
            else:
                db.con.register(table, rows_table(SCHEMA[table], []))

    with _duckdb(register, golden, engine, f"{printable(str(root))}: cannot read the dataset") as db:
        yield db


@contextmanager
def duckdb_tables(
    tables: Mapping[str, Any], skipped: Iterable[Skipped], golden: GoldenIndex | None, engine: Engine
) -> Iterator[DuckDB]:
    """DuckDB over Arrow tables in memory (`convert.report_tables`), with every step run."""

    def register(db: DuckDB) -> None:
        for table in TABLES:
            db.con.register(table, tables[table] if table in tables else rows_table(SCHEMA[table], []))
        db.con.register(SKIPPED_TABLE, skipped_table(skipped))

    with _duckdb(register, golden, engine, "cannot compare the reports") as db:
        yield db


@contextmanager
def _duckdb(
    register: Callable[[DuckDB], None], golden: GoldenIndex | None, engine: Engine, what: str
) -> Iterator[DuckDB]:
    import duckdb

    with tempfile.TemporaryDirectory(prefix="sdcscan-duckdb-") as spill:
        con = duckdb.connect(":memory:")
        try:
            db = DuckDB(con)
            try:
                db.configure(spill, engine)
                register(db)
                con.register("golden", golden_table(golden))
                db.run_steps()
            except duckdb.Error as err:
                raise ReportError(f"{what}: {err}") from None
            yield db
        finally:
            con.close()


@dataclass
class DuckDB:
    """A DuckDB connection whose steps have run: the `Rows` the assembler reads."""

    con: DuckDBPyConnection
    _wanted: int = 0

    def configure(self, spill: str, engine: Engine) -> None:
        con = self.con
        con.execute(f"SET temp_directory = '{_literal(spill)}'")
        con.execute(f"SET memory_limit = '{_literal(engine.memory_limit)}'")
        con.execute("SET enable_progress_bar = false")  # it writes to stdout, where the JSON goes
        con.execute("SET preserve_insertion_order = false")  # every result is sorted where it matters
        if engine.threads:
            con.execute(f"SET threads = {int(engine.threads)}")

    def run_steps(self) -> None:
        profile = bool(os.environ.get(PROFILE_ENV))
        for name, sql, materialize in STEPS:
            started = time.perf_counter()
            self.con.execute(f"CREATE TEMP {'TABLE' if materialize else 'VIEW'} {name} AS {sql}")
            if profile:
                print(f"step {name}: {time.perf_counter() - started:.2f} s", file=sys.stderr)

    def rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        return list(self.con.execute(sql, list(params)).fetchall())

    def batches(
        self, sql: str, params: Sequence[object] = (), size: int = 65536
    ) -> Iterator[tuple[Any, ...]]:
        result = self.con.execute(sql, list(params))
        while rows := result.fetchmany(size):
            yield from rows

    def column(self, sql: str, params: Sequence[object] = ()) -> npt.NDArray[np.float64]:
        values = next(iter(self.con.execute(sql, list(params)).fetchnumpy().values()))
        return np.asarray(values, dtype=np.float64)

    def wanted(self, ids: Iterable[int]) -> AbstractContextManager[str]:
        return self.table((("report", "int64"),), [(i,) for i in sorted(set(ids))])

    @contextmanager
    def table(self, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[object]]) -> Iterator[str]:
        self._wanted += 1
        name = f"python_rows_{self._wanted}"
        self.con.register(name, rows_table(columns, rows))
        try:
            yield name
        finally:
            self.con.unregister(name)

    @contextmanager
    def kept(self, sql: str) -> Iterator[str]:
        self._wanted += 1
        name = f"kept_rows_{self._wanted}"
        self.con.execute(f"CREATE TEMP TABLE {name} AS {sql}")
        try:
            yield name
        finally:
            self.con.execute(f"DROP TABLE {name}")


def _literal(text: str) -> str:
    """A string inside a single-quoted SQL literal."""
    return text.replace("'", "''")


def require_reports(db: Rows) -> None:
    """Raises UsageError (exit 2) when the engine holds no usable report, naming the first skipped."""
    if db.rows("SELECT COUNT(*) FROM current_reports")[0][0]:
        return
    rows = db.rows("SELECT path, reason FROM skipped ORDER BY path, reason LIMIT 3")
    first = "; ".join(printable(f"{p}: {r}") for p, r in rows) or f"no report was ingested ({MARKER} only)"
    raise UsageError(f"no usable report to compare in the dataset: {first}")
