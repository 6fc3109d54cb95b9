"""The Parquet path: `sdcscan ingest` then `compare --from` decide exactly what `compare` decides on the
JSON files (issue 12, item 7), and refuse what they cannot use with the exit-code contract.

Parity is checked on whole `compare --json` documents (findings with their evidence, partition groups,
superseded reports, skipped inputs, counts, exit code): on every scenario of scripts/simulate_fleet.py,
with and without its golden, on a simulated fleet with planted faults and corrupt files, and on random
fleets that mix what the scenarios hold one at a time (re-runs, duplicates, machines sharing a name,
convictions by a host's own run, ties, lonely cases, errors, invariants, invalid and slow units,
calibrations, goldens, inventories with aliases and missing hosts, clocks ahead), and on fleets whose
reports carry kernel-log `sentinel` sections (issue 14), hostile ones included.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sdcscan.cli import cli
from sdcscan.errors import ReportError, UsageError
from sdcscan.fleet import sql_steps
from sdcscan.fleet.compare import FleetSummary, Options, compare_from, summarize
from sdcscan.fleet.golden import index_golden, load_golden
from sdcscan.fleet.ingest import ingest
from sdcscan.fleet.reading import read_reports
from sdcscan.fleet.tables import FORMAT_VERSION, MARKER, SCHEMA, partition_of
from sdcscan.timefmt import parse_iso_utc
from tests.helpers.cli import ROOT
from tests.helpers.fleet import PLAN_SHA, good
from tests.helpers.fleet import report as host_report
from tests.helpers.fleet import unit as host_unit
from tests.helpers.hostile import MUTATIONS, field_paths, mutated_text
from tests.helpers.reports import build_report, build_unit
from tests.helpers.scripts import load_script

pytest.importorskip("duckdb")  # the `fleet` extra; the `test` extra installs it, so CI runs these
pytest.importorskip("pyarrow")

NOW = "2025-06-02T12:00:00Z"


def json_path(reports: Path, opts: Options) -> FleetSummary:
    """What `compare REPORTS` decides."""
    found, skipped = read_reports([str(reports)], workers=1)
    return summarize(found, options=opts, skipped=skipped)


def parquet_path(reports: Path, dataset: Path, opts: Options) -> FleetSummary:
    """What `ingest REPORTS --to DATASET` then `compare --from DATASET` decide."""
    ingest([str(reports)], dataset, workers=1)
    return compare_from(dataset, opts)


def assert_same(reports: Path, dataset: Path, opts: Options) -> dict[str, Any]:
    """Both paths give the same `compare --json` document; return it."""
    expected = json_path(reports, opts).to_dict()
    assert parquet_path(reports, dataset, opts).to_dict() == expected
    return expected


# ---------------------------------------------------------------------------------------------------
# Parity.


@pytest.mark.parametrize("name", sorted(load_script("simulate_fleet").SCENARIOS))
def test_every_scenario_decides_the_same_with_and_without_its_golden(tmp_path: Path, name: str):
    """Each issue-12 scenario: same findings, evidence, groups, superseded reports and exit code."""
    sim = load_script("simulate_fleet")
    sim.write_scenario(name, tmp_path / "fleet")
    reports = tmp_path / "fleet" / "reports"
    golden = index_golden(load_golden(tmp_path / "fleet" / "golden.json"))
    found, skipped = read_reports([str(reports)], workers=1)
    ingest([str(reports)], tmp_path / "ds", workers=1)
    codes = set()
    for opts in (Options(now=parse_iso_utc(NOW)), Options(now=parse_iso_utc(NOW), golden=golden)):
        expected = summarize(found, options=opts, skipped=skipped).to_dict()
        assert compare_from(tmp_path / "ds", opts).to_dict() == expected
        codes.add(expected["exit_code"])
    assert codes <= {0, 1}


def test_compare_on_files_beyond_memory_spills_to_a_temporary_dataset_and_decides_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """`compare REPORTS` keeps the converted reports in memory up to SPILL_BYTES, then writes them to a
    temporary dataset (without the case columns no step reads): the same document either way, and the
    temporary dataset is gone afterwards."""
    from sdcscan.fleet import compare as fleet_compare

    sim = load_script("simulate_fleet")
    sim.write_scenario("adept", tmp_path / "fleet")
    reports = [str(tmp_path / "fleet" / "reports")]
    opts = Options(now=parse_iso_utc(NOW))
    in_memory = fleet_compare.compare_files(reports, opts, jobs=1).to_dict()
    monkeypatch.setattr(fleet_compare, "SPILL_BYTES", 1)
    made: list[str] = []
    real = fleet_compare.duckdb_dataset

    def spy(root: Path, *args: Any) -> Any:
        made.append(str(root))
        return real(root, *args)

    monkeypatch.setattr(fleet_compare, "duckdb_dataset", spy)
    assert fleet_compare.compare_files(reports, opts, jobs=1).to_dict() == in_memory
    assert len(made) == 1 and not Path(made[0]).exists()


def test_a_simulated_fleet_with_planted_faults_decides_the_same(tmp_path: Path):
    """Partition group, persistent and intermittent faults, invariants, slow and invalid units, corrupt
    and duplicate files, a stale and two missing hosts: the same document, and exit 1."""
    sim = load_script("simulate_fleet")
    manifest = sim.simulate(40, 8, 40, tmp_path / "fleet", 5)
    hosts = tuple(
        line
        for line in (tmp_path / "fleet" / "hosts.txt").read_text().splitlines()
        if line and line[0] != "#"
    )
    opts = Options(hosts=hosts, now=parse_iso_utc(manifest["now"]))
    doc = assert_same(tmp_path / "fleet" / "reports", tmp_path / "ds", opts)
    found = sorted((f["kind"], f["host"], f["unit"] or "") for f in doc["findings"])
    planted = sorted((e["kind"], e["host"], e["unit"] or "") for e in manifest["expected_findings"])
    assert found == planted
    assert doc["exit_code"] == 1


@pytest.mark.parametrize("seed", range(14))
def test_random_fleets_decide_the_same(tmp_path: Path, seed: int):
    """Random fleets mixing every situation: the same document, --fail-on undecided included."""
    fleet = random_fleet(seed)
    write_reports(fleet["reports"], tmp_path / "reports")
    golden = index_golden(fleet["golden"]) if fleet["golden"] else None
    opts = Options(
        hosts=fleet["inventory"],
        now=parse_iso_utc(NOW),
        golden=golden,
        fail_on_undecided=seed % 2 == 0,
        slow_min_units=3,
    )
    assert_same(tmp_path / "reports", tmp_path / "ds", opts)


@pytest.mark.parametrize("with_golden", [False, True])
def test_a_unit_its_own_run_named_is_cleared_only_by_a_golden_it_matches(tmp_path: Path, with_golden: bool):
    """A unit whose own run named it not reproducible but whose digests agree: divergent ("own run")
    without a golden; cleared by a golden covering every case it ran. Both paths agree."""
    healthy = [good("c1", i) for i in range(4)]
    reports = [
        build_report(
            [build_unit(f"cpu:{k}", digests=healthy) for k in range(2)], hostname=f"peer{n}", run_id=f"p{n}"
        )
        for n in range(3)
    ]
    named = build_unit("cpu:1", digests=healthy, verdict="fail", reason="did not reproduce")
    finding = {"kind": "not_reproducible", "unit": "cpu:1", "message": "named", "next": None}
    reports.append(
        build_report([build_unit("cpu:0", digests=healthy), named], hostname="solo", findings=[finding])
    )
    for report in reports:
        report["run"]["profile"]["sha256"] = PLAN_SHA
    write_reports(reports, tmp_path / "reports")
    cols = {"index": list(range(4)), "workload": ["train", "matmul_golden"] * 2, "digest": healthy}
    entry = {"profile_sha256": PLAN_SHA, "seed": 7, "cohort": "c1", "units": 6, "cases": cols}
    golden = {
        "golden_version": 1,
        "tool": {"name": "sdcscan", "version": "0"},
        "reports": 3,
        "entries": [entry],
    }
    opts = Options(now=parse_iso_utc(NOW), golden=index_golden(golden) if with_golden else None)
    doc = assert_same(tmp_path / "reports", tmp_path / "ds", opts)
    accused = [
        (f["host"], f["unit"], f["evidence"]["basis"]) for f in doc["findings"] if f["kind"] == "divergent"
    ]
    assert accused == ([] if with_golden else [("solo", "cpu:1", "own run")])


def test_random_fleets_exercise_what_they_are_meant_to(tmp_path: Path):
    """The random fleets above reach the cases they exist for (else they would prove little)."""
    kinds: set[str] = set()
    bases: set[str] = set()
    superseded = skipped = groups = 0
    for seed in range(14):
        fleet = random_fleet(seed)
        write_reports(fleet["reports"], tmp_path / str(seed))
        golden = index_golden(fleet["golden"]) if fleet["golden"] else None
        opts = Options(hosts=fleet["inventory"], now=parse_iso_utc(NOW), golden=golden, slow_min_units=3)
        doc = json_path(tmp_path / str(seed), opts).to_dict()
        kinds |= {f["kind"] for f in doc["findings"]}
        bases |= {f["evidence"].get("basis") for f in doc["findings"] if f["kind"] == "divergent"}
        superseded += len(doc["superseded"])
        skipped += len(doc["skipped"])
        groups += len(doc["groups"])
    assert {"divergent", "undecided", "invariant", "invalid", "slow", "calibration", "collision"} <= kinds
    assert {"missing", "unlisted", "alias", "future"} <= kinds
    assert {"golden", "fleet", "host", "own run"} <= bases
    assert superseded and skipped and groups


# ---------------------------------------------------------------------------------------------------
# Kernel-log evidence: `sentinel` findings from the sentinel tables.

MODEL_A = "Intel(R) Xeon(R) Platinum 8480+"
MODEL_B = "AMD EPYC 9654 96-Core Processor"


def sentinel_report(
    name: str, cores: tuple[str, ...] = (), *, model: str | None = MODEL_A, **kw: Any
) -> dict[str, Any]:
    """A healthy host's report whose `sentinel` section names `cores` as outliers (as `sdcscan sentinel`
    writes them); `kw` goes to `tests.helpers.fleet.report`."""
    doc = host_report(name, **kw)
    if model is not None:
        doc["host"]["cpu_model"] = model
    outliers = [
        {
            "unit": c,
            "programs": 9 + k,
            "expected": 0.6,
            "peers": 63,
            "p_value": 2e-9,
            "events": 14,
            "examples": ["python3", "java", "sshd"][: 1 + k % 3],
        }
        for k, c in enumerate(cores)
    ]
    doc["sentinel"] = {"since": "2025-05-25T00:00:00Z", "until": "2025-06-01T00:00:00Z", "outliers": outliers}
    return doc


def sentinel_fleet() -> list[dict[str, Any]]:
    """Outliers on some hosts; cpu:0 on three hosts of model A (a fleet finding) and one of model B;
    hosts without a model; newer reports with a clean section or none; machines sharing a hostname; a
    copy; and two hosts whose two current reports tie on end time and run id (`sentinel_tie`)."""
    may, june = "2025-05-01T00:00:00Z", "2025-06-01T00:00:00Z"
    fleet = [
        sentinel_report("a1", ("cpu:0",)),
        sentinel_report("a2", ("cpu:0", "cpu:5")),
        sentinel_report("a3", ("cpu:0",)),
        sentinel_report("a4"),
        sentinel_report("b1", ("cpu:0",), model=MODEL_B),
        sentinel_report("x1", ("cpu:3",), model=None),
        sentinel_report("x2", ("cpu:3",), model=None),
        sentinel_report("old", ("cpu:9",), seed=1, run_id="old-1", ended_at=may),
        sentinel_report("old", seed=2, run_id="old-2", ended_at=june),  # newer and clean: no finding
        sentinel_report("keep", ("cpu:4",), seed=1, run_id="keep-1", ended_at=may),
        host_report("keep", seed=2, run_id="keep-2", ended_at=june),  # no section: says nothing
    ]
    for machine, core in (("aa11", "cpu:1"), ("bb22", "cpu:2")):
        twin = sentinel_report("twin", (core,), run_id=f"twin-{machine}")
        twin["host"]["machine_id"] = machine
        fleet.append(twin)
    fleet.append(json.loads(json.dumps(fleet[0])))  # a byte-identical copy
    return fleet + sentinel_tie("t1", older=False) + sentinel_tie("t2", older=True)


def sentinel_tie(name: str, *, older: bool) -> list[dict[str, Any]]:
    """Two current reports of one host (one without a machine id, one with), of two plans, that end at
    the same time with the same run id: `summarize`'s order of current reports picks the section. The
    one with more cases comes first, unless an older report of the other plan has a smaller run id."""
    few = sentinel_report(name, ("cpu:6",), seed=1, run_id="r", units=[host_unit("cpu:0", cases=2, seed=1)])
    many = sentinel_report(name, ("cpu:8",), seed=2, run_id="r", units=[host_unit("cpu:0", cases=4, seed=2)])
    many["host"]["machine_id"] = "cc33"
    earlier = host_report(name, seed=1, run_id="a", ended_at="2025-05-01T00:00:00Z")
    return [few, many, earlier] if older else [few, many]


def sentinel_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f["host"], f["unit"]) for f in doc["findings"] if f["kind"] == "sentinel"]


def test_sentinel_sections_give_the_same_findings_on_both_paths(tmp_path: Path):
    """Per-host and fleet `sentinel` findings, the newest section per host, machines kept apart, ties:
    the same document on both paths, and exit 0 (kernel-log evidence never fails compare)."""
    write_reports(sentinel_fleet(), tmp_path / "reports")
    doc = assert_same(tmp_path / "reports", tmp_path / "ds", Options(now=parse_iso_utc(NOW)))
    assert doc["exit_code"] == 0
    assert sentinel_rows(doc) == [
        ("a1", "cpu:0"),
        ("a2", "cpu:0"),
        ("a2", "cpu:5"),
        ("a3", "cpu:0"),
        ("b1", "cpu:0"),
        (f"fleet: {MODEL_A}", "cpu:0"),
        ("keep", "cpu:4"),
        ("t1", "cpu:8"),  # more cases: first in `summarize`'s order
        ("t2", "cpu:6"),  # its plan's older report has the smaller run id: first
        ("twin (machine aa11)", "cpu:1"),
        ("twin (machine bb22)", "cpu:2"),
        ("x1", "cpu:3"),
        ("x2", "cpu:3"),
    ]
    fleet_wide = next(f["evidence"] for f in doc["findings"] if f["host"] == f"fleet: {MODEL_A}")
    # cpu:0 on a1-a3, out of the model's 10 hosts with a section: a1-a4, old, keep, two twins, t1, t2
    assert (fleet_wide["hosts"], fleet_wide["hosts_with_sentinel"]) == (3, 10)


def test_a_fleet_without_sentinel_sections_gives_no_sentinel_finding_on_either_path(tmp_path: Path):
    """No section anywhere: no sentinel rows are written and neither path has a sentinel finding."""
    fleet = random_fleet(3)
    write_reports(fleet["reports"], tmp_path / "reports")
    doc = assert_same(tmp_path / "reports", tmp_path / "ds", Options(now=parse_iso_utc(NOW)))
    assert doc["counts"]["sentinel"] == 0 and doc["findings"]
    assert not list((tmp_path / "ds").glob("sentinel_*/*/*/*.parquet"))


HOSTILE_BASE = sentinel_report("hostile", ("cpu:7",))
HOSTILE_PATHS = [p for p in field_paths(HOSTILE_BASE) if p[0] == "sentinel" or p[:2] == ("host", "cpu_model")]


def test_hostile_sentinel_sections_give_the_same_findings_on_both_paths(tmp_path: Path):
    """Every field of a section (and host.cpu_model) spoiled every way, one host each: both paths keep,
    drop and refuse the same values (`read_section` on both), and agree on the findings; exit 0."""
    reports = tmp_path / "reports"
    reports.mkdir()
    n = 0
    for path in HOSTILE_PATHS:
        for mutation in MUTATIONS:
            if mutation.name == "lone-surrogate":
                continue  # Parquet text is UTF-8: the next test
            base = json.loads(json.dumps(HOSTILE_BASE))
            base["host"]["hostname"], base["run"]["id"] = f"h{n}", f"h{n}-run"
            (reports / f"h{n}.json").write_text(mutated_text(base, path, mutation))
            n += 1
    doc = assert_same(reports, tmp_path / "ds", Options(now=parse_iso_utc(NOW)))
    assert doc["exit_code"] == 0 and doc["counts"]["sentinel"] > n // 2
    fleet_wide = next(f["evidence"] for f in doc["findings"] if f["host"] == f"fleet: {MODEL_A}")
    assert fleet_wide["hosts"] > 20 and len(fleet_wide["host_names"]) == 20  # listed names are capped


def test_a_lone_surrogate_in_a_sentinel_section_keeps_the_report(tmp_path: Path):
    """Text Parquet cannot hold, in optional evidence, does not cost the report its votes: it is kept
    and its finding made, with U+FFFD for the lone surrogate, whether compare reads the JSON or a dataset."""
    doc = sentinel_report("s", ("cpu:7",))
    doc["host"]["cpu_model"] = "HIGH-model"
    doc["sentinel"]["outliers"][0]["examples"] = ["py-LOW"]
    reports = tmp_path / "reports"
    write_reports([sentinel_report("peer", ("cpu:7",))], reports)
    text = json.dumps(doc).replace("HIGH", "\\ud800").replace("LOW", "\\udc80")  # JSON escapes
    (reports / "s.json").write_text(text)
    opts = Options(now=parse_iso_utc(NOW))
    expected = json.dumps(json_path(reports, opts).to_dict())
    assert "\\ufffd-model" in expected and "py-\\ufffd" in expected and "\\ud800" not in expected
    result = parquet_path(reports, tmp_path / "ds", opts)
    assert result.counts["skipped"] == 0
    assert json.dumps(result.to_dict()) == expected


def test_a_dataset_that_repeats_sentinel_rows_is_refused(tmp_path: Path):
    """A copied sentinel part file would count a host twice: exit 3, not a guess."""
    write_reports([sentinel_report("a", ("cpu:1",)), sentinel_report("b", ("cpu:1",))], tmp_path / "reports")
    ingest([str(tmp_path / "reports")], tmp_path / "ds", workers=1)
    assert len(sentinel_rows(compare_from(tmp_path / "ds").to_dict())) == 3  # fine as written
    part = next((tmp_path / "ds" / "sentinel_outliers").glob("*/*/*.parquet"))
    shutil.copy(part, part.with_name("part-copied.parquet"))
    with pytest.raises(ReportError, match="repeats a report's sentinel rows"):
        compare_from(tmp_path / "ds")


def test_a_dataset_of_an_older_format_is_refused_with_what_to_do(tmp_path: Path):
    """A dataset of an older version (1: no sentinel tables; 2: no units' `part`) is refused by compare
    --from and ingest (exit 2), saying to ingest into a new directory, rather than silently leave its
    reports' evidence out."""
    write_reports([sentinel_report("a", ("cpu:1",))], tmp_path / "reports")
    ingest([str(tmp_path / "reports")], tmp_path / "ds", workers=1)
    marker = json.loads((tmp_path / "ds" / MARKER).read_text())
    assert marker["version"] == FORMAT_VERSION == 3
    for older in (1, 2):
        (tmp_path / "ds" / MARKER).write_text(json.dumps({**marker, "version": older}))
        with pytest.raises(UsageError, match="ingest the reports into a new directory"):
            compare_from(tmp_path / "ds")
        with pytest.raises(UsageError, match="ingest the reports into a new directory"):
            ingest([str(tmp_path / "reports")], tmp_path / "ds", workers=1)


# ---------------------------------------------------------------------------------------------------
# The dataset.


def test_ingesting_twice_keeps_the_findings_and_lists_the_copies(tmp_path: Path):
    """A second ingest of the same files appends copies; compare --from drops them as duplicates."""
    sim = load_script("simulate_fleet")
    sim.write_scenario("reruns-4-peers", tmp_path / "fleet")
    reports = tmp_path / "fleet" / "reports"
    opts = Options(now=parse_iso_utc(NOW))
    once = parquet_path(reports, tmp_path / "ds", opts).to_dict()
    twice = parquet_path(reports, tmp_path / "ds", opts).to_dict()
    assert once == json_path(reports, opts).to_dict()
    assert twice["findings"] == once["findings"] and twice["superseded"] == once["superseded"]
    copies = [s for s in twice["skipped"] if s["reason"].endswith("(identical content)")]
    assert len(copies) == once["counts"]["reports"] + once["counts"]["superseded"]


def test_rows_are_partitioned_by_plan_and_day(tmp_path: Path):
    """One directory per plan and day under each table; the SQL reads the columns, not the names."""
    sim = load_script("simulate_fleet")
    sim.write_scenario("fixed-host", tmp_path / "fleet")  # reports two days apart
    ingest([str(tmp_path / "fleet" / "reports")], tmp_path / "ds", workers=1)
    days = sorted(p.name for p in (tmp_path / "ds" / "cases").glob("plan=*/ended_on=*"))
    assert days == ["ended_on=2025-05-31", "ended_on=2025-06-02"]
    (plan,) = {p.name for p in (tmp_path / "ds" / "cases").glob("plan=*")}
    assert plan == f"plan={sim.PROFILE_SHA}-{sim.SCENARIO_SEED}"
    assert json.loads((tmp_path / "ds" / MARKER).read_text())["format"] == "sdcscan-fleet-parquet"


def test_a_profile_hash_from_a_file_never_names_a_path():
    """A hand-made profile hash with `/` or `..` is partitioned under its own hash."""
    hostile = partition_of(("../../etc", 1), 0.0)
    assert hostile.startswith("plan=h") and "/.." not in hostile and hostile.count("/") == 1
    assert partition_of(("ab" * 32, 7), 0.0) == f"plan={'ab' * 32}-7/ended_on=1970-01-01"


def test_a_report_whose_text_is_not_unicode_is_skipped_alone(tmp_path: Path):
    """A lone surrogate cannot be stored as Parquet text: that report is listed, the others are kept."""
    reports = tmp_path / "reports"
    reports.mkdir()
    healthy = [build_unit(f"cpu:{k}", digests=[good("c1", i) for i in range(4)]) for k in range(2)]
    for name in ("a", "b"):
        doc = build_report(healthy, hostname=name, run_id=f"{name}-run", profile_sha256=PLAN_SHA)
        (reports / f"{name}.json").write_text(json.dumps(doc))
    bad = build_report(healthy, hostname="c", run_id="c-run", profile_sha256=PLAN_SHA)
    text = json.dumps(bad).replace('"hostname": "c"', '"hostname": "c\\ud800"')
    (reports / "c.json").write_text(text)
    result = ingest([str(reports)], tmp_path / "ds", workers=1)
    assert result.reports == 2
    assert [(Path(s.path).name, s.reason) for s in result.skipped] == [
        ("c.json", "holds text that is not valid Unicode (a lone surrogate)")
    ]


def test_a_dataset_with_two_reports_of_one_id_is_refused(tmp_path: Path):
    """A copied part file would make one report's rows count twice: exit 3, not a guess."""
    sim = load_script("simulate_fleet")
    sim.write_scenario("adept", tmp_path / "fleet")
    ingest([str(tmp_path / "fleet" / "reports")], tmp_path / "ds", workers=1)
    compare_from(tmp_path / "ds")  # fine as written
    part = next((tmp_path / "ds" / "reports").glob("*/*/*.parquet"))
    shutil.copy(part, part.with_name("part-copied.parquet"))
    with pytest.raises(ReportError, match="two reports with id"):
        compare_from(tmp_path / "ds")


def test_compare_from_refuses_what_is_not_a_dataset(tmp_path: Path):
    """No marker: a usage error naming the command that makes one."""
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="not an sdcscan dataset"):
        compare_from(tmp_path / "empty")


def test_the_sql_is_portable():
    """The consensus SQL calls only functions every engine has (ANSI aggregates and windows), and no
    DuckDB-only syntax: it must run unchanged on Spark and Trino."""
    texts = [sql for _, sql, _ in sql_steps.STEPS] + list(sql_steps.RESULTS.values())
    called = {m.upper() for t in texts for m in re.findall(r"\b([A-Za-z_]+)\s*\(", t)}
    keywords = {
        "IN",
        "EXISTS",
        "AS",
        "OVER",
        "FROM",
        "JOIN",
        "ON",
        "AND",
        "OR",
        "NOT",
        "WHERE",
        "WHEN",
        "THEN",
        "ELSE",
    }
    assert called - keywords <= {"COUNT", "MIN", "MAX", "SUM", "ROW_NUMBER", "COALESCE", "CAST"}
    for text in texts:
        upper = text.upper()
        for duckdb_only in (
            "::",
            "QUALIFY",
            "GROUP BY ALL",
            "EXCLUDE",
            "FILTER (",
            "READ_PARQUET",
            "LIST",
            "STRUCT",
        ):
            assert duckdb_only not in upper, (duckdb_only, text)
    script = sql_steps.sql_script()
    assert script.count("CREATE OR REPLACE TEMPORARY VIEW") == len(sql_steps.STEPS)


def test_the_docs_name_every_table_and_column():
    """docs/fleet_sql.md lists the dataset a Spark or Trino user declares: every table and column."""
    rows = {
        line.split("|")[1].strip(" `"): line.split("|")[3]
        for line in (ROOT / "docs" / "fleet_sql.md").read_text().splitlines()
        if line.startswith("| `")
    }
    assert set(rows) == set(SCHEMA)
    for table, columns in SCHEMA.items():
        named = re.findall(r"`([a-z_0-9]+)`", rows[table])
        assert [c for c in named if c in dict(columns)] == [c for c, _ in columns], table


# ---------------------------------------------------------------------------------------------------
# The command line and the exit-code contract.


def test_ingest_command_writes_and_lists_what_it_skipped(tmp_path: Path):
    """`sdcscan ingest` exits 0, says what it wrote and lists skipped files; --json the same as data."""
    sim = load_script("simulate_fleet")
    sim.simulate(12, 2, 8, tmp_path / "fleet", 3)
    result = CliRunner().invoke(
        cli, ["ingest", str(tmp_path / "fleet" / "reports"), "--to", str(tmp_path / "ds")]
    )
    assert result.exit_code == 0, result.output
    assert "Ingested 13 report(s)" in result.output  # 12 hosts and one byte-identical copy
    assert "skipped" in result.output and "not-json.json" in result.output
    for flag, target in (("--out", "ds2"), ("-o", "ds3")):  # -o/--out like every other output (issue 45)
        again = CliRunner().invoke(
            cli, ["ingest", str(tmp_path / "fleet" / "reports"), flag, str(tmp_path / target), "--json"]
        )
        doc = json.loads(again.stdout)
        assert doc["reports"] == 13 and doc["rows"]["units"] == 13 * 2 and len(doc["skipped"]) == 3


def test_ingest_refuses_bad_targets_and_inputs_before_writing(tmp_path: Path):
    """Exit 2 with one `Error:` line: a directory that is not a dataset, or no usable report."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    (tmp_path / "junk.json").write_text("not json")
    refused = CliRunner().invoke(cli, ["ingest", str(tmp_path / "junk.json"), "--to", str(other)])
    assert refused.exit_code == 2 and "not an sdcscan dataset" in refused.stderr
    assert sorted(p.name for p in other.iterdir()) == ["keep.txt"]
    empty = CliRunner().invoke(cli, ["ingest", str(tmp_path / "junk.json"), "--to", str(tmp_path / "ds")])
    assert empty.exit_code == 2 and "no usable report to ingest" in empty.stderr
    assert not any(p.suffix == ".parquet" for p in (tmp_path / "ds").rglob("*"))


def test_without_the_fleet_extra_ingest_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """pyarrow or duckdb missing (an install without the `fleet` extra): exit 2, one line saying how to
    install them."""
    monkeypatch.setitem(sys.modules, "duckdb", None)  # `import duckdb` now raises ImportError
    (tmp_path / "r.json").write_text("{}")
    result = CliRunner().invoke(cli, ["ingest", str(tmp_path / "r.json"), "--to", str(tmp_path / "ds")])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "Error: comparing a fleet needs pyarrow and duckdb (duckdb is not installed): "
        "pip install 'sdcscan[fleet]'"
    ]
    assert not (tmp_path / "ds").exists()
    with pytest.raises(UsageError, match=re.escape("pip install 'sdcscan[fleet]'")):
        compare_from(tmp_path)


@pytest.mark.parametrize(
    ("scenario", "extra", "code"),
    [("adept", ["--golden", "{fleet}/golden.json"], 1), ("split-8v8", ["--fail-on", "undecided"], 3)],
)
def test_compare_from_prints_what_compare_prints(tmp_path: Path, scenario: str, extra: list[str], code: int):
    """`compare --from DIR --json` writes the document and exit code `compare REPORTS --json` does."""
    sim = load_script("simulate_fleet")
    sim.write_scenario(scenario, tmp_path / "fleet")
    reports, dataset = tmp_path / "fleet" / "reports", tmp_path / "ds"
    assert CliRunner().invoke(cli, ["ingest", str(reports), "--to", str(dataset)]).exit_code == 0
    options = ["--json", "--now", NOW, *(a.format(fleet=tmp_path / "fleet") for a in extra)]
    direct = CliRunner().invoke(cli, ["compare", str(reports), *options])
    warehoused = CliRunner().invoke(cli, ["compare", "--from", str(dataset), *options])
    assert (direct.exit_code, warehoused.exit_code) == (code, code), warehoused.output
    assert json.loads(warehoused.stdout) == json.loads(direct.stdout)


def test_compare_takes_paths_or_a_dataset(tmp_path: Path):
    """Neither, or both: exit 2 with one `Error:` line before anything is read."""
    (tmp_path / "ds").mkdir()
    for args in ([], [str(tmp_path), "--from", str(tmp_path / "ds")]):
        result = CliRunner().invoke(cli, ["compare", *args])
        assert result.exit_code == 2
        assert result.stderr.strip().splitlines() == [
            "Error: give report PATHS, or --from DIR (a dataset written by `sdcscan ingest`), not both"
        ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{r}", "--engine", "spark"], "--engine spark judges a dataset"),
        (
            ["--from", "{d}", "--spark-master", "local[2]"],
            "--spark-master and --spark-remote go with --engine spark",
        ),
        (
            [
                "--from",
                "{d}",
                "--engine",
                "spark",
                "--spark-master",
                "local[2]",
                "--spark-remote",
                "sc://h:15002",
            ],
            "give --spark-master or --spark-remote, not both",
        ),
    ],
)
def test_engine_options_that_cannot_work_exit_2_before_anything_is_read(
    tmp_path: Path, args: list[str], message: str
):
    (tmp_path / "ds").mkdir()
    filled = [a.format(r=tmp_path / "r.json", d=tmp_path / "ds") for a in args]
    result = CliRunner().invoke(cli, ["compare", *filled])
    assert result.exit_code == 2 and message in result.stderr


def test_importing_the_command_line_loads_neither_pyarrow_nor_duckdb():
    """They are imported when ingest or compare --from runs, never on `import sdcscan.cli`."""
    probe = (
        "import sys, sdcscan.cli, sdcscan.fleet.ingest, sdcscan.fleet.convert, sdcscan.fleet.compare\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyarrow', 'duckdb', 'torch')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------------
# Random fleets.

WRONG_POOL = ("bad-a", "bad-b", "bad-c")  # a small pool: wrong digests are shared between units and hosts
MACHINES = ("a1b2c3d4", "0f1e2d3c")


def random_fleet(seed: int) -> dict[str, Any]:
    """Reports, a golden (or None) and an inventory, all drawn from `seed`."""
    rng = random.Random(seed)
    seeds = [7, 8] if rng.random() < 0.4 else [7]
    names = [f"node{k}" for k in range(rng.randint(3, 9))]
    reports: list[dict[str, Any]] = []
    for name in names:
        cohort = rng.choice(["c1", "c1", "c2"])
        machines = [None] if rng.random() < 0.8 else list(MACHINES)
        for machine in machines:
            for run in range(rng.choice([1, 1, 1, 2, 3])):
                reports.append(random_report(rng, name, machine, run, cohort, rng.choice(seeds)))
    extra = [json.loads(json.dumps(rng.choice(reports)))]  # a byte-identical copy
    twin = json.loads(json.dumps(rng.choice(reports)))  # same host and run id, other content
    twin["units"] = twin["units"][:1]
    extra.append(twin)
    listed = [n for n in names if rng.random() < 0.85] + ["missing-host"]
    if rng.random() < 0.5:
        listed[0] = listed[0].upper() + ".example.com"  # an alias of a reported host
    return {"reports": reports + extra, "golden": random_golden(rng, seeds), "inventory": tuple(listed)}


def random_report(
    rng: random.Random, host: str, machine: str | None, run: int, cohort: str, seed: int
) -> dict[str, Any]:
    """One report: units with random faults, and the own-run findings a run might have written."""
    units, findings, mismatches = [], [], []
    wrong_tag = rng.choice(WRONG_POOL) if rng.random() < 0.35 else None
    for k in range(rng.choice([0, 1, 2, 2, 3, 4, 8])):
        unit_cohort = cohort if rng.random() < 0.9 else "c2"
        n = rng.choice([0, 3, 6, 6, 6, 6])
        digests: list[str | None] = [good(unit_cohort, i, seed) for i in range(n)]
        statuses = ["ok"] * n
        wrong = wrong_tag is not None and rng.random() < 0.6
        if wrong:
            for i in rng.sample(range(n), min(n, rng.randint(1, 2))):
                digests[i] = f"{wrong_tag}-{i}"
        if n and rng.random() < 0.1:
            statuses[rng.randrange(n)] = "error"
        if n and rng.random() < 0.05:
            i = rng.randrange(n)
            statuses[i] = "mismatch"
            mismatches.append(mismatch(f"cpu:{k}", i))
        speed = 0.5 if rng.random() < 0.08 else 1.0
        ops = {w: round(1e9 * speed * rng.uniform(0.98, 1.02), 1) for w in ("train", "matmul_golden")}
        invalid = rng.random() < 0.04
        # Now and then a run names a unit whose digests agree (its re-runs did not reproduce a dispute).
        named = rng.random() < 0.1
        verdict = "invalid" if invalid else "fail" if wrong or named or "mismatch" in statuses else "pass"
        unit = build_unit(
            f"cpu:{k}",
            digests=digests,
            statuses=statuses,
            cohort=unit_cohort,
            verdict=verdict,
            reason="a reason" if verdict != "pass" else None,
            throughput={
                w: {"ops_per_s": v, "ops_unit": "flop/s", "cases": 1, "seconds": 0.1} for w, v in ops.items()
            },
            mismatches=int("mismatch" in statuses),
        )
        if rng.random() < 0.3:
            unit["calibration"] = [
                {"dtype": "fp32", "checker": "abft", "k": 64, "e_max": rng.choice([1e-6, 1e-6, 3e-6])}
            ]
        if verdict == "fail" and rng.random() < 0.6:
            kind = rng.choice(["divergent", "not_reproducible", "invariant"])
            findings.append({"kind": kind, "unit": f"cpu:{k}", "message": "named by its run", "next": None})
            unit["retest"] = {"classification": rng.choice(["persistent", "transient", "case"])}
        units.append(unit)
    ended = datetime(2025, 6, 2, 12, tzinfo=timezone.utc) - timedelta(hours=rng.randint(1, 2400))
    if rng.random() < 0.05:
        ended += timedelta(days=400)  # a clock ahead
    stamp = ended.isoformat().replace("+00:00", "Z")
    report = build_report(
        units,
        hostname=host,
        run_id=f"{host}-{machine}-{run}-{seed}",
        seed=seed,
        profile_sha256=PLAN_SHA,
        started_at=stamp,
        ended_at=stamp,
        mismatches=mismatches,
        findings=findings,
    )
    if machine is not None:
        report["host"]["machine_id"] = machine
    return report


def mismatch(unit: str, index: int) -> dict[str, Any]:
    return {
        "unit": unit,
        "index": index,
        "workload": "train",
        "check": "golden_matmul",
        "where": "fp32[0,0]",
    } | {
        "expected": "1.0",
        "actual": "1.5",
        "mask": None,
    }


def random_golden(rng: random.Random, seeds: list[int]) -> dict[str, Any] | None:
    """A golden covering some cases of some groups (now and then with a wrong entry), or None."""
    if rng.random() < 0.4:
        return None
    entries = []
    for seed in seeds:
        for cohort in ("c1", "c2"):
            cases = sorted(rng.sample(range(6), rng.randint(1, 6)))
            digests = [good(cohort, i, seed) if rng.random() < 0.9 else f"{WRONG_POOL[0]}-{i}" for i in cases]
            workloads = ["train" if i % 2 == 0 else "matmul_golden" for i in cases]
            cols = {"index": cases, "workload": workloads, "digest": digests}
            entries.append(
                {"profile_sha256": PLAN_SHA, "seed": seed, "cohort": cohort, "units": 3, "cases": cols}
            )
    return {
        "golden_version": 1,
        "tool": {"name": "sdcscan", "version": "0"},
        "reports": 1,
        "entries": entries,
    }


def write_reports(reports: list[dict[str, Any]], directory: Path) -> None:
    directory.mkdir(parents=True)
    for n, report in enumerate(reports):
        (directory / f"r{n:03d}.json").write_text(json.dumps(report))
