"""Each unit knows the plain-op peak of its workloads and the report states the efficiency (issue 10,
item 1): the plain ops per workload, the timing loop, the per-fingerprint cache, the report's fields,
`info --peaks` and a unit whose peak cannot be measured."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import torch
from click.testing import CliRunner

from sdcscan import torch_setup
from sdcscan.errors import ReportError
from sdcscan.judgement.assemble import judge_and_build
from sdcscan.peaks import rates
from sdcscan.peaks.plain_ops import case_peak, combined_rate, plain_ops
from sdcscan.peaks.rates import PeakSource, workload_peak
from sdcscan.report import SCHEMA_PATH, validate_report
from sdcscan.run import worker
from sdcscan.workloads import SPECS
from sdcscan.workloads.workload_spec import PlainOp

CPU = torch.device("cpu")
OP = PlainOp("matmul", "float32", (8, 16, 8), 1.0)
RUN = {"id": "r", "profile": {"name": "quick", "sha256": "0" * 64}, "seed": 1, "budget_s": 1.0,
       "started_at": "2025-01-01T00:00:00Z", "ended_at": "2025-01-01T00:00:01Z", "duration_s": 1.0}  # fmt: skip
TINY = {name: dict(spec.tiny) for name, spec in SPECS.items()}


class _Counting:
    """A stand-in for `rates.measure` that returns a fixed rate and counts its calls."""

    def __init__(self, rate: float = 1e9) -> None:
        self.rate, self.calls = rate, 0

    def __call__(self, op: PlainOp, device: torch.device) -> float:
        self.calls += 1
        return self.rate


def _failing(op: PlainOp, device: torch.device) -> float:
    raise RuntimeError("no kernel for this dtype here")


# --- plain ops and their combination -----------------------------------------------------------


def test_every_builtin_workload_states_its_plain_ops_at_its_own_shapes():
    for name in SPECS:
        if SPECS[name].distributed:  # their rate is bus bandwidth, in their cases' details
            with pytest.raises(KeyError):
                plain_ops(name, {}, CPU)
            continue
        ops = plain_ops(name, {}, CPU)
        assert ops and all(op.weight > 0 for op in ops), name
    golden = plain_ops("matmul_golden", {"m": 4, "k": 8, "n": 2, "repeats": [3, 1, 1, 1]}, CPU)
    assert [op.dtype for op in golden] == ["float32", "float64", "bfloat16", "float16"]
    assert golden[0].shape == (4, 8, 2) and golden[0].weight == 2 * 4 * 8 * 2 * 3
    # gemm_int8's A is unsigned on CPUs, signed on GPUs, as the workload runs it
    assert {op.dtype for op in plain_ops("gemm_int8", {}, CPU)} == {"uint8"}
    assert {op.dtype for op in plain_ops("gemm_int8", {}, torch.device("cuda", 0))} == {"int8"}
    assert {op.kind for op in plain_ops("embbag_int8", {}, CPU)} == {"embedding_bag"}
    train = plain_ops("train", {"inputs": 3, "hidden": 5, "classes": 2, "batch": 7}, CPU)
    assert (7, 3, 5) in [op.shape for op in train] and len(train) == 9  # 3 GEMMs per Linear layer


def test_the_combined_peak_is_total_ops_over_total_plain_time():
    # 1 op at 1/s and 1 op at 2/s: 2 ops in 1.5 s
    assert combined_rate([(1.0, 1.0), (1.0, 2.0)]) == pytest.approx(2 / 1.5)
    assert combined_rate([(1.0, 1.0), (1.0, None)]) is None  # a partial peak would flatter the unit
    assert combined_rate([]) is None


# --- timing --------------------------------------------------------------------------------------


def test_timing_warms_up_then_takes_the_best_call_and_stops_on_a_slow_op():
    # warm-up 1/8, 1/8; timed 1/8, 1/16, 1/8: the budget (1/4) is spent after the third timed call
    ticks = iter([0.0, 0.125, 1.0, 1.125, 2.0, 2.125, 3.0, 3.0625, 4.0, 4.125, 5.0, 5.0625])
    calls = []
    best = rates.time_best(lambda: calls.append(1), CPU, clock=lambda: next(ticks))
    assert len(calls) == 2 + 3 and best == 0.0625
    slow = iter([0.0, 5.0, 6.0, 9.0])
    calls.clear()
    assert rates.time_best(lambda: calls.append(1), CPU, clock=lambda: next(slow)) == 3.0
    assert len(calls) == 2  # one warm-up, one timed call: no op class takes much more than a second


@pytest.mark.parametrize(
    "op",
    [
        PlainOp("matmul", "float32", (8, 16, 8), 1.0),
        PlainOp("matmul", "bfloat16", (8, 16, 8), 1.0),
        PlainOp("int_mm", "uint8", (8, 64, 8), 1.0),
        PlainOp("embedding_bag", "int8", (64, 16, 4, 1, 3), 1.0),
        PlainOp("embedding_bag", "int4", (64, 16, 4, 1, 3), 1.0),
    ],
)
def test_each_op_class_is_measured_on_the_cpu(op):
    assert rates.measure(op, CPU) > 0


# --- cache ---------------------------------------------------------------------------------------


def test_the_fingerprint_holds_what_a_rate_depends_on():
    fp = rates.fingerprint(CPU)
    assert {"device_model", "device_kind", "torch", "cpu_capability", "threads", "blas"} <= set(fp)
    assert "dtype" not in fp and "checker" not in fp
    base = rates._cache_file(Path("d"), fp, OP)
    assert rates._cache_file(Path("d"), {**fp, "threads": fp["threads"] + 1}, OP) != base
    assert rates._cache_file(Path("d"), fp, PlainOp("matmul", "float64", OP.shape, 1.0)) != base
    assert rates._cache_file(Path("d"), fp, PlainOp("matmul", "float32", (8, 16, 9), 1.0)) != base
    assert (
        rates._cache_file(Path("d"), fp, PlainOp("matmul", "float32", OP.shape, 5.0)) == base
    )  # weight: not the op's


def test_a_measured_peak_is_cached_and_read_back_without_measuring(tmp_path):
    first = _Counting(2e9)
    assert PeakSource(CPU, tmp_path, first).rate(OP) == (2e9, "fresh")
    assert PeakSource(CPU, tmp_path, first).rate(OP) == (2e9, "cache")
    assert first.calls == 1
    (path,) = tmp_path.iterdir()
    doc = json.loads(path.read_text())
    assert (
        doc["schema"] == rates.CACHE_SCHEMA
        and doc["op"] == OP.key()
        and doc["fingerprint"] == rates.fingerprint(CPU)
    )


def test_each_op_is_measured_once_per_unit_however_many_workloads_share_it(tmp_path):
    count = _Counting()
    source = PeakSource(CPU, tmp_path / "unwritten", count)
    for _ in range(3):
        source.rate(OP)
    assert count.calls == 1


@pytest.mark.parametrize(
    "damage",
    [
        "{not json",
        json.dumps({"schema": "other", "ops_per_s": 1.0}),
        json.dumps({"schema": rates.CACHE_SCHEMA, "fingerprint": {}, "op": OP.key(), "ops_per_s": 1.0}),
        "FINGERPRINT_OK:-1",
        "FINGERPRINT_OK:true",
        "FINGERPRINT_OK:1e308",  # finite, positive, and no unit's (issue 43)
    ],
)
def test_a_damaged_cache_is_measured_again_and_replaced(tmp_path, damage):
    PeakSource(CPU, tmp_path, _Counting(1e9)).rate(OP)
    (path,) = tmp_path.iterdir()
    if damage.startswith("FINGERPRINT_OK:"):
        doc = json.loads(path.read_text())
        doc["ops_per_s"] = json.loads(damage.split(":", 1)[1])
        damage = json.dumps(doc)
    path.write_text(damage)
    again = _Counting(3e9)
    assert PeakSource(CPU, tmp_path, again).rate(OP) == (3e9, "fresh") and again.calls == 1
    assert json.loads(path.read_text())["ops_per_s"] == 3e9


def test_an_unwritable_cache_costs_only_the_cache(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    source = PeakSource(CPU, blocker / "peaks", _Counting(1e9))  # a directory under a file: cannot exist
    assert source.rate(OP) == (1e9, "fresh")
    assert len(source.notes) == 1 and "could not cache" in source.notes[0]


# --- per workload and per unit ---------------------------------------------------------------------


def test_a_workload_peak_is_plain_data_with_every_op_and_its_source(tmp_path):
    found = workload_peak(PeakSource(CPU, tmp_path, _Counting(1e9)), "gemm_fp", {})
    assert found["error"] is None and found["peak_ops_per_s"] == pytest.approx(1e9)
    assert [o["dtype"] for o in found["ops"]] == ["float32", "float64", "bfloat16", "float16"]
    assert {o["source"] for o in found["ops"]} == {"fresh"}
    json.dumps(found)  # crosses the worker's pipe and lands in the journal


def test_a_peak_that_cannot_be_measured_is_null_with_a_note(tmp_path):
    found, notes = rates.unit_peaks(CPU, {"gemm_fp": {}}, PeakSource(CPU, tmp_path, _failing))
    assert found["gemm_fp"]["peak_ops_per_s"] is None and "no kernel" in found["gemm_fp"]["error"]
    assert notes and "gemm_fp" in notes[0] and "efficiency is not reported" in notes[0]


class _Pipe:
    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def send(self, msg: tuple) -> None:
        self.sent.append(msg)


def test_a_unit_whose_peak_measurement_raises_still_runs_its_cases(monkeypatch, tmp_path):
    from sdcscan.profile import load_profile
    from sdcscan.units import Unit

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setattr(worker, "configure_torch", lambda unit, threads: torch)  # no pinning of pytest
    monkeypatch.setattr(rates, "measure", _failing)
    profile = load_profile("quick")
    cfg = worker.WorkerConfig(
        unit=Unit("cpu:0", "cpu", 0, "m"),
        profile=profile,
        seed=1,
        threads=1,
        param_overrides={w.name: TINY[w.name] for w in profile.workloads},
    )
    pipe = _Pipe()
    engine = worker._Engine(cfg, pipe)
    assert engine.peaks and all(p["peak_ops_per_s"] is None for p in engine.peaks.values())
    assert any(n.startswith("peaks:") for n in engine.notes)
    engine.run_case(0, attempt=0)
    (outcome,) = [m for m in pipe.sent if m[0] == "outcome"]
    assert outcome[-1]["status"] == "ok"


def test_a_unit_whose_whole_peak_step_fails_gets_a_note_and_no_peaks(monkeypatch):
    def explode(device, workloads):
        raise MemoryError("out of memory")

    monkeypatch.setattr(rates, "unit_peaks", explode)
    notes: list[str] = []
    assert worker._measure_peaks(CPU, {"train": {}}, notes) == {}
    assert notes and "MemoryError" in notes[0]


# --- the report ----------------------------------------------------------------------------------


def _case(index: int, workload: str, ops: float, seconds: float, phases: dict) -> dict:
    return {"type": "case", "unit": "cpu:0", "index": index, "attempt": 0, "workload": workload,
            "status": "ok", "digest": "d", "seconds": seconds, "ops": ops, "ops_unit": "flop",
            "phases": phases}  # fmt: skip


def _report(unit_peaks: dict | None) -> dict:
    unit = {"id": "cpu:0", "kind": "cpu", "index": 0, "model": "m", "cohort": "c", "notes": []}
    if unit_peaks is not None:
        unit["peaks"] = unit_peaks
    outcomes = [
        _case(0, "gemm_fp", 4e9, 1.0, {"compute": 0.5, "check": 0.3, "setup": 0.1}),
        _case(1, "gemm_fp", 4e9, 1.0, {"compute": 0.7, "check": 0.1, "setup": 0.1}),
        _case(2, "train", 1e9, 0.5, {}),
    ]
    return judge_and_build(run=RUN, host={"hostname": "h"}, software={}, cohorts={"c": {}}, units=[unit],
                           outcomes=outcomes, problems={}, interrupted=None)  # fmt: skip


def _schema_valid(report: dict) -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.validate(report["units"][0], {"$defs": schema["$defs"], "$ref": "#/$defs/unit"})


def test_the_report_gives_peak_efficiency_and_shares_per_workload():
    doc = _report({"gemm_fp": {"peak_ops_per_s": 8e9, "ops": [], "error": None},
                   "train": {"peak_ops_per_s": None, "ops": [], "error": "x"}})  # fmt: skip
    gemm, train = doc["units"][0]["throughput"]["gemm_fp"], doc["units"][0]["throughput"]["train"]
    assert gemm["ops_per_s"] == 4e9 and gemm["peak_ops_per_s"] == 8e9
    assert gemm["efficiency"] == pytest.approx(gemm["ops_per_s"] / gemm["peak_ops_per_s"]) == 0.5
    assert gemm["shares"] == {"compute": 0.6, "check": 0.2, "setup": 0.1}
    assert train["peak_ops_per_s"] is None and train["efficiency"] is None
    assert train["shares"] == {"compute": 0.0, "check": 0.0, "setup": 0.0}
    _schema_valid(doc)
    validate_report(doc)


def test_a_report_from_a_journal_without_peaks_has_null_efficiency():
    gemm = _report(None)["units"][0]["throughput"]["gemm_fp"]
    assert gemm["peak_ops_per_s"] is None and gemm["efficiency"] is None


def test_old_reports_without_the_fields_stay_valid():
    old = json.loads((Path(__file__).parent / "data" / "report_v1.json").read_text())
    throughputs = [t for u in old["units"] for t in u["throughput"].values()]
    assert throughputs and not any("efficiency" in t for t in throughputs)
    validate_report(old)
    jsonschema.validate(old, json.loads(SCHEMA_PATH.read_text()))


@pytest.mark.parametrize(
    ("field", "value"),
    [("efficiency", "high"), ("peak_ops_per_s", True), ("shares", {"compute": "most"}), ("shares", [0.5])],
)
def test_malformed_peak_fields_are_refused(field, value):
    doc = _report({"gemm_fp": {"peak_ops_per_s": 8e9, "ops": [], "error": None}})
    doc["units"][0]["throughput"]["gemm_fp"][field] = value
    with pytest.raises(ReportError, match=field):
        validate_report(doc)
    with pytest.raises(jsonschema.ValidationError):
        _schema_valid(doc)


# --- info --peaks --------------------------------------------------------------------------------


def test_info_peaks_json_lists_every_workload_op_shape_rate_and_source(monkeypatch, tmp_path):
    from sdcscan.cli import cli
    from sdcscan.profile import load_profile
    from sdcscan.units import Unit

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setattr(torch_setup, "configure_torch", lambda unit, threads: torch)  # `info` pins no pytest
    monkeypatch.setattr(rates, "measure", _Counting(5e9))
    monkeypatch.setattr(
        "sdcscan.units.discover_units", lambda: [Unit("cpu:0", "cpu", 0, "m"), Unit("cpu:1", "cpu", 1, "m")]
    )
    runs = [CliRunner().invoke(cli, ["info", "--peaks", "--json", "-p", "quick"]) for _ in range(2)]
    for result in runs:
        assert result.exit_code == 0, result.output
    first, second = (json.loads(r.stdout) for r in runs)
    assert first["profile"] == "quick" and [u["unit"] for u in first["units"]] == ["cpu:0"]  # one per kind
    unit = first["units"][0]
    assert (
        set(unit["workloads"]) == {w.name for w in load_profile("quick").workloads}
        and unit["fingerprint"]["device_kind"] == "cpu"
    )
    for found in unit["workloads"].values():
        assert found["peak_ops_per_s"] == pytest.approx(5e9)
        for op in found["ops"]:
            assert set(op) == {"op", "dtype", "shape", "ops_per_s", "source"} and op["source"] == "fresh"
    assert {op["source"] for w in second["units"][0]["workloads"].values() for op in w["ops"]} == {"cache"}


def test_info_peaks_refuses_an_unknown_profile_before_measuring():
    from sdcscan.cli import cli

    result = CliRunner().invoke(cli, ["info", "--peaks", "-p", "no-such-profile"])
    assert result.exit_code == 2 and "Error:" in result.output


def test_a_case_is_held_against_the_op_of_its_own_slot():
    found = {"peak_ops_per_s": 1.5, "error": None, "ops": [{"ops_per_s": 1.0}, {"ops_per_s": 2.0}]}
    assert [case_peak("gemm_fp", found, i) for i in range(3)] == [1.0, 2.0, 1.0]
    assert case_peak("train", found, 1) == 1.5  # every op in every case
    assert case_peak("gemm_fp", {**found, "error": "x"}, 0) is None


def test_efficiency_holds_each_case_to_the_plain_op_of_its_own_dtype_and_shape():
    """Two fp32 cases (plain fp32 at 8e9) beside a mixed peak that includes bf16: the efficiency is that of
    fp32 (0.5), not of a mix of dtypes the run did not do (issue 42: matmul_golden's fp32 case divided by
    a peak that mixed four dtypes)."""
    outcomes = [
        {**_case(i, "matmul_golden", 4e9, 1.0, {}), "detail": {"dtype": "float32", "plain_ops_per_s": 8e9}}
        for i in range(2)
    ]
    unit = {"id": "cpu:0", "kind": "cpu", "index": 0, "model": "m", "cohort": "c", "notes": [],
            "peaks": {"matmul_golden": {"peak_ops_per_s": 3e10, "ops": [], "error": None}}}  # fmt: skip
    doc = judge_and_build(run=RUN, host={"hostname": "h"}, software={}, cohorts={"c": {}}, units=[unit],
                          outcomes=outcomes, problems={}, interrupted=None)  # fmt: skip
    rec = doc["units"][0]["throughput"]["matmul_golden"]
    assert rec["peak_ops_per_s"] == 8e9 and rec["efficiency"] == 0.5
    outcomes[1]["detail"] = {"dtype": "bfloat16", "plain_ops_per_s": 4e10}  # one fp32, one bf16 case
    doc = judge_and_build(run=RUN, host={"hostname": "h"}, software={}, cohorts={"c": {}}, units=[unit],
                          outcomes=outcomes, problems={}, interrupted=None)  # fmt: skip
    rec = doc["units"][0]["throughput"]["matmul_golden"]
    assert rec["efficiency"] == pytest.approx((4e9 / 8e9 + 4e9 / 4e10) / 2.0)  # plain seconds over seconds


def test_a_workers_outcome_carries_the_plain_rate_of_its_cases_own_op(monkeypatch, tmp_path):
    """The worker attaches the rate of the op of the case's slot (`peaks.plain_ops.case_peak`)."""
    from sdcscan.profile import load_profile
    from sdcscan.units import Unit

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setattr(worker, "configure_torch", lambda unit, threads: torch)
    profile = load_profile("quick")
    cfg = worker.WorkerConfig(unit=Unit("cpu:0", "cpu", 0, "m"), profile=profile, seed=1, threads=1,
                              param_overrides={w.name: TINY[w.name] for w in profile.workloads})  # fmt: skip
    pipe = _Pipe()
    engine = worker._Engine(cfg, pipe)
    engine.peaks = {name: {"peak_ops_per_s": 1.0, "ops": [{"ops_per_s": 1e9 + i} for i in range(4)],
                           "error": None} for name in engine.peaks}  # fmt: skip
    for index in range(8):
        engine.run_case(index, attempt=0)
    for message in (m for m in pipe.sent if m[0] == "outcome"):
        rate, workload = message[-1]["detail"]["plain_ops_per_s"], message[-2]
        assert rate == (1.0 if workload == "train" else 1e9 + engine.plan.case(message[2]).occurrence % 4)
