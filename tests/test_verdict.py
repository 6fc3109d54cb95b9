"""Verdict logic, table-driven: invariants, majority consensus, the two-unit tie and re-runs, invalid units."""

from __future__ import annotations

import pytest

from sdcscan.judgement.evidence import BLAME_UNDECIDED, PROBLEM_NOT_SCREENED, Problem
from sdcscan.judgement.retest import classify, unit_classification
from sdcscan.judgement.verdict import find_disputes, judge, retest_plan
from sdcscan.judgement.wording import findings, reason
from sdcscan.outcomes import CaseResult

RUN = {"profile": {"name": "quick", "sha256": "0" * 64}, "seed": 9}


def r(unit, index, digest="d", status="ok", workload="train"):
    return CaseResult(unit, index, workload, status, digest if status != "error" else None)


TWO = {"cpu:0": "c", "cpu:1": "c"}
THREE = {"cpu:0": "c", "cpu:1": "c", "cpu:2": "c"}


JUDGE_COLUMNS = ("name", "cohorts", "results", "retests", "problems", "expected", "overall")
JUDGE_TABLE = [
    ("all agree", THREE, [r(u, i) for u in THREE for i in range(3)], {}, {}, ["pass"] * 3, "pass"),
    (
        "invariant fails its unit only",
        TWO,
        [r("cpu:0", 0), r("cpu:1", 0, "x", "mismatch")],
        {},
        {},
        ["pass", "fail"],
        "fail",
    ),
    (
        "majority names the minority",
        THREE,
        [r("cpu:0", 0), r("cpu:1", 0), r("cpu:2", 0, "bad")],
        {},
        {},
        ["pass", "pass", "fail"],
        "fail",
    ),
    (
        "two-unit tie: the unit whose result does not reproduce is blamed",
        TWO,
        [r("cpu:0", 0, "a"), r("cpu:1", 0, "b")],
        {("cpu:0", 0): ["a"], ("cpu:1", 0): ["a"]},
        {},
        ["pass", "fail"],
        "fail",
    ),
    (
        "two-unit tie that reproduces on both stays undecided: both suspects",
        TWO,
        [r("cpu:0", 0, "a"), r("cpu:1", 0, "b")],
        {("cpu:0", 0): ["a"], ("cpu:1", 0): ["b"]},
        {},
        ["fail", "fail"],
        "fail",
    ),
    (
        "two-unit tie without re-runs is undecided",
        TWO,
        [r("cpu:0", 0, "a"), r("cpu:1", 0, "b")],
        {},
        {},
        ["fail", "fail"],
        "fail",
    ),
    (
        "a unit that ran no case is invalid",
        TWO,
        [r("cpu:0", 0)],
        {},
        {},
        ["pass", "invalid"],
        "invalid",
    ),
    (
        "a crashed unit is invalid, the other passes",
        TWO,
        [r("cpu:0", 0), r("cpu:1", 0)],
        {},
        {"cpu:1": "worker process died"},
        ["pass", "invalid"],
        "invalid",
    ),
    (
        "an error case makes nobody fail by itself",
        TWO,
        [r("cpu:0", 0), r("cpu:1", 0, status="error")],
        {},
        {"cpu:1": "workload raised"},
        ["pass", "invalid"],
        "invalid",
    ),
    (
        "different cohorts are never compared",
        {"cpu:0": "a", "cpu:1": "b"},
        [r("cpu:0", 0, "x"), r("cpu:1", 0, "y")],
        {},
        {},
        ["pass", "pass"],
        "pass",
    ),
]
# The rows whose dispute re-runs cannot settle: every unit of the tie is a suspect and fails.
UNDECIDED = (
    "two-unit tie that reproduces on both stays undecided: both suspects",
    "two-unit tie without re-runs is undecided",
)


def judge_rows(*, undecided: bool) -> list:
    """The rows of JUDGE_TABLE whose tie stays undecided (or not), each with its name as the test id."""
    assert set(UNDECIDED) <= {row[0] for row in JUDGE_TABLE}  # a renamed row must not drop out silently
    return [pytest.param(*row, id=row[0]) for row in JUDGE_TABLE if (row[0] in UNDECIDED) == undecided]


@pytest.mark.parametrize(JUDGE_COLUMNS, [pytest.param(*row, id=row[0]) for row in JUDGE_TABLE])
def test_judge(name, cohorts, results, retests, problems, expected, overall):
    """Each unit's verdict and the run's, for every row of the table."""
    j = judge(cohorts, results, retests=retests, problems=problems)
    assert [j.unit_verdicts[u] for u in sorted(cohorts)] == expected, name
    assert j.verdict == overall, name


@pytest.mark.parametrize(JUDGE_COLUMNS, judge_rows(undecided=False))
def test_every_failing_unit_is_named_by_a_finding_of_its_own(
    name, cohorts, results, retests, problems, expected, overall
):
    """Where the evidence settles who is bad, each failing unit has a finding naming it, and none is undecided."""
    j = judge(cohorts, results, retests=retests, problems=problems)
    failing = {u for u, v in j.unit_verdicts.items() if v == "fail"}
    found = findings(j, RUN)
    assert failing <= {f["unit"] for f in found}, name
    assert not [f for f in found if f["kind"] == "undecided"], name


@pytest.mark.parametrize(JUDGE_COLUMNS, judge_rows(undecided=True))
def test_an_unsettled_tie_fails_every_suspect_under_one_undecided_finding(
    name, cohorts, results, retests, problems, expected, overall
):
    """A tie that re-runs cannot settle fails all its units; one finding, naming no single unit, lists them all."""
    j = judge(cohorts, results, retests=retests, problems=problems)
    failing = sorted(u for u, v in j.unit_verdicts.items() if v == "fail")
    assert failing == sorted(cohorts), name
    assert {u: [b.kind for b in j.blame[u]] for u in failing} == {u: [BLAME_UNDECIDED] for u in failing}
    (f,) = findings(j, RUN)
    assert f["kind"] == "undecided" and f["unit"] is None, name
    assert all(u in f["message"] for u in failing), f["message"]


def test_interrupted_run_is_interrupted_but_keeps_failures():
    j = judge(TWO, [r("cpu:0", 0), r("cpu:1", 0, "x", "mismatch")], interrupted=True)
    assert j.verdict == "interrupted"
    assert j.unit_verdicts == {"cpu:0": "interrupted", "cpu:1": "fail"}


def test_disputes_skip_invariant_failures_and_need_retest_only_without_majority():
    results = [r("cpu:0", 0, "a"), r("cpu:1", 0, "b"), r("cpu:0", 1), r("cpu:1", 1, "z", "mismatch")]
    disputes = find_disputes(TWO, results)
    assert [(d.index, d.needs_retest) for d in disputes] == [(0, True)]
    d3 = find_disputes(THREE, [r("cpu:0", 0), r("cpu:1", 0), r("cpu:2", 0, "x")])
    assert d3[0].majority == "d" and d3[0].minority == ["cpu:2"] and not d3[0].needs_retest


def test_findings_say_what_to_do_next():
    j = judge(TWO, [r("cpu:0", 4), r("cpu:1", 4, "x", "mismatch", "matmul_golden")])
    (f,) = [f for f in findings(j, RUN) if f["kind"] == "invariant"]
    assert f["unit"] == "cpu:1" and "case 4" in f["message"] and "matmul_golden" in f["message"]
    assert "--seed 9" in f["next"] and "--units cpu:1" in f["next"]


@pytest.mark.parametrize(
    ("reruns_bad", "peers_bad", "expected"),
    [
        ([True, True, True], [False], "persistent"),
        ([True, False, True], [False], "persistent"),  # intermittent, but it follows the unit
        ([False, False, False], [False], "transient"),
        ([False], [], "transient"),
        ([True, True], [], "persistent"),  # no peer to ask: the unit's own re-runs decide
        ([True, True, True], [True], "case"),  # fails on the peer too: not this unit
        ([False, False], [True], "case"),
        ([], [], "untested"),
        ([], [False], "untested"),
    ],
)
def test_classify_table(reruns_bad, peers_bad, expected):
    """The repeat evidence: transient, persistent, case (fails everywhere) or untested."""
    assert classify(reruns_bad, peers_bad) == expected


@pytest.mark.parametrize(
    ("name", "cohorts", "results", "retests", "verdicts", "classes"),
    [
        (
            "invariant that follows the unit: persistent, fail",
            TWO,
            [r("cpu:0", 1), r("cpu:1", 1, "x", "mismatch")],
            {("cpu:1", 1): [None, None, None], ("cpu:0", 1): ["d"]},
            ["pass", "fail"],
            {"cpu:1": "persistent"},
        ),
        (
            "invariant that does not repeat: transient, still fail",
            TWO,
            [r("cpu:0", 1), r("cpu:1", 1, "x", "mismatch")],
            {("cpu:1", 1): ["d", "d", "d"], ("cpu:0", 1): ["d"]},
            ["pass", "fail"],
            {"cpu:1": "transient"},
        ),
        (
            "invariant that fails on the peer too: case, nobody fails, unit invalid",
            TWO,
            [r("cpu:0", 1), r("cpu:1", 1, "x", "mismatch")],
            {("cpu:1", 1): [None, None, None], ("cpu:0", 1): [None]},
            ["pass", "invalid"],
            {"cpu:1": "case"},
        ),
        (
            "minority digest that follows the unit: persistent",
            THREE,
            [r("cpu:0", 0), r("cpu:1", 0), r("cpu:2", 0, "bad")],
            {("cpu:2", 0): ["bad", "bad2", "bad"], ("cpu:0", 0): ["d"]},
            ["pass", "pass", "fail"],
            {"cpu:2": "persistent"},
        ),
        (
            "minority digest whose peer re-run disagrees too: case",
            THREE,
            [r("cpu:0", 0), r("cpu:1", 0), r("cpu:2", 0, "bad")],
            {("cpu:2", 0): ["e", "f", "g"], ("cpu:0", 0): ["h"]},
            ["pass", "pass", "invalid"],
            {"cpu:2": "case"},
        ),
        (
            "two-unit tie, bit flipped anew on every re-run: persistent on the flaky unit",
            TWO,
            [r("cpu:0", 0, "a"), r("cpu:1", 0, "b")],
            {("cpu:0", 0): ["a", "a", "a"], ("cpu:1", 0): ["c", "e", "f"]},
            ["pass", "fail"],
            {"cpu:1": "persistent"},
        ),
        (
            "two-unit tie, the flaky unit repeats the peer's result: transient",
            TWO,
            [r("cpu:0", 0, "a"), r("cpu:1", 0, "b")],
            {("cpu:0", 0): ["a", "a", "a"], ("cpu:1", 0): ["a", "a", "a"]},
            ["pass", "fail"],
            {"cpu:1": "transient"},
        ),
        (
            "two-unit tie, nobody repeats its result: a determinism problem, nobody fails",
            TWO,
            [r("cpu:0", 0, "a"), r("cpu:1", 0, "b")],
            {("cpu:0", 0): ["c", "e"], ("cpu:1", 0): ["f", "g"]},
            ["invalid", "invalid"],
            {"cpu:0": "case", "cpu:1": "case"},
        ),
        (
            "tie without re-runs is attributed to a unit already shown bad elsewhere",
            TWO,
            [r("cpu:0", 0, "a"), r("cpu:1", 0, "b"), r("cpu:0", 1), r("cpu:1", 1, "x", "mismatch")],
            {},
            ["pass", "fail"],
            {"cpu:1": "untested"},
        ),
    ],
)
def test_judge_with_retests(name, cohorts, results, retests, verdicts, classes):
    """Re-runs classify each failing case; a `case` is never blamed on the unit."""
    j = judge(cohorts, results, retests=retests)
    assert [j.unit_verdicts[u] for u in sorted(cohorts)] == verdicts, name
    assert {u: unit_classification(recs) for u, recs in j.retests.items()} == classes, name
    if "case" in classes.values():
        assert any(f["kind"] == "case" and "not a hardware fault" in f["message"] for f in findings(j, RUN))


def test_a_case_that_raised_makes_its_unit_invalid_with_the_exception():
    """A workload exception is an error with its summary in the reason, never a pass."""
    results = [r("cpu:0", 0), CaseResult("cpu:1", 0, "train", "error", None, error="RuntimeError: boom")]
    j = judge(TWO, results)
    assert j.unit_verdicts == {"cpu:0": "pass", "cpu:1": "invalid"}
    assert "RuntimeError: boom" in (reason(j.reason("cpu:1")) or "")


def test_retest_plan_reruns_on_the_unit_and_once_on_a_peer_with_a_cap():
    """Each failing case: N re-runs on its unit, one on a peer; at most max_cases per unit."""
    results = [r("cpu:0", i) for i in range(5)] + [r("cpu:1", i, "x", "mismatch") for i in range(5)]
    jobs = retest_plan(TWO, results, reruns=3, max_cases=2)
    assert jobs == [("cpu:1", 0)] * 3 + [("cpu:0", 0)] + [("cpu:1", 1)] * 3 + [("cpu:0", 1)]
    assert retest_plan(TWO, results, reruns=0, max_cases=2) == []


def test_retest_plan_reruns_both_sides_of_a_tie_without_extra_peers():
    """In a tie both units are failing: each re-runs, and each is the other's peer."""
    jobs = retest_plan(TWO, [r("cpu:0", 0, "a"), r("cpu:1", 0, "b")], reruns=2, max_cases=3)
    assert sorted(jobs) == [("cpu:0", 0)] * 2 + [("cpu:1", 0)] * 2


@pytest.mark.parametrize(
    ("code", "words", "points_at_the_unit"),
    [
        (PROBLEM_NOT_SCREENED, "the host stayed busy for the whole budget", False),
        (None, "not screened: a reason that merely begins with these words", True),
        (None, "case 3 (train) hung: no result after 5 s; worker killed", True),
    ],
)
def test_what_to_do_next_follows_the_problems_evidence_code_not_its_words(code, words, points_at_the_unit):
    """A unit the host's own work kept from running is told apart by its code, whatever its reason says."""
    cohorts = {"cpu:0": "c", "cpu:1": "c"}
    results = [CaseResult("cpu:1", 0, "train", "ok", "d0")]
    j = judge(cohorts, results, problems={"cpu:0": Problem("cpu:0", reason=words, code=code)})
    assert j.unit_verdicts["cpu:0"] == "invalid"
    (f,) = [f for f in findings(j, RUN) if f["unit"] == "cpu:0"]
    assert words in f["message"]
    assert f["next"].startswith("nothing points at cpu:0") != points_at_the_unit


# Issue 33: a check that is wrong on this stack (a --calibration file too tight) must not fail units.
def fp(unit, index, status="ok"):
    return r(unit, index, "x" if status == "mismatch" else "d", status, "gemm_fp")


def test_a_case_rerun_stops_blame_for_the_units_untested_failures_of_that_workload():
    """One re-run that failed on the peer too shows gemm_fp's check wrong here: its other failures, not
    re-run, are no evidence; the unit is invalid (exit 3), never fail (exit 1)."""
    results = [fp("cpu:0", i) for i in range(4)] + [fp("cpu:1", i, "mismatch") for i in range(4)]
    retests = {("cpu:1", 0): [None, None, None], ("cpu:0", 0): [None]}  # case 0 fails on the peer too
    j = judge(TWO, results, retests=retests)
    assert j.unit_verdicts["cpu:1"].value == "invalid" and not j.blame.get("cpu:1")
    assert j.verdict.value == "invalid"


def test_a_case_rerun_does_not_excuse_another_workloads_failures():
    """The excuse covers the workload the re-run showed wrong, nothing else."""
    results = [fp("cpu:0", 0), fp("cpu:1", 0, "mismatch"), r("cpu:0", 1), r("cpu:1", 1, "x", "mismatch")]
    retests = {("cpu:1", 0): [None, None, None], ("cpu:0", 0): [None]}
    assert judge(TWO, results, retests=retests).unit_verdicts["cpu:1"].value == "fail"


def test_a_check_failing_on_every_unit_of_the_cohort_blames_none():
    """Both units fail gemm_fp's check and nothing ties a failure to one unit: the check is wrong."""
    results = [fp(u, i, "mismatch") for u in TWO for i in range(3)]
    j = judge(TWO, results)
    assert [j.unit_verdicts[u].value for u in sorted(TWO)] == ["invalid", "invalid"]
    assert all("failed on all 2 units of this cohort" in (reason(j.reason(u)) or "") for u in TWO)


@pytest.mark.parametrize(
    ("name", "cohorts", "results", "retests", "verdicts"),
    [
        (
            "one unit of two fails: it fails",
            TWO,
            [fp("cpu:0", 0), fp("cpu:1", 0, "mismatch")],
            {},
            ["pass", "fail"],
        ),
        (
            "a unit alone in its cohort fails: it fails",
            {"cpu:0": "c"},
            [fp("cpu:0", 0, "mismatch")],
            {},
            ["fail"],
        ),
        (
            "every unit fails, but a re-run ties cpu:1's failure to it: cpu:1 fails",
            TWO,
            [fp("cpu:0", 0), fp("cpu:0", 1, "mismatch"), fp("cpu:1", 0, "mismatch"), fp("cpu:1", 1)],
            {("cpu:1", 0): [None, None, None], ("cpu:0", 0): ["d"]},  # fails again on cpu:1, not on cpu:0
            ["fail", "fail"],
        ),
    ],
)
def test_failures_a_unit_owns_still_fail_it(name, cohorts, results, retests, verdicts):
    j = judge(cohorts, results, retests=retests)
    assert [j.unit_verdicts[u].value for u in sorted(cohorts)] == verdicts, name
