"""`compare --json`'s `checked`: per (profile, cohort, workload), the checked ops of passing units summed
exactly and the rate bound they prove; the same whatever the input order or form; never a speed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sdcscan.fleet.compare import Options, compare_from, summarize
from sdcscan.fleet.ingest import ingest
from sdcscan.fleet.reading import read_reports
from sdcscan.fleet.summary import FleetSummary
from tests.helpers.fleet import report, unit

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

BIG = 2**60 + 2**9  # whole numbers beyond 2^53: a float sum of several would depend on their order


def checked(n: float, *, detection: float | None = 1.0, bounded: bool = True) -> dict[str, dict[str, Any]]:
    return {
        "matmul_golden": {
            "checked_ops": float(n),
            "op": "multiply-add",
            "evidence": "invariant",
            "detection": detection,
            "sdc_rate_bound": 3.0 / (n * detection) if bounded and detection else None,
        }
    }


def fleet() -> list[dict[str, Any]]:
    """Three hosts of cohort c1: five passing units with checked ops, one failing unit, one unit that its
    own run passed but whose digest differs from every peer's (divergent), and one host of cohort c2."""
    wrong = {0: "f" * 16}
    return [
        report("a", [unit("cpu:0", checked=checked(BIG)), unit("cpu:1", checked=checked(BIG + 2**12))]),
        report(
            "b",
            [
                unit("cpu:0", checked=checked(3 * BIG)),
                unit("cpu:1", verdict="fail", checked=checked(5.0, bounded=False)),
            ],
        ),
        report(
            "c",
            [
                unit("cpu:0", checked=checked(7.0)),
                unit("cpu:1", checked=checked(1e12)),
                unit("cpu:2", digests=wrong, checked=checked(1e15)),
            ],
        ),
        report("d", [unit("cpu:0", cohort="c2", checked=checked(2e9, detection=None))]),
    ]


def write(reports: list[dict[str, Any]], directory: Path) -> Path:
    for i, r in enumerate(reports):
        (directory / f"{i:02d}.json").parent.mkdir(parents=True, exist_ok=True)
        (directory / f"{i:02d}.json").write_text(json.dumps(r))
    return directory


def compare_files(directory: Path, opts: Options) -> FleetSummary:
    found, skipped = read_reports([str(directory)], workers=1)
    return summarize(found, options=opts, skipped=skipped)


def test_checked_ops_of_passing_units_are_summed_exactly_per_cohort_and_workload(tmp_path: Path) -> None:
    """Failing and divergent units are left out; the sum is exact beyond 2^53."""
    doc = compare_files(write(fleet(), tmp_path / "r"), Options()).to_dict()
    c1, c2 = doc["checked"]
    total = BIG + (BIG + 2**12) + 3 * BIG + 7 + 10**12  # Python integers: exact
    assert (c1["cohort"], c1["workload"], c1["op"], c1["units"]) == ("c1", "matmul_golden", "multiply-add", 5)
    assert c1["checked_ops"] == float(total) and c1["detection"] == 1.0
    assert c1["sdc_rate_bound"] == 3.0 / float(total)
    assert c2["cohort"] == "c2" and c2["units"] == 1 and c2["checked_ops"] == 2e9
    assert c2["detection"] is None and c2["sdc_rate_bound"] is None  # a unit without detection: no bound


def test_checked_is_the_same_whatever_the_input_order_and_form(tmp_path: Path) -> None:
    """Files forwards, backwards and through ingest + compare --from: byte-identical documents."""
    opts = Options()
    forward = compare_files(write(fleet(), tmp_path / "f"), opts).to_dict()
    backward = compare_files(write(fleet()[::-1], tmp_path / "b"), opts).to_dict()
    ingest([str(tmp_path / "f")], tmp_path / "ds", workers=1)
    warehoused = compare_from(tmp_path / "ds", opts).to_dict()
    assert forward["checked"]
    assert json.dumps(forward) == json.dumps(backward) == json.dumps(warehoused)


def test_reports_without_checked_give_an_empty_list(tmp_path: Path) -> None:
    """Reports written before sdcscan.proof compare as before, with `checked` empty."""
    doc = compare_files(write([report("a"), report("b")], tmp_path / "r"), Options()).to_dict()
    assert doc["checked"] == []


def test_checked_ops_are_never_a_speed(tmp_path: Path) -> None:
    """Six units of one speed, one with a thousandth of the others' checked ops: nobody is slow, while a
    unit at half the speed still is (the slow rules read speeds only)."""
    units = [unit(f"cpu:{i}", ops={"matmul_golden": 3e10}, checked=checked(1e15)) for i in range(6)]
    units[0] = unit("cpu:0", ops={"matmul_golden": 3e10}, checked=checked(1e12))
    opts = Options(slow_min_units=3)
    doc = compare_files(write([report("a", units)], tmp_path / "same"), opts).to_dict()
    assert not [f for f in doc["findings"] if f["kind"] == "slow"]
    units[5] = unit("cpu:5", ops={"matmul_golden": 1.5e10}, checked=checked(1e15))
    slow = compare_files(write([report("a", units)], tmp_path / "slow"), opts).to_dict()
    assert [(f["kind"], f["unit"]) for f in slow["findings"]] == [("slow", "cpu:5")]
