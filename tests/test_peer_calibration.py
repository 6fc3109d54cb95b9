"""A unit must not calibrate away its own faults: gemm_fp's e_max is held against the unit's cohort peers
(issue: "Detection that holds on any device", item 1). The ceiling alone is tested in
tests/test_self_calibration.py."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

from sdcscan import scan
from sdcscan.calibration import measure as calibration
from sdcscan.calibration.peers import caches_to_forget, held_thresholds, out_of_line, reference
from sdcscan.fleet.compare import summarize
from sdcscan.judgement.assemble import judge_and_build
from sdcscan.outcomes import Case
from sdcscan.report import SCHEMA_PATH
from sdcscan.workloads import load
from sdcscan.workloads.base import Context
from tests.helpers.fleet import extract
from tests.helpers.fleet import report as fleet_report
from tests.helpers.fleet import unit as fleet_unit

CPU = torch.device("cpu")
SHAPE = (32, 128, 32)
RUN = {"id": "r", "profile": {"name": "quick", "sha256": "0" * 64}, "seed": 1, "budget_s": 1.0,
       "started_at": "2025-01-01T00:00:00Z", "ended_at": "2025-01-01T00:00:01Z", "duration_s": 1.0}  # fmt: skip


@pytest.fixture
def fresh_state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(calibration, "SHIPPED_TABLE", "data/no-such-table.json")
    return tmp_path / "state" / "sdcscan" / "calibration"


def _record(unit: str, e_max: float, *, k: int = 1024, source: str = "fresh", cache: str = "") -> dict:
    detail = {"dtype": "bfloat16", "checker": "float32", "k": k, "e_max": e_max,
              "threshold_source": source, "calibration_cache": cache}  # fmt: skip
    return {"type": "case", "unit": unit, "index": 0, "attempt": 0, "workload": "gemm_fp",
            "status": "ok", "digest": "d", "seconds": 0.1, "detail": detail}  # fmt: skip


def _judge(outcomes: list[dict], n_units: int) -> dict:
    units = [{"id": f"cpu:{i}", "kind": "cpu", "index": i, "model": "m", "cohort": "c", "notes": []}
             for i in range(n_units)]  # fmt: skip
    return judge_and_build(run=RUN, host={"hostname": "h"}, software={}, cohorts={"c": {}}, units=units,
                           outcomes=outcomes, problems={}, interrupted=None)  # fmt: skip


def test_the_majority_value_is_the_reference_else_the_smallest():
    assert reference([1.0, 1.0, 3.0]) == 1.0
    assert reference([3.0, 3.0, 1.0]) == 3.0  # a strict majority wins even when it is larger
    assert reference([1.0, 3.0]) == 1.0  # a tie: inflation is what would hide faults
    assert reference([2.0, 1.0, 3.0, 3.0]) == 1.0  # 2 of 4 is no strict majority


def test_agreeing_peers_are_all_judged_on_their_cases():
    doc = _judge([_record(f"cpu:{i}", 1.7e-3) for i in range(3)], 3)
    assert [u["verdict"] for u in doc["units"]] == ["pass"] * 3 and doc["exit_code"] == 0
    assert doc["units"][0]["calibration"] == [
        {"dtype": "bfloat16", "checker": "float32", "k": 1024, "e_max": 1.7e-3, "source": "fresh"}
    ]
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.validate(doc["units"][0], {"$defs": schema["$defs"], "$ref": "#/$defs/unit"})


def test_a_unit_whose_calibration_its_peers_do_not_share_is_invalid_not_a_quiet_pass():
    doc = _judge([_record("cpu:0", 1.7e-3), _record("cpu:1", 3.9e-3), _record("cpu:2", 1.7e-3)], 3)
    verdicts = {u["id"]: u["verdict"] for u in doc["units"]}
    assert verdicts == {"cpu:0": "pass", "cpu:1": "invalid", "cpu:2": "pass"} and doc["exit_code"] == 3
    reason = doc["units"][1]["reason"]
    assert "0.0039" in reason and "0.0017" in reason and "2 peer(s)" in reason
    assert any(f["unit"] == "cpu:1" and "0.0039" in json.dumps(f) for f in doc["findings"])


def test_two_units_that_disagree_distrust_the_larger_value():
    doc = _judge([_record("cpu:0", 5e-3), _record("cpu:1", 1.7e-3)], 2)
    assert [u["verdict"] for u in doc["units"]] == ["invalid", "pass"]


def test_only_units_of_one_cohort_and_one_shape_are_peers():
    held = held_thresholds(
        [_record("cpu:0", 1.7e-3), _record("cpu:1", 3.9e-3), _record("cpu:2", 1e-3, k=256)]
    )
    assert out_of_line({"cpu:0": "a", "cpu:1": "b", "cpu:2": "a"}, held) == {}


def test_re_runs_and_records_without_a_calibration_are_not_votes():
    rerun = {**_record("cpu:1", 9e-3), "attempt": 1}
    refused = {**_record("cpu:2", 9e-3), "detail": {"dtype": "bfloat16"}}
    held = held_thresholds([_record("cpu:0", 1.7e-3), _record("cpu:1", 1.7e-3), rerun, refused])
    assert sorted(held) == ["cpu:0", "cpu:1"] and out_of_line({}, held) == {}


def _gemm_fp_record(unit: str) -> dict:
    """A real gemm_fp case on this CPU, recorded as the journal keeps it."""
    cls = load("gemm_fp")
    params = {**cls.spec.defaults, "dtypes": ["float32"], "shapes": [list(SHAPE)], "repeats": [1],
              "checkers": ["float32"], "calibration": ""}  # fmt: skip
    ctx = Context(unit=unit, device=CPU, run_seed=1, params=params)
    workload = cls(params)
    workload.prepare(ctx)
    ctx.begin_case(None)
    o = workload.run(ctx, Case(index=0, workload="gemm_fp", seed=0, occurrence=0))
    return {"type": "case", "unit": unit, "index": 0, "attempt": 0, "workload": "gemm_fp",
            "status": o.status, "digest": o.digest, "seconds": 0.1, "detail": o.detail}  # fmt: skip


def test_a_cache_a_faulty_unit_inflated_is_caught_by_its_peers_and_forgotten(fresh_state):
    """cpu:0 measures and caches; the cache is then inflated 2× (still under the ceiling, as a faulty unit
    could write it), cpu:1 reads it; cpu:2 measures again. cpu:1 is out of line, the cache is removed."""
    first = _gemm_fp_record("cpu:0")
    assert first["detail"]["threshold_source"] == "fresh"
    (path,) = fresh_state.iterdir()
    table = json.loads(path.read_text())
    table["entries"][0]["e_max"] *= 2
    assert table["entries"][0]["e_max"] <= first["detail"]["e_max_ceiling"]
    path.write_text(json.dumps(table))
    inflated = _gemm_fp_record("cpu:1")
    assert inflated["detail"]["threshold_source"] == "cache"
    assert inflated["detail"]["calibration_cache"] == path.name
    path.unlink()
    third = _gemm_fp_record("cpu:2")
    outcomes = [first, inflated, third]
    doc = _judge(outcomes, 3)
    assert [u["verdict"] for u in doc["units"]] == ["pass", "invalid", "pass"]
    assert "(cache)" in doc["units"][1]["reason"]
    assert caches_to_forget({f"cpu:{i}": "c" for i in range(3)}, outcomes) == {path.name}
    scan._forget_calibrations({path.name})
    assert not path.exists()


def test_agreeing_units_keep_their_cache(fresh_state):
    outcomes = [_gemm_fp_record(f"cpu:{i}") for i in range(2)]
    assert [o["detail"]["threshold_source"] for o in outcomes] == ["fresh", "cache"]
    assert caches_to_forget({"cpu:0": "c", "cpu:1": "c"}, outcomes) == set()
    assert [u["verdict"] for u in _judge(outcomes, 2)["units"]] == ["pass", "pass"]


def _host(name: str, e_max: object, units: int = 1) -> dict:
    """A report of a host whose gemm_fp units all held `e_max` for bf16 at K=1024."""
    docs = []
    for k in range(units):
        doc = fleet_unit(f"cuda:{k}")
        doc["calibration"] = [
            {"dtype": "bfloat16", "checker": "float32", "k": 1024, "e_max": e_max, "source": "fresh"}
        ]
        docs.append(doc)
    return fleet_report(name, docs)


def test_compare_names_the_host_whose_calibration_its_cohort_does_not_hold():
    """One-GPU hosts have no peer in their own run: the fleet is their peer. A host whose e_max differs is
    named with both values; it is not proof of a fault, so the exit code stays 0."""
    fleet = [_host(f"h{n}", 1.7e-3) for n in range(4)] + [_host("odd", 3.9e-3)]
    s = summarize(extract(fleet))
    found = [(f.host, f.kind) for f in s.findings]
    assert found == [("odd", "calibration")] and s.exit_code == 0
    e = s.findings[0].evidence
    assert (e["e_max"], e["reference_e_max"], e["hosts_holding_reference"], e["hosts"]) == (
        3.9e-3,
        1.7e-3,
        4,
        5,
    )
    assert summarize(extract(fleet[:4])).findings == ()


def test_a_host_counts_once_however_many_units_held_its_value():
    """Eight units of one host holding a larger value do not make it the reference against two hosts."""
    fleet = [_host("a", 1.7e-3), _host("b", 1.7e-3), _host("big", 3.9e-3, units=8)]
    assert [(f.host, f.kind) for f in summarize(extract(fleet)).findings] == [("big", "calibration")]


@pytest.mark.parametrize("bad", [None, True, "0.0017", [1.7e-3], {"x": 1}, float("nan"), 10**400])
def test_a_calibration_field_of_any_type_is_ignored_not_a_crash(bad):
    fleet = [_host(f"h{n}", 1.7e-3) for n in range(2)] + [_host("odd", bad)]
    assert summarize(extract(fleet)).findings == ()
