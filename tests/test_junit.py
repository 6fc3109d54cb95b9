"""JUnit XML: a real consumer (junitparser) sees one testsuite per unit and one testcase per workload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase

from sdcscan.outputs.junit import write_junit
from tests.helpers.reports import make_report


def _parse(report: dict[str, Any], tmp_path: Path) -> dict[str, dict[str, TestCase]]:
    path = tmp_path / "sdcscan.xml"
    write_junit(report, path)
    xml = JUnitXml.fromfile(str(path))
    # suites are named HOST/UNIT: drop the host (make_report's node-a) to index them by unit
    return {suite.name.removeprefix("node-a/"): {case.name: case for case in suite} for suite in xml}


def _kinds(case: TestCase) -> list[type]:
    return [type(r) for r in case.result]


def test_one_suite_per_unit_one_case_per_workload(tmp_path: Path) -> None:
    """Every (unit, workload) pair of the plan is one testcase."""
    suites = _parse(make_report(fail_unit=None), tmp_path)
    assert set(suites) == {"cpu:0", "cpu:1"}
    for cases in suites.values():
        assert set(cases) == {"train", "matmul_golden"}
        assert all(c.is_passed for c in cases.values())
        assert all(c.classname.startswith("sdcscan.node-a.cpu:") for c in cases.values())


def test_invariant_failure_carries_the_mismatch_summary(tmp_path: Path) -> None:
    """The failing unit's workload fails with expected/actual/mask lines; its other workload passes."""
    suites = _parse(make_report(fail_unit="cpu:1"), tmp_path)
    bad = suites["cpu:1"]["matmul_golden"]
    assert _kinds(bad) == [Failure]
    failure = bad.result[0]
    assert "cpu:1 computed wrong results in matmul_golden" in failure.message
    assert failure.type == "invariant"
    assert "expected 0x41200000 actual 0x41200400 mask 0x00000400" in failure.text
    assert suites["cpu:1"]["train"].is_passed
    assert suites["cpu:0"]["matmul_golden"].is_passed


def test_consensus_failure_names_the_workload_of_the_dispute(tmp_path: Path) -> None:
    """A unit failed on digests alone fails the testcase of the workload whose dispute it lost."""
    report = make_report(fail_unit=None)
    unit = report["units"][1]
    unit["verdict"], report["verdict"] = "fail", "fail"
    unit["reason"] = "digest disagreed with the cohort majority at case 4 (train)"
    digests = {"cpu:0": "a" * 16, "cpu:1": "b" * 16, "cpu:2": "a" * 16}
    report["disputes"] = [
        {"index": 4, "workload": "train", "cohort": "c", "digests": digests, "majority": "a" * 16}
    ]
    suites = _parse(report, tmp_path)
    assert _kinds(suites["cpu:1"]["train"]) == [Failure]
    assert suites["cpu:1"]["train"].result[0].type == "consensus"
    assert suites["cpu:1"]["matmul_golden"].is_passed


def test_invalid_unit_is_an_error_and_counts_add_up(tmp_path: Path) -> None:
    """An invalid unit's testcases are errors, with the unit's reason; suite totals match."""
    report = make_report(fail_unit=None, invalid_unit="cpu:1")
    path = tmp_path / "j.xml"
    write_junit(report, path)
    xml = JUnitXml.fromfile(str(path))
    suite = next(s for s in xml if s.name == "node-a/cpu:1")
    assert (suite.tests, suite.errors, suite.failures) == (2, 2, 0)
    case = next(iter(suite))
    assert _kinds(case) == [Error]
    assert "worker died" in case.result[0].message


def test_workload_not_reached_is_skipped(tmp_path: Path) -> None:
    """A workload of the plan the unit never reached within the budget is skipped, not passed."""
    report = make_report(fail_unit=None)
    report["run"]["workloads"].append("gemm_int8")
    suites = _parse(report, tmp_path)
    assert _kinds(suites["cpu:0"]["gemm_int8"]) == [Skipped]


def test_control_characters_do_not_break_the_xml(tmp_path: Path) -> None:
    """A reason with control characters still yields parseable XML."""
    report = make_report(fail_unit="cpu:1")
    report["units"][1]["reason"] = "bad \x01 bytes"
    assert "cpu:1" in _parse(report, tmp_path)


def test_two_hosts_files_keep_their_units_apart(tmp_path: Path) -> None:
    """Issue 45: a CI job collecting several hosts' JUnit files merged their `cpu:0` suites; the host is
    in every suite's and testcase's name."""
    names = set()
    for host in ("node-a", "node-b"):
        path = tmp_path / f"{host}.xml"
        write_junit(make_report(fail_unit=None, hostname=host), path)
        for suite in JUnitXml.fromfile(str(path)):
            names |= {(suite.name, case.classname, case.name) for case in suite}
    assert ("node-b/cpu:0", "sdcscan.node-b.cpu:0", "train") in names
    assert len(names) == 2 * 2 * 2  # hosts x units x workloads, none merged
