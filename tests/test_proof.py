"""What a pass proves (sdcscan.proof): checked ops per workload, the detection each is held to (the self-test's
floors, so the two cannot drift), the 95% rate bound, and how the report, its validator and the console carry
them."""

from __future__ import annotations

import copy
import importlib
from io import StringIO
from typing import Any

import pytest
from rich.console import Console

from sdcscan import proof
from sdcscan.errors import ReportError
from sdcscan.faults.hardware import HARDWARE_KINDS
from sdcscan.judgement.assemble import judge_and_build
from sdcscan.outputs.prom import prom_text
from sdcscan.render.run import proof_lines, render_summary
from sdcscan.report import validate_report
from sdcscan.workloads import SPECS
from tests.helpers.reports import make_report

RUN = {"id": "r", "profile": {"name": "burnin", "sha256": "0" * 64}, "seed": 1, "budget_s": 1.0,
       "started_at": "2025-01-01T00:00:00Z", "ended_at": "2025-01-01T00:00:01Z", "duration_s": 1.0}  # fmt: skip
SELFTESTED = ("gemm_int8", "gemm_fp", "embbag_int8", "matmul_golden")
COVERAGE = {name: spec.coverage for name, spec in SPECS.items() if spec.coverage is not None}


def _hardware_floors(workload: str) -> list[float]:
    """The self-test's floors for the hardware fault models, over the variants whose parameters the
    workload's coverage applies to (its `applies`, else every variant)."""
    mixin = importlib.import_module(f"sdcscan.workloads.{workload}.selftest_spec").SelftestMixin
    spec = importlib.import_module(f"sdcscan.workloads.{workload}.spec").SPEC
    applies = COVERAGE[workload].applies
    floors = []
    for variant, params in mixin.selftest_variants.items():
        if any({**spec.defaults, **params}.get(k) != v for k, v in applies.items()):
            continue
        for site in spec.fault_sites:
            for label in mixin.selftest_bits(variant, site):
                if isinstance(label, str) and label.split(":")[0] in HARDWARE_KINDS:
                    floor = mixin.selftest_floor(variant, site, label)
                    if floor is not None:
                        floors.append(floor)
    return floors


@pytest.mark.parametrize("workload", SELFTESTED)
def test_each_detection_is_the_lowest_selftest_floor_of_the_hardware_fault_models(workload: str) -> None:
    """d is derived from selftest_spec: a floor changed there fails here until the table follows."""
    floors = _hardware_floors(workload)
    assert floors, f"{workload}: no floored hardware fault model in the variants its bound applies to"
    assert COVERAGE[workload].detection == min(floors)


def test_the_invariant_workloads_are_the_selftested_ones_and_digests_are_never_bounded() -> None:
    """Only workloads a self-test floors carry a detection; digest coverage never does."""
    invariant = {w for w, c in COVERAGE.items() if c.evidence == "invariant"}
    assert invariant == set(SELFTESTED)
    assert all(c.detection is None for c in COVERAGE.values() if c.evidence == "digest")


def test_the_bound_is_the_rule_of_three_over_checked_ops_and_detection() -> None:
    """3 / (n·d); nothing checked or no detection: no bound."""
    assert proof.rate_bound(4.1e12, 1.0) == pytest.approx(7.317e-13, rel=1e-3)
    assert proof.rate_bound(1e9, 0.5) == pytest.approx(6e-9)
    assert proof.rate_bound(0.0, 1.0) is None
    assert proof.rate_bound(1e9, None) is None
    assert proof.rate_bound(1e9, 0.0) is None


def test_sentences_name_the_op_and_round_the_bound_up() -> None:
    """The terminal's words; a bound shown is rounded up, so it stays a bound."""
    bound = proof.rate_bound(4.1e12, 1.0)
    line = proof.sentence(4.1e12, "multiply-add", "invariant", bound, "pass")
    assert line == "no corruption in 4.1e12 checked multiply-adds: rate < 7.4e-13 per op (95%)"
    assert proof.sci(7.31e-13, up=True) == "7.4e-13" and proof.sci(7.31e-13) == "7.3e-13"
    assert proof.sci(9.96, up=True) == "1e1" and proof.sci(2.0) == "2"
    assert "no bound: the unit miscomputed" in proof.sentence(1e9, "multiply-add", "invariant", None, "fail")
    digest = proof.sentence(1e9, "multiply-add", "digest", None, "pass")
    assert "covered by digests" in digest and "compared with peers" in digest


def test_checked_ops_reuse_the_throughput_count() -> None:
    """GEMM ops count 2 per multiply-add; an embbag lookup pools `dim` elements; others are not counted."""
    assert COVERAGE["gemm_int8"].checked_ops(2e9, {}) == 1e9
    assert COVERAGE["train"].checked_ops(6e9, {}) == 3e9
    assert COVERAGE["embbag_int8"].checked_ops(1000.0, {"dim": 128}) == 128_000
    assert COVERAGE["embbag_int8"].checked_ops(1000.0, {}) is None
    assert "collective" not in COVERAGE
    assert COVERAGE["gemm_fp"].checked_ops(0.0, {}) is None


def test_a_floor_holds_only_for_the_selftests_parameters() -> None:
    """gemm_int8 mod 127 and gemm_fp off its self-test's inputs are not held to the floor."""
    assert COVERAGE["gemm_int8"].holds_for({"scheme": "mod2_32"})
    assert not COVERAGE["gemm_int8"].holds_for({"scheme": "mod127"})
    assert COVERAGE["gemm_fp"].holds_for({"inputs": "abs_normal"})
    assert not COVERAGE["gemm_fp"].holds_for({"inputs": "normal"})
    assert COVERAGE["matmul_golden"].holds_for({})


# --- the report -----------------------------------------------------------------------------------


def _case(
    unit: str, index: int, workload: str, ops: float, detail: dict[str, Any], status: str = "ok"
) -> dict:
    return {"type": "case", "unit": unit, "index": index, "attempt": 0, "workload": workload,
            "status": status, "digest": f"d{index}", "seconds": 0.5, "ops": ops, "ops_unit": "op",
            "phases": {}, "detail": detail, "mismatches": []}  # fmt: skip


def _report(outcomes: list[dict], units: tuple[str, ...] = ("cpu:0",)) -> Any:
    facts = [{"id": u, "kind": "cpu", "model": "m", "cohort": "c", "notes": []} for u in units]
    return judge_and_build(run=RUN, host={"hostname": "h"}, software={}, cohorts={"c": {}}, units=facts,
                           outcomes=outcomes, problems={}, interrupted=None)  # fmt: skip


def test_a_passing_unit_reports_checked_ops_and_its_bound_per_workload() -> None:
    """The judged report carries checked ops from the cases' ops and the bound a pass proves."""
    mod2 = {"scheme": "mod2_32"}
    doc = _report([
        _case("cpu:0", 0, "gemm_int8", 2e11, mod2),
        _case("cpu:0", 1, "gemm_int8", 2e11, mod2),
        _case("cpu:0", 2, "embbag_int8", 1e6, {"dim": 128}),
        _case("cpu:0", 3, "train", 6e9, {}),
    ])  # fmt: skip
    unit = doc["units"][0]
    assert unit["verdict"] == "pass"
    gemm, embbag, train = (unit["checked"][w] for w in ("gemm_int8", "embbag_int8", "train"))
    assert gemm == {"checked_ops": 2e11, "op": "multiply-add", "evidence": "invariant", "detection": 1.0,
                    "sdc_rate_bound": 3.0 / 2e11}  # fmt: skip
    assert embbag["checked_ops"] == 1.28e8 and embbag["sdc_rate_bound"] == pytest.approx(3 / (1.28e8 * 0.99))
    assert train["evidence"] == "digest" and train["sdc_rate_bound"] is None
    validate_report(doc)


def test_cases_outside_the_floor_and_cases_that_raised_give_no_bound_or_no_ops() -> None:
    """A mod 127 case removes gemm_int8's bound; a case that raised adds no checked ops."""
    doc = _report([
        _case("cpu:0", 0, "gemm_int8", 2e11, {"scheme": "mod2_32"}),
        _case("cpu:0", 1, "gemm_int8", 2e11, {"scheme": "mod127"}),
        _case("cpu:0", 2, "matmul_golden", 2e9, {}),
        _case("cpu:0", 3, "matmul_golden", 2e9, {}, status="error"),
    ])  # fmt: skip
    checked = doc["units"][0]["checked"]
    assert checked["gemm_int8"]["checked_ops"] == 2e11 and checked["gemm_int8"]["detection"] is None
    assert checked["gemm_int8"]["sdc_rate_bound"] is None
    assert checked["matmul_golden"]["checked_ops"] == 1e9  # the case that raised checked nothing


def test_a_failing_unit_gets_checked_ops_but_no_bound() -> None:
    """A unit that miscomputed proves no rate; its passing peer does."""
    bad = _case("cpu:1", 0, "matmul_golden", 2e9, {}, status="mismatch")
    bad["mismatches"] = [{"check": "golden", "where": "[0, 0]", "expected": "1", "actual": "2", "mask": None}]
    doc = _report([_case("cpu:0", 0, "matmul_golden", 2e9, {}), bad], units=("cpu:0", "cpu:1"))
    good, failed = doc["units"]
    assert failed["verdict"] == "fail" and failed["checked"]["matmul_golden"]["checked_ops"] == 1e9
    assert failed["checked"]["matmul_golden"]["sdc_rate_bound"] is None
    assert good["checked"]["matmul_golden"]["sdc_rate_bound"] == 3e-9
    validate_report(doc)


# --- the validator --------------------------------------------------------------------------------


def test_reports_without_checked_stay_valid_and_with_it_validate() -> None:
    """`checked` is optional: older reports stay valid."""
    validate_report(make_report())
    validate_report(make_report(checked=True))


@pytest.mark.parametrize(
    ("unit", "change", "message"),
    [
        (0, {"sdc_rate_bound": 1e-12}, "tighter than 3 / \\(checked_ops \\* detection\\)"),
        (0, {"detection": None}, "a rate bound without checked ops and a detection"),
        (0, {"detection": 1.5}, "more than 1"),
        (0, {"checked_ops": -1.0}, "less than 0"),
        (0, {"evidence": "hope"}, "checked.matmul_golden.evidence"),
    ],
)
def test_the_validator_refuses_a_bound_the_report_does_not_support(
    unit: int, change: dict[str, Any], message: str
) -> None:
    """A bound tighter than its counts, or without them, and values out of range are refused."""
    report = copy.deepcopy(make_report(checked=True))
    report["units"][unit]["checked"]["matmul_golden"].update(change)
    with pytest.raises(ReportError, match=message):
        validate_report(report)


# --- the console ----------------------------------------------------------------------------------


def test_the_summary_says_what_each_pass_proves() -> None:
    """One line per unit and workload under the verdict table."""
    report = validate_report(make_report(checked=True))
    out = StringIO()
    render_summary(report, Console(file=out, width=200, no_color=True))
    text = out.getvalue()
    assert (
        "cpu:0 matmul_golden: no corruption in 8e9 checked multiply-adds: rate < 3.8e-10 per op (95%)" in text
    )
    assert "cpu:1 matmul_golden: 8e9 checked multiply-adds; no bound: the unit miscomputed" in text
    assert "cpu:0 train: 8e9 multiply-adds covered by digests" in text


def test_a_bound_left_on_a_unit_that_did_not_pass_is_never_shown() -> None:
    """A cluster report may fail a unit whose rank's report passed it, bound included: readers go by the
    unit's verdict, so neither the console nor Prometheus shows that bound."""
    report = make_report(checked=True)
    report["units"][1]["checked"]["matmul_golden"]["sdc_rate_bound"] = 3 / 8e9
    valid = validate_report(report)
    assert "cpu:1 matmul_golden: 8e9 checked multiply-adds; no bound: the unit miscomputed" in proof_lines(
        valid
    )
    assert 'sdcscan_unit_sdc_rate_bound{unit="cpu:1"' not in prom_text(valid)


def test_many_units_show_the_weakest_passing_unit_per_workload() -> None:
    """Beyond max_units, one line per workload: its weakest passing unit."""
    report = make_report(checked=True)
    report["units"][0]["checked"]["matmul_golden"].update(checked_ops=1e9, sdc_rate_bound=3e-9)
    lines = proof_lines(validate_report(report), max_units=1)
    assert lines[0] == (
        "matmul_golden, weakest of 1 passing units (cpu:0): no corruption in 1e9 checked multiply-adds: "
        "rate < 3e-9 per op (95%)"
    )


def test_every_per_unit_workload_states_its_coverage_and_plain_ops() -> None:
    """A workload registered without coverage would report no checked operations and no bound, and one
    without plain ops no efficiency, silently: every per-unit workload's spec states both (the
    distributed ones, judged by their ranks' agreement, have neither)."""
    per_unit = {name for name, spec in SPECS.items() if not spec.distributed}
    assert set(COVERAGE) == per_unit
    assert {name for name, spec in SPECS.items() if spec.plain_ops is not None} == per_unit
