"""Spark as the engine of `compare --from DIR --engine spark`: the dataset `sdcscan ingest` writes, read
by Spark, every step of `fleet.sql_steps` run as a temporary view, and the `Rows` the assembler reads.

The steps are the text DuckDB runs (`fleet.engine`), so the document is the one DuckDB gives, byte for
byte, and so are the assembler's queries. A fleet that outgrows one machine runs on a cluster (`master`) or a Spark Connect server (`remote`),
reading the dataset where it lies (`s3a://`, `hdfs://`: any location Spark reads).

pyspark is imported inside the functions that need it: importing this module costs nothing, and a
missing pyspark is a usage error that names the command installing it.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from sdcscan.errors import ReportError, UsageError
from sdcscan.files import default_state_dir, make_state_dir
from sdcscan.fleet.dataset import check_marker
from sdcscan.fleet.decide import decide
from sdcscan.fleet.engine import PROFILE_ENV, Rows, dataset_files, golden_rows, require_reports
from sdcscan.fleet.sql_steps import GOLDEN_COLUMNS, STEPS
from sdcscan.fleet.summary import FleetSummary, Options
from sdcscan.fleet.tables import SCHEMA, SKIPPED_TABLE, TABLES
from sdcscan.outcomes import printable

if TYPE_CHECKING:
    from sdcscan.fleet.golden import GoldenIndex

Errors = tuple[type[BaseException], ...]  # what Spark raises (`spark_errors`)
INSTALL_HINT = "pip install 'sdcscan[spark]'"
SPARK_TYPES = {
    "int64": "BIGINT",
    "float64": "DOUBLE",
    "string": "STRING",
    "bool": "BOOLEAN",
    "list<string>": "ARRAY<STRING>",
}
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
MIN_JAVA = 17  # pyspark 4's JVM side
JAVA_HINT = "install a JRE (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
JAVA_VERSION_S = 30.0
SPARK_START_TIMEOUT_ENV = "SDCSCAN_SPARK_START_TIMEOUT_S"
DEFAULT_START_TIMEOUT_S = 120.0  # a local session starts in 5-15 s on a 2-core machine
SPARK_STEP_TIMEOUT_ENV = "SDCSCAN_SPARK_STEP_TIMEOUT_S"
# One step or query: seconds each on a fleet of thousands of hosts on 2 cores (docs/fleet_sql.md); a
# cluster that stalls (a lost executor, a dead storage mount) would hold `compare` forever.
DEFAULT_STEP_TIMEOUT_S = 1800.0
# pyspark logs each failed query, its stack as JSON, on stderr: the ReportError says it once.
_QUERY_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def is_url(root: str) -> bool:
    """Whether `root` names a location by its scheme (s3a://, hdfs://, file://): Spark lists it."""
    return bool(_URL.match(root))


def ddl(columns: Sequence[tuple[str, str]]) -> str:
    """A schema in Spark's DDL (`report BIGINT, ...`) from SCHEMA's Arrow type names."""
    return ", ".join(f"`{c}` {SPARK_TYPES[t]}" for c, t in columns)


def spark_session_class() -> Any:
    """pyspark's SparkSession class.

    Raises:
        UsageError: pyspark is not installed (exit 2), with the command that installs it.
    """
    try:
        importlib.import_module("pyspark")  # first: a `pyspark.sql` already loaded must not hide its absence
        return importlib.import_module("pyspark.sql").SparkSession
    except ImportError as err:
        raise UsageError(
            f"--engine spark needs pyspark ({err.name or 'it'} is not installed): {INSTALL_HINT}"
        ) from None


def spark_errors() -> Errors:
    """pyspark's errors, and Py4J's where the JVM failed outside a query (Spark Connect has no Py4J)."""
    errors: list[type[BaseException]] = [importlib.import_module("pyspark.errors").PySparkException]
    with suppress(ImportError):
        errors.append(importlib.import_module("py4j.protocol").Py4JError)
    return tuple(errors)


@contextmanager
def spark_dataset(
    root: str, golden: GoldenIndex | None, *, master: str | None = None, remote: str | None = None
) -> Iterator[Rows]:
    """Spark over a dataset directory (or URL), with the golden registered and every step run.

    Args:
        root: a local directory, or a URL Spark reads (`s3a://bucket/fleet`).
        golden: the golden to judge by, or None.
        master: where a session started here runs (default `local[*]`). A session this process already
            runs is used instead, through a new session of it (its own views, the same cluster).
        remote: a Spark Connect URL (`sc://host:15002`).

    Raises:
        UsageError: pyspark (with `remote`: Spark Connect's client) is not installed (exit 2).
        ReportError: Spark could not read the dataset or run a step (exit 3).
    """
    session_class, errors = spark_session_class(), spark_errors()
    what = f"{printable(root)}: Spark cannot read the dataset"
    with _failing(errors, what):
        spark, created = _session(session_class, master, remote, errors)
    views: list[str] = []
    try:
        with _quiet_query_logs():
            with _failing(errors, what):
                _register(spark, root, golden, views, errors)
                _run_steps(spark, views, errors, what)
            yield SparkRows(spark, errors)
    finally:
        if created:  # a session of this compare only (local): nothing else runs on it
            spark.stop()
        else:  # dropping a view uncaches it: the cache is the cluster's, and outlives this session
            for name in reversed(views):
                with suppress(*errors):
                    spark.catalog.dropTempView(name)


def _session(session_class: Any, master: str | None, remote: str | None, errors: Errors) -> tuple[Any, bool]:
    """(the session, whether this call started it: only then is it stopped at the end). A session this
    process already runs (this thread's, else the default one) is used through a new session of it."""
    if remote is not None:
        try:
            spark, created = session_class.builder.remote(remote).getOrCreate(), False
        except ImportError as err:  # a package of Spark Connect's client (grpcio, pandas) is missing
            raise UsageError(
                f"{remote}: Spark Connect's client needs: {err} (pip install 'pyspark[connect]')"
            ) from None
    else:
        try:
            spark, created = session_class.active().newSession(), False
        except errors:  # NO_ACTIVE_OR_DEFAULT_SESSION
            check_java()
            builder = session_class.builder.master(master or "local[*]").appName("sdcscan compare")
            builder = builder.config("spark.ui.showConsoleProgress", "false")  # stdout: the JSON
            log_config = _jvm_log_config()
            if log_config is not None:  # the JVM's log to a file: stderr carries sdcscan's lines
                builder = builder.config(
                    "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log_config}"
                )
            spark = _started(builder, start_timeout_s())
            spark.sparkContext.setLogLevel("ERROR")
            created = True
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    return spark, created


def start_timeout_s() -> float:
    """Seconds a local Spark session may take to start: SPARK_START_TIMEOUT_ENV, else the default."""
    return _seconds(SPARK_START_TIMEOUT_ENV, DEFAULT_START_TIMEOUT_S)


def step_timeout_s() -> float:
    """Seconds one step or query may take: SPARK_STEP_TIMEOUT_ENV, else the default."""
    return _seconds(SPARK_STEP_TIMEOUT_ENV, DEFAULT_STEP_TIMEOUT_S)


def _seconds(name: str, default: float) -> float:
    """A positive number of seconds from the environment variable `name`, else `default`.

    Raises:
        UsageError: the variable is set to anything else (exit 2), naming it.
    """
    text = os.environ.get(name, "")
    try:
        value = float(text) if text else default
    except ValueError:
        raise UsageError(f"{name}={printable(text)}: not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise UsageError(f"{name}={printable(text)}: must be a number of seconds above 0")
    return value


def check_java() -> None:
    """A local Spark session needs a JVM: Java 17 or newer, at JAVA_HOME or on PATH.

    Raises:
        UsageError: none found, or one too old (exit 2, before anything starts), saying which.
    """
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        where = f"JAVA_HOME={printable(home)} has no bin/java" if home else "no java on PATH"
        raise UsageError(f"--engine spark needs Java {MIN_JAVA} or newer ({where}): {JAVA_HINT}")
    try:
        said = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=JAVA_VERSION_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UsageError(
            f"--engine spark: {printable(java)} -version did not answer ({err}): {JAVA_HINT}"
        ) from None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', said.stderr + said.stdout)
    if found is None:
        return  # an unfamiliar JVM: let Spark judge it
    major = int(found.group(2)) if found.group(1) == "1" else int(found.group(1))  # "1.8.0" is Java 8
    if major < MIN_JAVA:
        raise UsageError(
            f"--engine spark needs Java {MIN_JAVA} or newer; {printable(java)} is Java {major}: {JAVA_HINT}"
        )


def _jvm_log_config() -> str | None:
    """A log4j2 configuration that sends the driver JVM's log (warnings and errors, such as the stack
    traces a local Spark prints while it stops) to `spark/jvm.log` in the state directory; None where
    that cannot be written (the JVM then logs to stderr as Spark does by default)."""
    directory = default_state_dir() / "spark"
    config = directory / "log4j2.properties"
    text = "\n".join(
        [
            "rootLogger.level = warn",
            "rootLogger.appenderRef.file.ref = file",
            "appender.file.type = File",
            "appender.file.name = file",
            f"appender.file.fileName = {directory / 'jvm.log'}",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = %d{ISO8601} %p %c: %m%n",
            "",
        ]
    )
    try:
        make_state_dir(directory)
        if not config.exists() or config.read_text() != text:
            config.write_text(text)
    except OSError:
        return None
    return config.as_uri()


def _started(builder: Any, timeout_s: float) -> Any:
    """builder.getOrCreate(), bounded: a JVM that hangs at start (a full /tmp, a stuck DNS look-up of the
    host's name) would otherwise hold `compare` forever.

    Raises:
        ReportError: not started within `timeout_s` (exit 3); the JVM's process is killed.
    """
    done: list[Any] = []
    failed: list[BaseException] = []

    def start() -> None:
        try:
            done.append(builder.getOrCreate())
        except BaseException as err:  # re-raised in the caller's thread
            failed.append(err)

    thread = threading.Thread(target=start, name="spark-start", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if failed:
        raise failed[0]
    if not done:
        _kill_gateway()
        raise ReportError(
            f"Spark did not start within {timeout_s:.0f} s (the JVM hung at start; {SPARK_START_TIMEOUT_ENV} "
            "sets the limit)"
        )
    return done[0]


def _kill_gateway() -> None:
    """Kill every process this one started for Spark (spark-submit and the java it runs): a hung start
    leaves them, and they hold this command's stdout and stderr, so a pipeline reading them would wait."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        with suppress(psutil.Error):
            child.kill()


def _register(spark: Any, root: str, golden: GoldenIndex | None, views: list[str], errors: Errors) -> None:
    """Each table of the dataset, and the golden, as a temporary view of SCHEMA's columns in order."""
    for table in (*TABLES, SKIPPED_TABLE):
        schema, pattern = ddl(SCHEMA[table]), "*.parquet" if table == SKIPPED_TABLE else "*/*/*.parquet"
        if is_url(root):
            try:
                frame = spark.read.schema(schema).parquet(f"{root.rstrip('/')}/{table}/{pattern}")
            except errors as err:
                condition = getattr(err, "getCondition", getattr(err, "getErrorClass", lambda: None))()
                if table == "reports" or condition != "PATH_NOT_FOUND":
                    raise
                frame = spark.createDataFrame([], schema)  # a table no report had a row for
        else:  # listed here, largest first, as DuckDB reads them; `file:` whatever the default file system
            files = [f"file:{Path(f).absolute()}" for f in dataset_files(Path(root), table)]
            frame = spark.read.schema(schema).parquet(*files) if files else spark.createDataFrame([], schema)
        frame.select(*[name for name, _ in SCHEMA[table]]).createOrReplaceTempView(table)
        views.append(table)
    spark.createDataFrame(golden_rows(golden), ddl(GOLDEN_COLUMNS)).createOrReplaceTempView("golden")
    views.append("golden")


def _run_steps(spark: Any, views: list[str], errors: Errors, what: str) -> None:
    """Every step as a view; those marked to materialize computed now (`_materialized`)."""
    profile, limit_s = bool(os.environ.get(PROFILE_ENV)), step_timeout_s()
    for name, sql, materialize in STEPS:
        started = time.perf_counter()
        with _failing(errors, f"{what}: step {name}"), _within(spark, limit_s, f"{what}: step {name}"):
            frame = spark.sql(sql)
            (_materialized(frame) if materialize else frame).createOrReplaceTempView(name)
            views.append(name)
        if profile:
            print(f"step {name}: {time.perf_counter() - started:.2f} s", file=sys.stderr)


def _materialized(frame: Any) -> Any:
    """A step's rows computed once and held by the executors (memory, then disk), with no lineage.

    Not `cache()`: a cached view keeps the plan of every step below it, and Spark plans each later
    query over that whole tree (the last steps' plans have hundreds of nodes: seconds per query, and
    the driver out of memory, on a fleet of three hosts). A local checkpoint is a leaf. Spark Connect
    before Spark 4 has none; there the step is cached.
    """
    try:
        return frame.localCheckpoint(eager=True)
    except NotImplementedError:
        cached = frame.cache()
        cached.count()
        return cached


class SparkRows:
    """A Spark session whose steps have run: the `Rows` the assembler reads, as plain tuples."""

    def __init__(self, spark: Any, errors: Errors) -> None:
        self.spark, self.errors, self.limit_s = spark, errors, step_timeout_s()

    @contextmanager
    def _query(self) -> Iterator[None]:
        """One query: Spark's errors as a ReportError, and bounded in time."""
        what = "Spark failed on a query"
        with _failing(self.errors, what), _within(self.spark, self.limit_s, what):
            yield

    def _frame(self, sql: str, params: Sequence[object]) -> Any:
        return self.spark.sql(sql, args=list(params) or None)

    def rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with self._query():
            return [tuple(row) for row in self._frame(sql, params).collect()]

    def batches(self, sql: str, params: Sequence[object] = ()) -> Iterator[tuple[Any, ...]]:
        """Rows a partition at a time (toLocalIterator keeps a sorted query's order)."""
        with self._query():
            for row in self._frame(sql, params).toLocalIterator():
                yield tuple(row)

    def column(self, sql: str, params: Sequence[object] = ()) -> npt.NDArray[np.float64]:
        with self._query():
            return np.array([row[0] for row in self._frame(sql, params).collect()], dtype=np.float64)

    def wanted(self, ids: Iterable[int]) -> AbstractContextManager[str]:
        return self.table((("report", "int64"),), [(i,) for i in sorted(set(ids))])

    @contextmanager
    def table(self, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[object]]) -> Iterator[str]:
        """Rows from Python as a view, named uniquely: a Spark Connect session may be shared."""
        name = f"sdcscan_rows_{uuid.uuid4().hex}"
        with self._query():
            self.spark.createDataFrame([tuple(r) for r in rows], ddl(columns)).createOrReplaceTempView(name)
        try:
            yield name
        finally:
            self.spark.catalog.dropTempView(name)

    @contextmanager
    def kept(self, sql: str) -> Iterator[str]:
        """A query's rows materialized as a step's are, as a uniquely named view."""
        name = f"sdcscan_kept_{uuid.uuid4().hex}"
        with self._query():
            _materialized(self.spark.sql(sql)).createOrReplaceTempView(name)
        try:
            yield name
        finally:
            self.spark.catalog.dropTempView(name)


def compare_from_spark(
    directory: str | os.PathLike[str],
    options: Options | None = None,
    *,
    master: str | None = None,
    remote: str | None = None,
) -> FleetSummary:
    """`sdcscan compare --from DIR --engine spark`: `compare.compare_from`, the steps run by Spark. A URL
    is read as it is (only a local directory's marker is checked here).

    Raises:
        UsageError: pyspark missing, not a dataset, or a dataset with no report (exit 2).
        ReportError: Spark cannot read the dataset or run a step, or the dataset is damaged (exit 3).
        ValueError: `options.hosts` is given without `options.now`.
    """
    opts = options or Options()
    if opts.hosts is not None and opts.now is None:
        raise ValueError("options.now is required with options.hosts")
    spark_session_class()  # the install hint before anything else
    start_timeout_s(), step_timeout_s()  # a bad limit is exit 2 before Spark starts
    root = os.fspath(directory)
    if not is_url(root):
        check_marker(Path(root))
    with spark_dataset(root, opts.golden, master=master, remote=remote) as db:
        require_reports(db)
        return decide(db, opts)


@contextmanager
def _failing(errors: Errors, what: str) -> Iterator[None]:
    """Spark's errors as a ReportError (exit 3) saying what failed, without the Java stack."""
    try:
        yield
    except errors as err:
        java = getattr(err, "java_exception", None)  # Py4JJavaError: the JVM's exception, stack and all
        text = str(err) if java is None else str(java.toString())
        lines = [line for line in text.splitlines() if not re.match(r"\s+(at |\.\.\. \d+ more)", line)]
        raise ReportError(f"{what}: " + "\n".join(lines)) from None


@contextmanager
def _within(spark: Any, limit_s: float, what: str) -> Iterator[None]:
    """Run the body with Spark's jobs cancelled once it has taken `limit_s` seconds; the error that then
    ends it becomes a ReportError (exit 3) saying so. Put inside `_failing`, which would word it as
    Spark's own failure.

    Raises:
        ReportError: the body ran past `limit_s` (and failed, as its jobs were cancelled).
    """
    fired = threading.Event()

    def cancel() -> None:
        fired.set()
        _cancel_jobs(spark)

    timer = threading.Timer(limit_s, cancel)
    timer.daemon = True
    timer.start()
    try:
        yield
    except Exception:
        if not fired.is_set():
            raise
        raise ReportError(
            f"{what}: did not finish within {limit_s:g} s, and its Spark jobs were cancelled "
            f"({SPARK_STEP_TIMEOUT_ENV} sets the limit)"
        ) from None
    finally:
        timer.cancel()


def _cancel_jobs(spark: Any) -> None:
    """Cancel what this session runs: `interruptAll` (Spark Connect, and classic sessions since Spark 4),
    else every job of the SparkContext (a compare's own, or a session it shares with its caller)."""
    try:
        spark.interruptAll()
    except Exception:  # no such call on this Spark, or it failed: the context's jobs, then
        with suppress(Exception):
            spark.sparkContext.cancelAllJobs()


@contextmanager
def _quiet_query_logs() -> Iterator[None]:
    """pyspark's query loggers off while Spark runs: the error is raised, not logged too. (They are
    pyspark's own logger class: a plain logger of that name would break its calls.)"""
    loggers: list[Any] = []
    with suppress(ImportError):  # before Spark 4 nothing is logged
        loggers = [
            importlib.import_module("pyspark.logger").PySparkLogger.getLogger(n) for n in _QUERY_LOGGERS
        ]
    saved = [(logger, logger.disabled) for logger in loggers]
    for logger, _ in saved:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, disabled in saved:
            logger.disabled = disabled
