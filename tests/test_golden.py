"""Goldens: record the fleet's consensus, judge one report against it, fold the judgement into the report."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from sdcscan.fleet.compare import Options, summarize
from sdcscan.fleet.golden import GoldenError, index_golden, load_golden
from sdcscan.fleet.golden_record import record
from sdcscan.judgement.assemble import judge_and_build
from sdcscan.judgement.evidence import check_golden
from sdcscan.report import SCHEMA_PATH, case_records
from tests.helpers.fleet import PLAN_SHA, extract, good, report, unit

SCHEMA = json.loads(SCHEMA_PATH.read_text())


def fleet(n: int = 3, **kw: Any) -> list[dict[str, Any]]:
    """n healthy hosts with two CPUs and 4 cases each."""
    return [report(f"h{k}", **kw) for k in range(n)]


def test_record_keeps_majority_digests_and_refuses_undecided_cases():
    """Each (plan, cohort, case) gets the digest the hosts settle on, one vote per host, as `compare`
    decides it; close splits and ties are refused and listed."""
    split = [report("s0", [unit(digests={1: "a" * 16})]), report("s1", [unit(digests={1: "b" * 16})])]
    g = record([*fleet(3), report("x", [unit(digests={2: "c" * 16})]), *split[:1]])
    (entry,) = g["entries"]
    assert (entry["profile_sha256"], entry["seed"], entry["cohort"]) == (PLAN_SHA, 7, "c1")
    assert entry["cases"]["index"] == [0, 1, 2, 3] and entry["cases"]["digest"][2] == good("c1", 2)
    assert entry["cases"]["votes"][2] == 7 and entry["cases"]["voters"][2] == 8  # units, of 5 hosts
    assert g["refused"] == [] and g["golden_version"] == 1
    tie = record([report("a", [unit("cpu:0", digests={1: "a" * 16}), unit("cpu:1")])])
    assert tie["entries"][0]["cases"]["index"] == [0, 2, 3]
    assert [(r["index"], r["workload"]) for r in tie["refused"]] == [(1, "matmul_golden")]
    assert "only 0 host(s) voted" in tie["refused"][0]["reason"]


def test_one_many_unit_host_cannot_write_its_digests_into_the_golden():
    """Two healthy 2-unit hosts and one 8-unit host wrong on case 1: 16 units to 4 would have recorded
    the wrong digest; as 1 host against 2 the case is a close split and is refused."""
    wrong = report("big", [unit(f"cpu:{k}", digests={1: "f" * 16}) for k in range(8)])
    g = record([*fleet(2), wrong])
    assert 1 not in g["entries"][0]["cases"]["index"]
    assert [r["index"] for r in g["refused"]] == [1] and "close split" in g["refused"][0]["reason"]
    rerun = report(
        "big", [unit(f"cpu:{k}") for k in range(8)], run_id="later", ended_at="2025-06-02T00:00:00Z"
    )
    fixed = record([*fleet(2), wrong, rerun])  # the host's newest report is the one that votes
    assert fixed["refused"] == [] and fixed["reports"] == 3


def test_record_min_votes():
    """Cases produced by fewer units than --min-votes are refused."""
    g = record([report("a", [unit(cases=2)]), report("b", [unit(cases=1)])], min_votes=2)
    assert g["entries"][0]["cases"]["index"] == [0]
    assert "only 1 unit(s)" in g["refused"][0]["reason"]


def test_record_is_order_independent():
    """The same reports in another order give the same golden."""
    reports = [*fleet(3), report("odd", [unit(cohort="c2")]), report("s8", [unit(seed=8)], seed=8)]
    assert json.dumps(record(reports)) == json.dumps(record(list(reversed(reports))))


def test_judge_pass_fail_and_unjudged():
    """Units agreeing pass, disagreeing units list their cases, units of an unknown cohort are unjudged."""
    g = record(fleet())
    bad = unit("cpu:1", digests={3: "f" * 16, 1: "e" * 16})
    other = unit("cpu:2", cohort="c9")
    rep = report("q", [unit("cpu:0"), bad, other])
    index, plan = index_golden(g), (rep["run"]["profile"]["sha256"], rep["run"]["seed"])
    cases: dict[str, list[tuple[int, str | None, str]]] = {}
    for row in case_records(rep):
        cases.setdefault(row.unit, []).append((row.index, row.digest, row.workload))
    # As `sdcscan run --golden` judges each unit (judgement.assemble): the golden of its plan and cohort.
    j = {
        u["id"]: check_golden(u["id"], u["cohort"], index.get((plan, u["cohort"])), cases[u["id"]])
        for u in rep["units"]
    }
    assert j["cpu:0"].verdict == "pass" and j["cpu:0"].cases_judged == 4
    assert j["cpu:1"].verdict == "fail" and [d.index for d in j["cpu:1"].disagreements] == [1, 3]
    assert (
        j["cpu:1"].disagreements[0].expected == good("c1", 1)
        and j["cpu:1"].disagreements[0].actual == "e" * 16
    )
    assert j["cpu:2"].verdict == "unjudged"


def run_with_golden(rep: dict[str, Any], golden: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """Judge a report's cases as `sdcscan run --golden` does: through the one judge, golden as evidence."""
    index = index_golden(golden)
    plan = (rep["run"]["profile"]["sha256"], rep["run"]["seed"])
    units = [
        {"id": u["id"], "kind": u["kind"], "model": u["model"], "cohort": u["cohort"]} for u in rep["units"]
    ]
    outcomes = [{**dataclasses.asdict(row), "attempt": 0} for row in case_records(rep)]
    return judge_and_build(
        run=rep["run"],
        host=rep["host"],
        software=rep.get("software", {}),
        cohorts={u["cohort"]: {} for u in units},
        units=units,
        outcomes=outcomes,
        problems=kw.get("problems", {}),
        interrupted=kw.get("interrupted"),
        golden={u["cohort"]: index.get((plan, u["cohort"])) for u in units},
    )


def test_run_with_golden_fails_a_disagreeing_unit():
    """Verdict fail naming the first case, mismatch records, a finding, run verdict fail and exit code 1."""
    g = record(fleet())
    out = run_with_golden(report("q", [unit("cpu:1", digests={3: "f" * 16, 1: "e" * 16})]), g)
    jsonschema.validate(out, SCHEMA)
    (u1,) = out["units"]
    assert (
        u1["verdict"] == "fail" and u1["reason"] == "digest of case 1 (matmul_golden) differs from the golden"
    )
    assert u1["cases"]["status"] == ["ok", "mismatch", "ok", "mismatch"] and u1["mismatches"] == 2
    assert u1["first_bad_case"] == 1
    assert "golden: 2 of 4 judged case(s) differ, first case 1 (matmul_golden)" in u1["notes"]
    assert [(m["index"], m["check"], m["expected"]) for m in out["mismatches"]] == [
        (1, "golden", good("c1", 1)),
        (3, "golden", good("c1", 3)),
    ]
    assert out["mismatches"][0]["mask"] == format(int(good("c1", 1), 16) ^ int("e" * 16, 16), "016x")
    (f,) = out["findings"]
    assert f["kind"] == "golden" and f["unit"] == "cpu:1" and "first case 1" in f["message"]
    assert "--units cpu:1" in f["next"] and "--seed 7" in f["next"]
    assert (out["verdict"], out["exit_code"]) == ("fail", 1)


def test_run_with_golden_clean_report_passes():
    """A run that agrees with the golden stays pass, exit 0, no finding; each unit notes the agreement."""
    out = run_with_golden(report("q"), record(fleet()))
    assert (out["verdict"], out["exit_code"], out["findings"]) == ("pass", 0, [])
    assert all("golden: 4 case(s) judged, all agree" in u["notes"] for u in out["units"])


def test_run_with_golden_without_an_entry_cannot_judge():
    """No entry for the plan or cohort: a finding says so, nothing fails."""
    rep = report("q", [unit("cpu:0", seed=9), unit("cpu:1", seed=9)], seed=9)
    out = run_with_golden(rep, record(fleet()))
    jsonschema.validate(out, SCHEMA)
    assert (out["verdict"], out["exit_code"]) == ("pass", 0)
    (f,) = out["findings"]
    assert (
        f["kind"] == "golden"
        and f["unit"] is None
        and "cannot judge 2 unit(s) (cpu:0, cpu:1)" in f["message"]
    )
    assert "sdcscan golden record" in f["next"]


def test_run_with_golden_with_no_overlapping_case_cannot_judge():
    """An entry exists but holds none of the cases the unit ran: not judged, not passed silently."""
    g = record([report("a", [unit(cases=2)])])
    r = report("q", [unit("cpu:0", cases=4, digests={0: None, 1: None}, statuses={0: "error", 1: "error"})])
    out = run_with_golden(r, g)
    golden = [f for f in out["findings"] if f["kind"] == "golden"]
    assert len(golden) == 1 and "cannot judge 1 unit(s) (cpu:0)" in golden[0]["message"]
    assert golden[0]["unit"] == "cpu:0"
    assert out["verdict"] == "invalid"  # the cases that raised leave it unjudgeable, golden or not


@pytest.mark.parametrize(
    ("kw", "unit_verdict", "verdict", "code"),
    [
        ({"problems": {"cpu:0": "worker hung"}}, "fail", "fail", 1),
        ({"interrupted": "SIGINT"}, "interrupted", "interrupted", 130),
    ],
)
def test_run_with_golden_keeps_the_worst_verdict(
    kw: dict[str, Any], unit_verdict: str, verdict: str, code: int
):
    """pass < invalid < fail < interrupted: a unit whose digests break the golden fails even when it also
    hung later (its miscompute is not hidden behind "could not judge"); only a signal ranks above."""
    r = report("q", [unit("cpu:0", digests={0: "f" * 16})])
    out = run_with_golden(r, record(fleet()), **kw)
    assert out["units"][0]["verdict"] == unit_verdict
    assert (out["verdict"], out["exit_code"]) == (verdict, code)
    assert any(f["kind"] == "golden" and f["unit"] == "cpu:0" for f in out["findings"])


def test_golden_file_round_trip_and_errors(tmp_path: Path):
    """A golden written as JSON loads back; foreign, truncated or future files are clear errors (exit 2)."""
    g = record(fleet())
    p = tmp_path / "g.json"
    p.write_text(json.dumps(g))
    assert load_golden(p) == g
    cases = [
        ("{", "truncated or not JSON"),
        ("[]", "not a golden file"),
        ('{"golden_version": 2}', "not supported"),
        ('{"golden_version": 1, "entries": [{}]}', "malformed golden entry"),
    ]
    # One value of the wrong type in an otherwise good golden (an unhashable index raised TypeError).
    entry = g["entries"][0]
    for column, value in (("index", [0]), ("index", True), ("digest", None), ("workload", 7)):
        bad = json.loads(json.dumps(g))
        bad["entries"][0]["cases"][column][0] = value
        cases.append((json.dumps(bad), "malformed golden entry"))
    cases.append((json.dumps({**g, "entries": [{**entry, "seed": True}]}), "malformed golden entry"))
    # One case index twice, with two digests (issue 33: accepted, it failed every unit of the cohort).
    twice = json.loads(json.dumps(g))
    cols = twice["entries"][0]["cases"]
    for column in ("index", "workload"):
        cols[column].append(cols[column][0])
    cols["digest"].append("f" * len(cols["digest"][0]))
    cases.append((json.dumps(twice), r"a case index appears twice"))
    for text, message in cases:
        p.write_text(text)
        with pytest.raises(GoldenError, match=message) as err:
            load_golden(p)
        assert err.value.exit_code == 2
    with pytest.raises(GoldenError, match="cannot read"):
        load_golden(tmp_path / "missing.json")


def test_compare_with_golden_reports_divergent_findings():
    """compare --golden: a disagreement with the golden is `divergent` with basis golden, even with no
    peers (issue 12: the golden is the reference wherever it covers a case, not an extra invariant)."""
    g = index_golden(record(fleet()))
    lone = [report("q", [unit("cpu:0", digests={2: "f" * 16}), unit("cpu:1", cohort="c9")])]
    s = summarize(extract(lone), options=Options(golden=g))
    (f,) = s.findings
    assert (f.host, f.unit, f.kind) == ("q", "cpu:0", "divergent")
    assert f.evidence["basis"] == "golden" and f.evidence["first_disputed_case"] == 2
    assert f.evidence["reference_digest"] == good("c1", 2)
    assert s.counts["golden_unjudged_units"] == 1 and s.exit_code == 1
    assert summarize(extract(fleet()), options=Options(golden=g)).findings == ()
