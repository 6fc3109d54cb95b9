"""Spark as an engine (`compare --from DIR --engine spark`): the same `compare --json` document as DuckDB,
on the issue-12 scenarios and on simulated fleets with planted faults, with and without a golden.

One Spark session serves the whole module (starting one costs seconds). A compare on Spark costs a few
seconds even on a tiny fleet (a job per step and per query), so the scenarios are judged side by side
in one dataset: each under a seed and host names of its own, so that no scenario votes on another's
cases or re-runs another's hosts (their units' speeds are judged together). The parity check covers
every scenario in two compares.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sdcscan.errors import ReportError, UsageError
from sdcscan.fleet.compare import Options, compare_from
from sdcscan.fleet.engine_spark import INSTALL_HINT, compare_from_spark
from sdcscan.fleet.golden import index_golden
from sdcscan.fleet.ingest import ingest
from sdcscan.fleet.reading import read_hosts
from sdcscan.timefmt import parse_iso_utc
from tests.helpers.scripts import load_script
from tests.helpers.tools import missing_tool

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")
# Spark's JVM takes both cores, as a launched world of four ranks does: these tests run on the pytest worker
# of the worlds (tests/test_distributed_run.py), one at a time, so neither starves the other's start-up
pytestmark = pytest.mark.xdist_group("launched_worlds")

NOW = "2025-06-02T12:00:00Z"
MASTER = "local[2]"
# Settings for fleets of a few hosts: one shuffle partition, and neither adaptive planning nor code
# generation (they pay off on millions of rows, and cost tenths of a second on every query here).
SMALL_DATA = {
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """The module's Spark session; `compare_from_spark` reuses it (and leaves it running)."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        missing_tool(
            "Java 17 or newer, which Spark needs,", "Debian: apt-get install openjdk-17-jre-headless"
        )
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(MASTER).appName("sdcscan tests")
    for key, value in SMALL_DATA.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def assert_same(dataset: Path, opts: Options, *, as_url: bool = False) -> dict[str, Any]:
    """Spark and DuckDB give the same document on `dataset` (Spark reads it as a `file://` URL with
    `as_url`); return it."""
    expected = compare_from(dataset, opts).to_dict()
    assert (
        compare_from_spark(dataset.as_uri() if as_url else dataset, opts, master=MASTER).to_dict() == expected
    )
    return expected


def scenario_fleet(directory: Path) -> dict[str, Any]:
    """Every scenario's reports under `directory`, kept apart (a seed and host names of its own: its own
    comparison groups); return the golden of them all."""
    sim = load_script("simulate_fleet")
    directory.mkdir(parents=True)
    entries = []
    for k, name in enumerate(sorted(sim.SCENARIOS)):
        seed = sim.SCENARIO_SEED + k
        for n, report in enumerate(sim.scenario_reports(name)):
            report["host"]["hostname"] = f"{name}--{report['host']['hostname']}"
            report["run"]["seed"] = seed
            (directory / f"{name}-{n:02d}.json").write_text(json.dumps(report))
        entries += [{**e, "seed": seed} for e in sim.golden_document()["entries"]]
    return {**sim.golden_document(), "entries": entries}


def test_every_scenario_decides_the_same_with_and_without_its_golden(spark: Any, tmp_path: Path):
    """Each issue-12 scenario: the same findings, evidence, groups, superseded reports and exit code."""
    golden = index_golden(scenario_fleet(tmp_path / "reports"))
    ingest([str(tmp_path / "reports")], tmp_path / "ds", workers=1)
    docs = [assert_same(tmp_path / "ds", Options(now=parse_iso_utc(NOW), golden=g)) for g in (None, golden)]
    kinds = {f["kind"] for doc in docs for f in doc["findings"]}
    bases = {f["evidence"]["basis"] for doc in docs for f in doc["findings"] if f["kind"] == "divergent"}
    scenarios = {f["host"].split("--")[0] for doc in docs for f in doc["findings"]}
    assert {"divergent", "undecided", "collision"} <= kinds
    assert {"golden", "fleet", "host"} <= bases
    assert len(scenarios) >= 8 and all(doc["superseded"] and doc["groups"] for doc in docs)


SIMULATED_SEEDS = (3, 8)


def simulated_fleets(sim: Any, directory: Path) -> tuple[tuple[str, ...], str]:
    """Simulated fleets of `SIMULATED_SEEDS` side by side under `directory` (hosts renamed `s<seed>-…`, so
    that no fleet re-runs another's hosts; each keeps its week's seed, so none votes on another's cases);
    return every host that should report, and the fleets' "now"."""
    hosts: list[str] = []
    nows = set()
    for seed in SIMULATED_SEEDS:
        fleet = directory / f"fleet{seed}"
        nows.add(sim.simulate(24, 4, 16, fleet, seed)["now"])
        for path in (fleet / "reports").rglob("*.json"):
            try:
                report = json.loads(path.read_text())
            except ValueError:
                continue  # the damaged files stay as they were written: skipped, as in one fleet
            report["host"]["hostname"] = f"s{seed}-{report['host']['hostname']}"
            path.write_text(json.dumps(report, separators=(",", ":")) + "\n")
        hosts += [f"s{seed}-{h}" for h in read_hosts(str(fleet / "hosts.txt"))]
    (now,) = nows
    return tuple(hosts), now


def test_simulated_fleets_decide_the_same_with_and_without_a_golden(spark: Any, tmp_path: Path):
    """Planted faults (a partition group, persistent and intermittent faults, invariants, slow and invalid
    units), corrupt and duplicate files, a stale and two missing hosts; a golden of some cases. Two seeds'
    fleets in one dataset, so two compares check both. The dataset is read once as a directory and once as
    a `file://` URL (as `s3a://` would be: globbed by Spark, tables with no file of their own read as
    empty)."""
    sim = load_script("simulate_fleet")
    hosts, now = simulated_fleets(sim, tmp_path)
    ingest(
        [str(tmp_path / f"fleet{seed}" / "reports") for seed in SIMULATED_SEEDS], tmp_path / "ds", workers=1
    )
    opts = Options(hosts=hosts, now=parse_iso_utc(now))
    doc = assert_same(tmp_path / "ds", opts, as_url=True)
    assert doc["exit_code"] == 1 and doc["groups"] and doc["skipped"]
    assert {f["host"].split("-")[0] for f in doc["findings"] if f.get("host")} == {"s3", "s8"}
    goldens = [simulated_golden(sim, 1000 + seed, cases=16) for seed in SIMULATED_SEEDS]
    golden = index_golden({**goldens[0], "entries": [e for g in goldens for e in g["entries"]]})
    doc = assert_same(tmp_path / "ds", Options(hosts=hosts, now=parse_iso_utc(now), golden=golden))
    assert {f["evidence"].get("basis") for f in doc["findings"]} >= {"golden"}


def simulated_golden(sim: Any, week_seed: int, cases: int) -> dict[str, Any]:
    """A golden of the even cases of each cohort of a simulated fleet."""
    entries = []
    for cohort in sim.COHORTS:
        base = sim.base_cases(cohort, week_seed, cases)
        cols = {k: base[k][::2] for k in ("index", "workload", "digest")}
        entries.append(
            {
                "profile_sha256": sim.PROFILE_SHA,
                "seed": week_seed,
                "cohort": cohort,
                "units": 3,
                "cases": cols,
            }
        )
    return {
        "golden_version": 1,
        "tool": {"name": "sdcscan", "version": "0"},
        "reports": 3,
        "entries": entries,
    }


def test_a_dataset_spark_cannot_read_is_a_report_error(spark: Any, tmp_path: Path):
    """A damaged Parquet file: exit 3, saying that Spark could not read the dataset; the session that
    was already running stays up."""
    sim = load_script("simulate_fleet")
    sim.write_scenario("adept", tmp_path / "fleet")
    ingest([str(tmp_path / "fleet" / "reports")], tmp_path / "ds", workers=1)
    part = next((tmp_path / "ds" / "cases").glob("*/*/*.parquet"))
    part.write_bytes(b"PAR1 not a parquet file PAR1")
    with pytest.raises(ReportError, match="Spark cannot read the dataset") as err:
        compare_from_spark(tmp_path / "ds", Options(), master=MASTER)
    assert err.value.exit_code == 3
    assert spark.range(3).count() == 3


def test_a_step_past_its_time_limit_is_cancelled_and_said_so(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Issue 43: a stalled step held `compare --engine spark` forever. A step that runs past
    SDCSCAN_SPARK_STEP_TIMEOUT_S has its jobs cancelled: exit 3 naming the step and the limit, within
    seconds of it; the session stays usable. (The slow step counts 10^12 rows: minutes on 2 cores.)"""
    import time

    from sdcscan.fleet import engine_spark

    sim = load_script("simulate_fleet")
    sim.write_scenario("adept", tmp_path / "fleet")
    ingest([str(tmp_path / "fleet" / "reports")], tmp_path / "ds", workers=1)
    slow = ("slow_step", "SELECT count(*) AS n FROM range(0, 1000000000000)", True)
    monkeypatch.setattr(engine_spark, "STEPS", [*engine_spark.STEPS[:1], slow, *engine_spark.STEPS[1:]])
    monkeypatch.setenv(engine_spark.SPARK_STEP_TIMEOUT_ENV, "3")
    started = time.monotonic()
    with pytest.raises(
        ReportError, match=r"step slow_step: did not finish within 3 s.*SDCSCAN_SPARK_STEP_TIMEOUT_S"
    ):
        compare_from_spark(tmp_path / "ds", Options(), master=MASTER)
    assert time.monotonic() - started < 60
    assert spark.range(3).count() == 3
    monkeypatch.setenv(engine_spark.SPARK_STEP_TIMEOUT_ENV, "0")
    with pytest.raises(
        UsageError, match="SDCSCAN_SPARK_STEP_TIMEOUT_S=0: must be a number of seconds above 0"
    ):
        compare_from_spark(tmp_path / "ds", Options(), master=MASTER)


def test_without_pyspark_the_spark_engine_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A usage error (exit 2) naming the extra to install, before the dataset is even looked at."""
    monkeypatch.setitem(sys.modules, "pyspark", None)  # `import pyspark` now raises ImportError
    with pytest.raises(UsageError, match=re.escape(INSTALL_HINT)) as err:
        compare_from_spark(tmp_path / "no-dataset-here")
    assert err.value.exit_code == 2


def test_the_command_line_with_engine_spark_prints_what_duckdb_prints(spark: Any, tmp_path: Path):
    """`compare --from DIR --engine spark --json`: the document and exit code of `compare --from DIR`."""
    from click.testing import CliRunner

    from sdcscan.cli import cli

    sim = load_script("simulate_fleet")
    sim.write_scenario("adept", tmp_path / "fleet")
    ingest([str(tmp_path / "fleet" / "reports")], tmp_path / "ds", workers=1)
    args = ["compare", "--from", str(tmp_path / "ds"), "--json", "--now", NOW]
    duck = CliRunner().invoke(cli, args)
    on_spark = CliRunner().invoke(cli, [*args, "--engine", "spark", "--spark-master", MASTER])
    assert on_spark.exit_code == duck.exit_code == 0, on_spark.output
    assert json.loads(on_spark.stdout) == json.loads(duck.stdout)
