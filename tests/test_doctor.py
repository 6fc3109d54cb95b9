"""`sdcscan doctor`'s judgement, driven with recorded inputs: every exit-3 reason fires when its check
would catch a real problem, and stays quiet on a clean stack; the budget is shared as the doctor goes.

Children are never started here: `run_child` is replaced by a fake that writes what a child would have
written (a self-test result, a run report), so each check is shown both ways in milliseconds. The real
children run in tests/test_doctor_e2e.py.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sdcscan import faults, interrupts
from sdcscan.cli.doctor import doctor
from sdcscan.doctor import checkup as checkup_module
from sdcscan.doctor import judge, schedule
from sdcscan.doctor.bundle import BUNDLES, MARKDOWN, SUMMARY
from sdcscan.doctor.checkup import Setup, checkup
from sdcscan.doctor.children import ChildResult
from sdcscan.doctor.steps import Step, exit_code
from sdcscan.errors import EXIT_FAIL, EXIT_INVALID, EXIT_PASS
from sdcscan.profile import load_profile
from sdcscan.selftest.sweep import run_selftest
from sdcscan.units import Unit
from sdcscan.workloads import SPECS
from sdcscan.workloads.base import REGISTRY
from tests.helpers.selftest import FakeAbft as _Fake

CPU0, CPU1 = Unit("cpu:0", "cpu", 0, "test CPU"), Unit("cpu:1", "cpu", 1, "test CPU")
WORKLOADS = ("train", "matmul_golden")


def _unit(
    uid: str,
    digests: dict[int, str],
    *,
    verdict: str = "pass",
    reason: str | None = None,
    classification: str | None = None,
    kind: str = "cpu",
) -> dict[str, Any]:
    """A report's unit with one case per index, workloads alternating as a plan's do."""
    indices = sorted(digests)
    return {
        "id": uid,
        "kind": kind,
        "cohort": f"cohort-{kind}",
        "verdict": verdict,
        "reason": reason,
        "retest": {"classification": classification},
        "throughput": {
            w: {
                "ops_per_s": 5e10,
                "ops_unit": "flop",
                "peak_ops_per_s": 6e10,
                "efficiency": 0.83,
                "shares": {"compute": 0.9},
            }
            for w in WORKLOADS
        },
        "cases": {
            "index": indices,
            "workload": [WORKLOADS[i % 2] for i in indices],
            "digest": [digests[i] for i in indices],
            "status": ["ok"] * len(indices),
            "seconds": [0.1] * len(indices),
        },
    }


def _report(*units: dict[str, Any], telemetry: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"units": list(units), "telemetry": telemetry or {}}


def _digests(n: int = 6, *, changed: dict[int, str] | None = None) -> dict[int, str]:
    return {i: (changed or {}).get(i, f"d{i}") for i in range(n)}


# --- detectors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attrs", "needle"),
    [
        ({}, None),
        ({"detects": False}, "detection floor missed at output bit 30"),  # a silenced detector
        ({"clean_fires": True}, "false positive in 3 of 3 clean trials"),
        ({"sees_input": True}, "negative control input fired"),
    ],
)
def test_selftest_reasons_name_a_silenced_detector_a_false_positive_and_a_noisy_control(
    monkeypatch, attrs, needle
):
    """The self-test's real result, from a workload whose check was silenced or made noisy, gives a reason."""
    fake = type("FakeAbft", (_Fake,), attrs)
    monkeypatch.setitem(SPECS, "fake_abft", fake.spec)
    monkeypatch.setitem(REGISTRY, "fake_abft", fake)
    result = run_selftest(["fake_abft"], trials=3)
    reasons = judge.selftest_reasons("cpu:0", result)
    if needle is None:
        assert reasons == []
    else:
        assert any(needle in r for r in reasons), reasons
        assert all(r.startswith("cpu:0: fake_abft only: ") for r in reasons)


def test_a_selftest_budget_stops_each_variant_after_its_share_but_not_before_three_trials(monkeypatch):
    """A tiny budget still runs MIN_TRIALS per variant; no budget runs every trial asked for."""
    monkeypatch.setitem(SPECS, "fake_abft", _Fake.spec)
    monkeypatch.setitem(REGISTRY, "fake_abft", _Fake)
    short = run_selftest(["fake_abft"], trials=50, budget_s=1e-6)
    assert short["trials"] == 3 and short["passed"]
    assert run_selftest(["fake_abft"], trials=50)["trials"] == 50


# --- determinism -----------------------------------------------------------------------------------


def test_two_identical_runs_reproduce():
    runs = [_report(_unit("cpu:0", _digests()), _unit("cpu:1", _digests())) for _ in range(2)]
    verdict = judge.determinism(runs, WORKLOADS)
    assert (verdict.findings, verdict.reasons) == ([], [])
    assert verdict.details["cases_compared"] == 12


def test_a_digest_that_changes_between_runs_names_the_workload_and_case():
    """A nondeterministic workload: same unit, same seed, another digest in the second run."""
    first = _report(_unit("cpu:0", _digests()), _unit("cpu:1", _digests()))
    second = _report(_unit("cpu:0", _digests(changed={3: "x"})), _unit("cpu:1", _digests(changed={3: "x"})))
    verdict = judge.determinism([first, second], WORKLOADS)
    assert verdict.findings == []
    assert verdict.reasons == [
        "matmul_golden does not reproduce on this stack (cpu:0 across runs: cases 3; cpu:1 across runs: cases 3)"
    ]


def test_units_of_a_cohort_that_disagree_without_blame_do_not_reproduce():
    """Two units differ and the run blamed neither (a tie): a determinism problem, not a finding."""
    runs = [_report(_unit("cpu:0", _digests()), _unit("cpu:1", _digests(changed={2: "y"}))) for _ in range(2)]
    verdict = judge.determinism(runs, WORKLOADS)
    assert verdict.reasons == [
        "train does not reproduce on this stack (cohort of cpu:0, cpu:1 in run 1: cases 2; "
        "cohort of cpu:0, cpu:1 in run 2: cases 2)"
    ]


def test_a_unit_the_clean_run_failed_is_a_finding_not_a_determinism_problem():
    bad = _unit(
        "cpu:1",
        _digests(changed={2: "y"}),
        verdict="fail",
        reason="invariant failed in 1 case(s)",
        classification="persistent",
    )
    runs = [_report(_unit("cpu:0", _digests()), bad) for _ in range(2)]
    verdict = judge.determinism(runs, WORKLOADS)
    assert verdict.reasons == []
    assert verdict.findings[0].startswith("cpu:1 miscomputed in clean run 1: invariant failed")
    assert exit_code([Step("determinism", findings=verdict.findings)]) == EXIT_FAIL


def test_failures_that_follow_the_case_everywhere_are_software_and_invalid_units_are_reasons():
    sw = _unit("cpu:0", _digests(), verdict="fail", reason="r", classification="case")
    hung = _unit("cpu:1", _digests(), verdict="invalid", reason="case 1 (train) hung")
    verdict = judge.determinism([_report(sw, hung), _report(sw, hung)], WORKLOADS)
    assert verdict.findings == []
    assert any("fail on every unit (software)" in r for r in verdict.reasons)
    assert any("cpu:1 was invalid: case 1 (train) hung" in r for r in verdict.reasons)


def test_a_workload_that_never_ran_twice_is_not_shown_to_reproduce():
    runs = [_report(_unit("cpu:0", {0: "d0", 2: "d2"})) for _ in range(2)]  # train only
    assert judge.determinism(runs, WORKLOADS).reasons == [
        "matmul_golden on cpu:0: no case ran in both runs (give a larger --budget)"
    ]


# --- the injection drill ---------------------------------------------------------------------------


def _drill(
    kind: str,
    struck_verdict: str,
    struck_reason: str | None,
    *,
    peer: str = "pass",
    code: int | None = None,
    seconds: float = 10.0,
    left: tuple[str, ...] = (),
) -> judge.DrillRun:
    report = _report(
        _unit("cpu:0", _digests(), verdict=struck_verdict, reason=struck_reason),
        _unit("cpu:1", _digests(), verdict=peer, reason=None if peer == "pass" else "r"),
    )
    expected_code = judge.EXPECTED[kind][1]
    return judge.DrillRun(
        kind, ("cpu:0",), report, expected_code if code is None else code, seconds, 32.0, left
    )


@pytest.mark.parametrize(
    ("kind", "verdict", "reason"),
    [
        ("bitflip", "fail", "invariant failed in 22 case(s)"),
        ("nan", "fail", "invariant failed in 53 case(s)"),
        ("hang", "invalid", "case 1 (matmul_golden) hung: no result after 5 s; worker killed"),
        ("crash", "invalid", "worker process died (exit code -9) during case 0 (train)"),
    ],
)
def test_a_drill_that_names_the_struck_unit_holds(kind, verdict, reason):
    """The reasons recorded from real drill runs on this project's CPU machine."""
    assert judge.drill_reasons(_drill(kind, verdict, reason)) == []


@pytest.mark.parametrize(
    ("drill", "needle"),
    [
        (_drill("bitflip", "pass", None, code=0), "struck cpu:0 was pass"),  # an injection not named
        (_drill("hang", "invalid", "worker process died (exit code -9)"), "expected invalid (hung)"),
        (_drill("crash", "invalid", "worker process died", peer="invalid"), "peer cpu:1 was invalid"),
        (_drill("nan", "fail", "invariant failed", seconds=40.0), "took 40 s, past its bound of 32 s"),
        (_drill("bitflip", "fail", "x", left=("4242 python3",)), "processes left behind: 4242 python3"),
        (_drill("bitflip", "fail", "x", code=3), "exited 3, expected 1"),
    ],
)
def test_a_drill_that_misses_names_why(drill, needle):
    reasons = judge.drill_reasons(drill)
    assert any(needle in r for r in reasons), reasons


def test_a_drill_without_a_report_says_so():
    run = judge.DrillRun("hang", ("cpu:0",), None, None, 40.0, 32.0)
    assert judge.drill_reasons(run)[-1] == "hang drill: the run wrote no report (exit None)"


# --- speed, steps, budget --------------------------------------------------------------------------


def test_speed_takes_the_median_per_kind_and_shows_gpu_telemetry_against_the_power_limit():
    telemetry = {
        "units": {
            "cuda:0": {
                "util_pct": {"value": 97.5},
                "power_w": {"value": 640.0},
                "power_limit_w": {"value": 700.0},
            }
        }
    }
    report = _report(_unit("cpu:0", {}), _unit("cuda:0", {}, kind="cuda"), telemetry=telemetry)
    shown = judge.speed(report)
    assert {(r["kind"], r["workload"]) for r in shown["workloads"]} == {
        (k, w) for k in ("cpu", "cuda") for w in WORKLOADS
    }
    assert shown["workloads"][0]["efficiency"] == 0.83
    assert shown["gpus"]["cuda:0"]["power_limit_w"] == 700.0 and shown["gpus"]["cuda:0"]["temp_c"] is None


def test_exit_codes_finding_beats_untrusted_beats_pass():
    ok, bad, found = Step("a"), Step("b", reasons=["r"]), Step("c", findings=["f"])
    assert exit_code([ok]) == EXIT_PASS
    assert exit_code([ok, bad]) == EXIT_INVALID
    assert exit_code([ok, Step("d", skipped=["s"])]) == EXIT_INVALID
    assert exit_code([bad, found]) == EXIT_FAIL


def test_the_allotter_gives_each_item_its_floor_and_shares_the_rest_so_a_long_item_is_paid_by_later_ones():
    allot = schedule.Allotter.for_kinds(["cpu"], ends_at=100.0 + schedule.RESERVE_S)
    overrun = schedule.RUN_OVERRUN_S
    floors = 2 * schedule.MIN_DETERMINISM_RUN_S + sum(schedule.MIN_DRILL_S.values()) + 6 * overrun
    first = allot.take("selftest cpu", now=0.0)
    spare = 100.0 - floors - schedule.MIN_SELFTEST_S
    assert first == pytest.approx(schedule.MIN_SELFTEST_S + spare * 0.16)
    allot.took("selftest", first, 30.0)  # the self-test overran: later items lose spare time, not floors
    second = allot.take("determinism 1", now=30.0)
    room = 70.0 - (floors - schedule.MIN_DETERMINISM_RUN_S - overrun) - overrun
    det, later = schedule.WEIGHT_DETERMINISM_RUN, 1 - schedule.WEIGHT_SELFTEST  # its and those still to come
    assert second == pytest.approx(
        schedule.MIN_DETERMINISM_RUN_S + (room - schedule.MIN_DETERMINISM_RUN_S) * det / later
    )
    assert second >= schedule.MIN_DETERMINISM_RUN_S


def test_the_allotter_keeps_the_last_items_floors_when_runs_overrun_as_on_a_slow_host():
    """A 90 s doctor on a host as slow as the CI host where the bitflip drill was skipped (each run 1.5-2.5 s
    past its share there; its self-test took 22.8 s, before the 1.1 s of importing torch._inductor and the
    2.8 s of laying out the full table left it: about 1.5 times both, there): every run gets its floor."""
    allot = schedule.Allotter.for_kinds(["cpu"], ends_at=90.0)
    now = 1.9  # the environment step
    given = allot.take("selftest cpu", now)
    now += 17.0
    allot.took("selftest", given, 17.0)
    for name in ["determinism 1", "determinism 2", *(f"drill {k}" for k in schedule.INJECTIONS)]:
        floor = allot.floor_of(name)
        seconds = allot.take(name, now)
        assert seconds >= floor, (name, seconds, now)
        spent = seconds + 2.5 if name == "determinism 1" else seconds + 1.5
        allot.took("run", seconds, spent)
        now += spent
    assert now <= 90.0


def test_when_floors_cannot_all_be_held_the_items_in_order_keep_theirs_and_the_last_is_short():
    allot = schedule.Allotter.for_kinds(["cpu"], ends_at=60.0)
    assert allot.take("selftest cpu", 0.0) == schedule.MIN_SELFTEST_S
    assert allot.take("determinism 1", 10.0) == schedule.MIN_DETERMINISM_RUN_S
    assert allot.take("determinism 2", 23.0) == schedule.MIN_DETERMINISM_RUN_S
    left = 60.0 - schedule.RESERVE_S - 36.0 - schedule.RUN_OVERRUN_S
    assert allot.take("drill bitflip", 36.0) == pytest.approx(min(schedule.MIN_DRILL_S["bitflip"], left))
    assert allot.take("drill nan", 60.0) == 0.0


def test_a_run_plan_is_the_command_line_its_child_gets_and_carries_its_budget():
    """The doctor reads a run's budget from its plan (the bound it judges the run by), never back out of
    the command line."""
    plan = schedule.run_plan([CPU0, CPU1], 12.7, "o.json", profile="quick", inject=["cpu:0:hang@1.0"])
    assert plan.budget_s == 11  # less RUN_START_S for the interpreter, whole seconds
    assert plan.argv() == [
        "run", "-p", "quick", "--units", "cpu:0,cpu:1", "--seed", str(schedule.SEED), "--budget", "11s",
        "-o", "o.json", "--no-history", "--inject", "cpu:0:hang@1.0",
    ]  # fmt: skip
    assert schedule.run_plan([CPU0], 0.5, "o.json").budget_s == 1


@pytest.mark.parametrize("kind", schedule.INJECTIONS)
def test_every_drill_strikes_the_first_case_of_every_unit_so_a_slow_host_cannot_end_it_unstruck(kind):
    """A drill that struck by chance missed in CI: the doctor's seed drew cpu:0's NaN drill first at its
    sixth case, and a loaded host ended the 9 s run before it (exit 0, doctor untrusted)."""
    for spec in schedule.injection_specs(kind, [CPU0, CPU1]):
        injection = faults.parse_inject(spec)
        assert all(
            faults.draws(injection, case_seed) for case_seed in range(schedule.SEED, schedule.SEED + 64)
        )


def test_the_determinism_runs_run_four_rounds_on_cpus_and_forty_where_a_gpu_is_among_the_units():
    """Enough GPU cases for its speed table's telemetry; on CPUs few, so a loaded host still ends them."""
    profile = load_profile(schedule.PROFILE)
    gpu = Unit("cuda:0", "cuda", 0, "GPU")
    assert schedule.determinism_cases(profile, [CPU0, CPU1]) == 4 * len(profile.workloads) == 20
    assert schedule.determinism_cases(profile, [CPU0, gpu]) == 40 * len(profile.workloads)


def test_the_default_units_are_two_of_each_kind():
    gpus = [Unit(f"cuda:{i}", "cuda", i, "GPU") for i in range(3)]
    cpus = [Unit(f"cpu:{i}", "cpu", i, "CPU") for i in range(8)]
    assert [u.id for u in schedule.doctor_units(cpus + gpus, None)] == ["cpu:0", "cpu:1", "cuda:0", "cuda:1"]
    assert [u.id for u in schedule.doctor_units(cpus + gpus, "cuda:2,cpu:5")] == ["cuda:2", "cpu:5"]
    assert [u.id for u in schedule.first_of_each_kind(schedule.doctor_units(cpus + gpus, None))] == [
        "cpu:0",
        "cuda:0",
    ]


# --- the whole checkup, with fake children ---------------------------------------------------------


class FakeChildren:
    """Stands in for `run_child`: writes what each child would have written, as `behave` says."""

    def __init__(self, behave: dict[str, Any] | None = None) -> None:
        self.behave = behave or {}
        self.calls: list[list[str]] = []

    def __call__(self, argv, *, stdout: Path, stderr: Path, timeout_s: float) -> ChildResult:
        self.calls.append(list(argv))
        stderr.write_text("a child's log\n")
        if argv[0] == "selftest":
            stdout.write_text(json.dumps({"trials": 3, "passed": True, "rows": [_clean_row()]}))
            return ChildResult(list(argv), 0, 5.0)
        label = Path(argv[argv.index("-o") + 1]).stem  # determinism-1, drill-hang, ...
        if label in self.behave:
            return self.behave[label](argv, label)
        return _write_run(argv, label)


def _clean_row() -> dict[str, Any]:
    return {
        "workload": "w",
        "variant": "v",
        "site": "clean",
        "bit": None,
        "trials": 3,
        "false_positives": 0,
        "rows_checked": 3,
        "passed": True,
    }


def _write_run(
    argv: list[str],
    label: str,
    *,
    digests: dict[int, str] | None = None,
    struck_verdict: str | None = None,
    seconds: float = 10.0,
    signum: int | None = None,
) -> ChildResult:
    """A run's report at its -o path, as `sdcscan run` would write it, and how it ended."""
    kind = label.removeprefix("drill-") if label.startswith("drill-") else None
    verdict, code, word = judge.EXPECTED[kind] if kind else ("pass", 0, None)
    verdict = struck_verdict or verdict
    units = [
        _unit("cpu:0", digests or _digests(), verdict=verdict, reason=f"case 0 {word or 'failed'}"),
        _unit("cpu:1", _digests()),
    ]
    report = _report(*units)
    report.update(schema_version=1, verdict=verdict, exit_code=code)
    Path(argv[argv.index("-o") + 1]).write_text(json.dumps(report))
    if signum is not None:
        raise interrupts.Interrupted(signum)
    return ChildResult(list(argv), code, seconds)


@pytest.fixture
def fake_stack(monkeypatch):
    """Children replaced, reports read as written, the environment described without probing the host."""
    monkeypatch.setattr(
        checkup_module, "_read_report", lambda p: json.loads(p.read_text()) if p.exists() else None
    )
    monkeypatch.setattr(
        checkup_module.environment, "describe", lambda found, chosen: {"versions": {}, "isa": {}}
    )

    def install(behave: dict[str, Any] | None = None) -> FakeChildren:
        children = FakeChildren(behave)
        monkeypatch.setattr(checkup_module, "run_child", children)
        monkeypatch.setattr(checkup_module, "load_profile", lambda name: _Plan())
        return children

    return install


class _Plan:
    workloads = tuple(type("W", (), {"name": w, "weight": 1})() for w in WORKLOADS)


def _setup(tmp_path: Path, budget_s: float = 300.0) -> Setup:
    (tmp_path / "out").mkdir(exist_ok=True)
    return Setup(budget_s, [CPU0, CPU1], [CPU0, CPU1], tmp_path / "out", ["doctor"])


def test_a_clean_checkup_passes_and_writes_five_files(fake_stack, tmp_path):
    children = fake_stack()
    with interrupts.installed():
        summary = checkup(_setup(tmp_path), say=lambda line: None)
    assert (summary["exit_code"], summary["verdict"], summary["reasons"]) == (0, "pass", [])
    assert [s["name"] for s in summary["steps"]] == [
        "environment",
        "detectors",
        "determinism",
        "injection",
        "speed",
    ]
    assert [c[0] for c in children.calls] == ["selftest"] + ["run"] * 6
    # The determinism runs run the same cases however slow the host (a loaded CI host's time-bound runs
    # ran one workload each); the drills run until their budgets end.
    cases = [c[c.index("--cases") + 1] if "--cases" in c else None for c in children.calls[1:]]
    assert cases == [str(schedule.DETERMINISM_ROUNDS * len(WORKLOADS))] * 2 + [None] * 4
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([SUMMARY, MARKDOWN, *BUNDLES])
    assert json.loads((tmp_path / "out" / SUMMARY).read_text())["exit_code"] == 0
    assert "| injection | ok |" in (tmp_path / "out" / MARKDOWN).read_text()


@pytest.mark.parametrize(
    ("behave", "code", "needle"),
    [
        (
            {"determinism-2": lambda a, lb: _write_run(a, lb, digests=_digests(changed={1: "z"}))},
            3,
            "matmul_golden does not reproduce",
        ),
        (
            {"drill-bitflip": lambda a, lb: _write_run(a, lb, struck_verdict="pass")},
            3,
            "struck cpu:0 was pass",
        ),
        ({"drill-hang": lambda a, lb: _write_run(a, lb, seconds=500.0)}, 3, "past its bound"),
        (
            {"determinism-1": lambda a, lb: _write_run(a, lb, struck_verdict="fail")},
            1,
            "cpu:0 miscomputed in clean run 1",
        ),
    ],
    ids=["nondeterministic", "unnamed-injection", "overrun", "real-finding"],
)
def test_each_broken_promise_sets_the_exit_code_and_names_itself(fake_stack, tmp_path, behave, code, needle):
    fake_stack(behave)
    with interrupts.installed():
        summary = checkup(_setup(tmp_path), say=lambda line: None)
    assert summary["exit_code"] == code
    assert any(needle in line for line in summary["reasons"] + summary["findings"]), summary


def test_a_budget_that_runs_out_skips_steps_and_says_so(fake_stack, tmp_path, monkeypatch):
    """The runs cost more than their share: later items get too little and are skipped, named."""
    fake_stack({f"determinism-{n}": lambda a, lb: _slow(a, lb, monkeypatch) for n in (1, 2)})
    with interrupts.installed():
        summary = checkup(_setup(tmp_path, budget_s=100.0), say=lambda line: None)
    assert summary["exit_code"] == EXIT_INVALID
    assert any("drill crash: 0 s left, this run needs 7" in r for r in summary["reasons"]), summary["reasons"]


def _slow(argv: list[str], label: str, monkeypatch) -> ChildResult:
    """A run that takes the rest of the budget: the doctor's clock jumps 200 s."""
    import time

    later = time.monotonic() + 200.0
    monkeypatch.setattr(checkup_module.time, "monotonic", lambda: later)
    return _write_run(argv, label)


def test_an_interrupt_stops_the_step_and_still_writes_a_partial_summary(fake_stack, tmp_path):
    fake_stack({"drill-nan": lambda a, lb: _write_run(a, lb, signum=signal.SIGTERM)})
    with interrupts.installed():
        summary = checkup(_setup(tmp_path), say=lambda line: None)
    assert (summary["exit_code"], summary["verdict"], summary["interrupted_by"]) == (
        143,
        "interrupted",
        "SIGTERM",
    )
    assert summary["steps"][-1]["name"] == "injection" and summary["steps"][-1]["status"] == "interrupted"
    assert summary["not_run"] == ["speed"]
    assert json.loads((tmp_path / "out" / SUMMARY).read_text())["exit_code"] == 143


# --- the command line ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "30s"], "too short"),
        (["--budget", "soon"], "invalid duration"),
        (["--units", "cpu:999"], "unknown unit 'cpu:999'"),
        (["--units", ""], "names no unit"),
    ],
)
def test_bad_options_exit_2_before_any_work_with_one_error_line(monkeypatch, args, message):
    started = []
    monkeypatch.setattr(checkup_module, "run_child", lambda *a, **k: started.append(a))
    r = CliRunner().invoke(doctor, args)
    assert r.exit_code == 2, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0]
    assert started == []


def test_an_out_directory_removed_mid_checkup_turns_a_pass_into_3_and_says_why(fake_stack, tmp_path):
    fake_stack()
    setup = _setup(tmp_path)
    (tmp_path / "out").rmdir()
    with interrupts.installed():
        summary = checkup(setup, say=lambda line: None)
    assert summary["exit_code"] == EXIT_INVALID and "cannot write" in summary["output_error"]


def test_an_out_path_that_is_a_file_exits_2(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    r = CliRunner().invoke(doctor, ["--budget", "90s", "--out", str(target)])
    assert r.exit_code == 2 and "is a file" in r.stderr


@pytest.mark.parametrize(
    ("device", "message"),
    [("gpu:0", "expected cpu, cpu:N or cuda:N"), ("cpu:x", "expected cpu"), ("cuda:7", "no such unit")],
)
def test_selftest_device_is_checked_before_any_trial(device, message):
    """The doctor's self-test child names its unit; a unit this host lacks is a usage error."""
    from sdcscan.cli.abft import selftest

    r = CliRunner().invoke(selftest, ["--device", device, "--budget", "5s"])
    assert r.exit_code == 2 and message in r.stderr


# --- the budget where a GPU must start ---------------------------------------------------------------


GPU0 = Unit("cuda:0", "cuda", 0, "GPU")


def test_the_default_budget_is_longer_where_a_gpu_unit_must_start():
    assert schedule.default_budget([CPU0, CPU1]) == schedule.DEFAULT_BUDGET_S == 300.0
    assert schedule.default_budget([CPU0, CPU1, GPU0]) == schedule.DEFAULT_GPU_BUDGET_S == 480.0
    assert schedule.short_for_gpus(270.0, [CPU0, CPU1]) is None
    assert schedule.short_for_gpus(480.0, [CPU0, GPU0]) is None
    warning = schedule.short_for_gpus(270.0, [CPU0, GPU0])
    assert warning is not None and "cuda:0" in warning and "--budget 8m" in warning


@pytest.mark.parametrize(
    ("args", "found", "budget_s", "warned"),
    [
        ([], [CPU0, CPU1], 300.0, False),
        ([], [CPU0, CPU1, GPU0], 480.0, False),
        (["--budget", "270s"], [CPU0, CPU1, GPU0], 270.0, True),
        (["--budget", "270s"], [CPU0, CPU1], 270.0, False),
        (["--budget", "270s", "--units", "cpu:0,cpu:1"], [CPU0, CPU1, GPU0], 270.0, False),
    ],
)
def test_the_command_line_budget_follows_the_units_and_warns_a_gpu_host_given_too_little(
    monkeypatch, args, found, budget_s, warned
):
    seen: list[Setup] = []

    def fake_checkup(setup: Setup, say: Any) -> dict[str, Any]:
        seen.append(setup)
        return {"exit_code": 0}

    monkeypatch.setattr(checkup_module, "discover_units", lambda: list(found))
    monkeypatch.setattr(checkup_module, "checkup", fake_checkup)
    monkeypatch.setattr("sdcscan.render.doctor.render_doctor", lambda summary, console: None)
    r = CliRunner().invoke(doctor, args)
    assert r.exit_code == 0, r.stderr
    assert [s.budget_s for s in seen] == [budget_s]
    assert ("note: cuda:0 may not get to run every workload twice" in r.stderr) == warned
