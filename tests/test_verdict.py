"""Verdict logic, table-driven: invariants, majority consensus, the two-unit tie and re-runs, invalid units."""

from __future__ import annotations

import pytest

from sdcscan.verdict import CaseResult, find_disputes, judge


def r(unit, index, digest="d", status="ok", workload="train"):
    return CaseResult(unit, index, workload, status, digest if status != "error" else None)


TWO = {"cpu:0": "c", "cpu:1": "c"}
THREE = {"cpu:0": "c", "cpu:1": "c", "cpu:2": "c"}


@pytest.mark.parametrize(
    ("name", "cohorts", "results", "retests", "problems", "expected", "overall"),
    [
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
    ],
)
def test_judge(name, cohorts, results, retests, problems, expected, overall):
    j = judge(cohorts, results, retests=retests, problems=problems)
    assert [j.unit_verdicts[u] for u in sorted(cohorts)] == expected, name
    assert j.verdict == overall, name
    failing = {u for u, v in j.unit_verdicts.items() if v == "fail"}
    assert failing == {f.unit for f in j.findings if f.unit in failing} or any(f.kind == "undecided" for f in j.findings)


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
    j = judge(TWO, [r("cpu:0", 4), r("cpu:1", 4, "x", "mismatch", "matmul_golden")], replay="--seed 9")
    (f,) = [f for f in j.findings if f.kind == "invariant"]
    assert f.unit == "cpu:1" and "case 4" in f.message and "matmul_golden" in f.message
    assert "--seed 9" in f.next and "--units cpu:1" in f.next
