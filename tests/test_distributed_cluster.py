"""The cluster report of a distributed run: rank reports built by the real judge, merged and judged
across ranks by compare's rule (`sdcscan.launch.cluster_report`)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from rich.console import Console

from sdcscan.cli import cli
from sdcscan.judgement.assemble import judge_and_build
from sdcscan.launch.cluster_report import RankInfo, merge_rank_reports, rank_unit_id
from sdcscan.outcomes import unit_order
from sdcscan.render.run import render_summary
from sdcscan.report import SCHEMA_PATH, validate_report

SCHEMA = json.loads(SCHEMA_PATH.read_text())
CASES = 6
WORKLOADS = ("train", "matmul_golden")
RUN = {
    "id": "20250101T000000Z-abcd", "profile": {"name": "quick", "sha256": "ab" * 32}, "seed": 7,
    "seed_source": "cli", "budget_s": 60.0, "started_at": "2025-01-01T00:00:00Z",
    "ended_at": "2025-01-01T00:01:00Z", "duration_s": 60.0, "argv": ["sdcscan", "run", "--distributed"],
    "workloads": list(WORKLOADS), "injections": [],
}  # fmt: skip
HOSTS_2x2 = ("node-a", "node-a", "node-b", "node-b")
ATTRIBUTION = "rank 3 alone holds different parameters and optimizer state: an error in its own update"


def digest(index: int) -> str:
    return f"{index:016x}"


def rank_report(
    unit: str,
    host: str,
    *,
    wrong: dict[int, str] | None = None,
    mismatched: dict[int, list[dict[str, Any]]] | None = None,
    workloads: tuple[str, ...] = WORKLOADS,
    interrupted: str | None = None,
) -> dict[str, Any]:
    """A one-unit rank report judged by `judge_and_build`, as `sdcscan run --out` writes it.

    Args:
        wrong: case -> the digest this unit produced instead of the right one (silent corruption).
        mismatched: case -> its mismatch records: an invariant fired (status mismatch, no digest).
    """
    wrong, mismatched = wrong or {}, mismatched or {}
    outcomes = []
    for i in range(CASES):
        bad = i in mismatched
        outcomes.append(
            {"type": "case", "unit": unit, "index": i, "attempt": 0, "workload": workloads[i % len(workloads)],
             "status": "mismatch" if bad else "ok", "digest": None if bad else wrong.get(i, digest(i)),
             "seconds": 0.1, "ops": 1e6, "ops_unit": "flop", "mismatches": mismatched.get(i, [])}
        )  # fmt: skip
    run = {**RUN, **({"interrupted_by": interrupted} if interrupted else {})}
    doc = judge_and_build(
        run=run,
        host={"hostname": host},
        software={"python": "3.11"},
        cohorts={"c1": {"model": "Test CPU"}},
        units=[{"id": unit, "kind": unit.split(":")[0], "model": "Test CPU", "cohort": "c1", "notes": []}],
        outcomes=outcomes,
        problems={},
        interrupted=interrupted,
    )
    return validate_report(doc)


def world(hosts: tuple[str, ...] = HOSTS_2x2) -> list[RankInfo]:
    """One rank per CPU unit; the local rank counts ranks on the same host."""
    out = []
    for rank, host in enumerate(hosts):
        local = hosts[:rank].count(host)
        out.append(RankInfo(rank, host, local, f"cpu:{local}", None, f"/r/rank{rank}.json"))
    return out


def cluster(
    ranks: list[RankInfo],
    *,
    missing: dict[int, str] | None = None,
    **per_rank: dict[str, Any],
) -> dict[str, Any]:
    """The cluster report of `ranks`, each rank's report built with `per_rank["r{R}"]` (absent: clean),
    ranks in `missing` without a report."""
    missing = missing or {}
    reports = {
        info.rank: rank_report(info.unit, info.host, **per_rank.get(f"r{info.rank}", {}))
        for info in ranks
        if info.rank not in missing
    }
    doc = merge_rank_reports(reports, ranks, missing=missing, run=dict(RUN), backend="gloo")
    jsonschema.validate(doc, SCHEMA)
    return validate_report(doc, label="cluster")


def verdicts(doc: dict[str, Any]) -> dict[str, str]:
    return {u["id"]: u["verdict"] for u in doc["units"]}


def rendered(doc: dict[str, Any]) -> str:
    buf = io.StringIO()
    render_summary(doc, Console(file=buf, width=300, no_color=True))
    return buf.getvalue()


def kinds(doc: dict[str, Any]) -> list[str]:
    return [f["kind"] for f in doc["findings"]]


def test_four_clean_ranks_pass_with_every_unit_renamed_and_the_world_recorded():
    doc = cluster(world())
    assert (doc["verdict"], doc["exit_code"]) == ("pass", 0)
    assert list(verdicts(doc)) == ["rank0/cpu:0", "rank1/cpu:1", "rank2/cpu:0", "rank3/cpu:1"]
    assert set(verdicts(doc).values()) == {"pass"}
    unit = doc["units"][2]
    assert (unit["rank"], unit["host"], unit["local_rank"], unit["device"]) == (2, "node-b", 0, None)
    assert unit["cases_run"] == CASES and unit["cases"]["digest"] == [digest(i) for i in range(CASES)]
    dist = doc["run"]["distributed"]
    assert dist["world_size"] == 4 and dist["backend"] == "gloo"
    assert dist["ranks"][3] == {"rank": 3, "host": "node-b", "local_rank": 1, "unit": "cpu:1", "device": None,
                                "report": "/r/rank3.json", "verdict": "pass"}  # fmt: skip
    assert doc["host"]["hostname"] == "node-a,node-b" and doc["host"]["hosts"] == ["node-a", "node-b"]
    assert doc["run"]["id"] == RUN["id"] and doc["software"] == {"python": "3.11"}
    assert doc["disputes"] == [] and doc["mismatches"] == []
    assert not {"rank_missing", "divergent", "undecided", "attribution", "invariant"} & set(kinds(doc))
    assert rendered(doc).rstrip().endswith("exit: pass")


def test_a_rank_without_a_report_is_an_invalid_unit_and_a_finding_naming_it():
    why = "rank 2 died (SIGKILL) after 12 s"
    doc = cluster(world(), missing={2: why})
    assert (doc["verdict"], doc["exit_code"]) == ("invalid", 3)
    assert verdicts(doc) == {"rank0/cpu:0": "pass", "rank1/cpu:1": "pass", "rank2/cpu:0": "invalid",
                             "rank3/cpu:1": "pass"}  # fmt: skip
    dead = doc["units"][2]
    assert dead["reason"] == why and dead["cases_run"] == 0 and dead["cohort"] == "unstarted:rank2/cpu:0"
    (f,) = [f for f in doc["findings"] if f["kind"] == "rank_missing"]
    assert f["unit"] == "rank2/cpu:0"
    assert all(word in f["message"] for word in ("rank 2", "cpu:0", "node-b", why))
    assert doc["run"]["distributed"]["ranks"][2]["verdict"] == "invalid"
    assert why in rendered(doc)


def test_a_rank_neither_reporting_nor_explained_is_missing_too():
    ranks = world()
    reports = {r.rank: rank_report(r.unit, r.host) for r in ranks[:3]}
    doc = merge_rank_reports(reports, ranks, missing={}, run=dict(RUN))
    assert doc["verdict"] == "invalid" and "rank 3 wrote no report" in doc["units"][3]["reason"]


def test_a_rank_whose_invariant_fired_fails_the_cluster_with_its_evidence_renamed():
    record = {"check": "golden_fp32", "where": "[0, 7]", "expected": "0x41200000", "actual": "0x41200400",
              "mask": "0x00000400"}  # fmt: skip
    doc = cluster(world(), r1={"mismatched": {3: [record]}})
    assert (doc["verdict"], doc["exit_code"]) == ("fail", 1)
    assert [u for u, v in verdicts(doc).items() if v != "pass"] == ["rank1/cpu:1"]
    assert doc["mismatches"] == [{"unit": "rank1/cpu:1", "index": 3, "workload": "matmul_golden", **record}]
    (f,) = [f for f in doc["findings"] if f["kind"] == "invariant"]
    assert f["unit"] == "rank1/cpu:1" and f["message"].startswith("rank1/cpu:1 computed wrong results")
    assert f["next"].startswith("on node-a: ") and "--units cpu:1" in f["next"]  # run there, by its own name
    text = rendered(doc)
    assert "first mismatches: case 3 [0, 7]" in text and text.rstrip().endswith("exit: fail")


def test_a_divergent_digest_is_named_by_its_host_majority_among_four_ranks_on_two_hosts():
    """Three ranks on node-a, one on node-b: rank 1 loses its host's vote 2 to 1 (compare's basis
    `host`); the others pass, and nothing else is blamed."""
    ranks = world(("node-a", "node-a", "node-a", "node-b"))
    doc = cluster(ranks, r1={"wrong": {4: "f" * 16}})
    assert (doc["verdict"], doc["exit_code"]) == ("fail", 1)
    assert [u for u, v in verdicts(doc).items() if v != "pass"] == ["rank1/cpu:1"]
    assert "case 4 (train)" in doc["units"][1]["reason"]
    (f,) = [f for f in doc["findings"] if f["kind"] == "divergent"]
    assert f["unit"] == "rank1/cpu:1" and "node-a" in f["message"] and "its host" in f["message"]
    assert f["next"].startswith("on node-a: sdcscan run --profile quick --seed 7 --units cpu:1")
    (d,) = doc["disputes"]
    assert (d["index"], d["workload"], d["majority"]) == (4, "train", None)  # only its host decides
    assert d["digests"]["rank1/cpu:1"] == "f" * 16 and d["digests"]["rank3/cpu:0"] == digest(4)
    # the rate bound its own rank's pass gave goes with the pass; the others keep theirs
    bounds = {u["id"]: u["checked"]["matmul_golden"]["sdc_rate_bound"] for u in doc["units"]}
    assert bounds.pop("rank1/cpu:1") is None and all(b is not None and b > 0 for b in bounds.values())


def test_one_vote_per_host_the_larger_host_does_not_outvote_three_others():
    """Three ranks of node-a agree on a wrong digest; three one-rank hosts agree on the right one:
    the hosts decide 3 to 1 (`fleet`), and node-a's whole host is divergent in one finding."""
    ranks = world(("node-a", "node-a", "node-a", "node-b", "node-c", "node-d"))
    bad = {"wrong": {2: "e" * 16}}
    doc = cluster(ranks, r0=bad, r1=bad, r2=bad)
    assert [u for u, v in verdicts(doc).items() if v == "fail"] == [
        "rank0/cpu:0",
        "rank1/cpu:1",
        "rank2/cpu:2",
    ]
    assert doc["exit_code"] == 1
    (f,) = [f for f in doc["findings"] if f["kind"] == "divergent"]
    assert f["unit"] is None and "rank0/cpu:0, rank1/cpu:1, rank2/cpu:2 on node-a" in f["message"]
    assert "more than 2/3 of the hosts" in f["message"]
    assert doc["disputes"][0]["majority"] == digest(2)


def test_a_tie_inside_a_host_with_too_few_hosts_is_undecided_never_a_failure():
    """Two ranks per host on two hosts: rank 3 disagrees with rank 2, its host ties and abstains, and
    one voting host cannot settle the case. compare calls it undecided: both are invalid, exit 3."""
    doc = cluster(world(), r3={"wrong": {1: "d" * 16}})
    assert (doc["verdict"], doc["exit_code"]) == ("invalid", 3)
    assert verdicts(doc) == {"rank0/cpu:0": "pass", "rank1/cpu:1": "pass", "rank2/cpu:0": "invalid",
                             "rank3/cpu:1": "invalid"}  # fmt: skip
    (f,) = [f for f in doc["findings"] if f["kind"] == "undecided"]
    assert "rank2/cpu:0, rank3/cpu:1" in f["message"] and "node-b" in f["message"]
    assert "divergent" not in kinds(doc)


def test_distributed_attributions_are_one_finding_per_distinct_text():
    """train_dp records the attribution on every rank it accuses, prefixed by the step that showed it;
    one finding per attribution, however many cases and ranks. A plain workload's mismatch is evidence
    of its own unit, not an attribution."""
    wl = ("train_dp", "matmul_golden")

    def rec(step: int, text: str = ATTRIBUTION) -> dict[str, Any]:
        return {
            "check": "state_hash",
            "where": f"step {step}: {text}",
            "expected": "aa",
            "actual": "bb",
            "mask": None,
        }

    other = "hop 1→2 corrupts blocks in transit: rank 2 got source 1's block wrong"
    plain = {"check": "golden_fp32", "where": "[1, 2]", "expected": "0x1", "actual": "0x3", "mask": "0x2"}
    doc = cluster(
        world(),
        r3={"mismatched": {0: [rec(3)], 2: [rec(7)], 1: [plain]}, "workloads": wl},
        r2={"mismatched": {4: [rec(5, other)]}, "workloads": wl},
        r1={"mismatched": {2: [rec(7)]}, "workloads": wl},
        r0={"workloads": wl},
    )
    found = [f["message"] for f in doc["findings"] if f["kind"] == "attribution"]
    assert found == [
        f"{ATTRIBUTION} (train_dp, 2 case(s), first case 0, step 3; reported by rank1/cpu:1, rank3/cpu:1).",
        f"{other} (train_dp, 1 case(s), first case 4, step 5; reported by rank2/cpu:0).",
    ]
    assert doc["exit_code"] == 1


def test_an_interrupted_rank_makes_the_cluster_interrupted_as_a_host_report_would_be():
    doc = cluster(world(), r2={"interrupted": "SIGTERM"})
    assert doc["verdict"] == "interrupted" and doc["run"]["interrupted_by"] == "SIGTERM"
    assert doc["exit_code"] == 143
    assert cluster(world())["run"].get("interrupted_by") is None


def test_sdcscan_report_shows_a_cluster_report_and_exits_with_its_verdict(tmp_path: Path):
    doc = cluster(world(), missing={1: "rank 1 hung: no heartbeat for 60 s"})
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(doc))
    result = CliRunner().invoke(cli, ["report", str(path)])
    assert result.exit_code == 3
    assert "rank1/cpu:1" in result.output and "no heartbeat" in result.output


def test_host_findings_of_ranks_on_one_host_are_said_once_of_their_host():
    ranks = world()
    reports = {r.rank: rank_report(r.unit, r.host) for r in ranks}
    for r in reports.values():
        r["findings"].append(
            {"kind": "corrected_errors", "unit": None, "message": "this host: 2 CEs", "next": None}
        )
    doc = merge_rank_reports(reports, ranks, missing={}, run=dict(RUN))
    said = [f["message"] for f in doc["findings"] if f["kind"] == "corrected_errors"]
    assert said == ["node-a: this host: 2 CEs", "node-b: this host: 2 CEs"]


def test_renaming_touches_whole_unit_ids_only():
    ranks = [RankInfo(0, "h", 0, "cpu:1")]
    report = rank_report("cpu:1", "h")
    report["findings"].append(
        {"kind": "note", "unit": "cpu:1", "message": "cpu:1 is next to cpu:10", "next": None}
    )
    doc = merge_rank_reports({0: report}, ranks, missing={}, run=dict(RUN))
    assert doc["findings"][-1]["message"] == "rank0/cpu:1 is next to cpu:10"


def test_unit_order_sorts_ranks_by_number_then_unit():
    ids = ["rank10/cpu:0", "rank2/cuda:1", "rank2/cpu:3", "rank1/cpu:0"]
    assert sorted(ids, key=unit_order) == ["rank1/cpu:0", "rank2/cpu:3", "rank2/cuda:1", "rank10/cpu:0"]
    assert sorted(["cpu:10", "cpu:2", "cuda:0"], key=unit_order) == ["cpu:2", "cpu:10", "cuda:0"]
    assert rank_unit_id(3, "cuda:1") == "rank3/cuda:1"


def test_the_schema_refuses_a_unit_id_that_is_neither_form():
    doc = cluster(world())
    doc["units"][0]["id"] = "node-a/cpu:0"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)


@pytest.mark.parametrize(
    ("ranks", "reports"),
    [
        ([RankInfo(0, "h", 0, "cpu:0"), RankInfo(0, "h", 1, "cpu:1")], {}),  # a rank twice
        ([RankInfo(0, "h", 0, "cpu:0")], {5: {}}),  # a report of a rank not in the world
    ],
)
def test_an_inconsistent_world_is_refused(ranks: list[RankInfo], reports: dict[int, Any]):
    with pytest.raises(ValueError):
        merge_rank_reports(reports, ranks, missing={}, run=dict(RUN))


def test_a_rank_unit_must_be_cpu_or_cuda():
    with pytest.raises(ValueError, match="not cpu:N or cuda:N"):
        RankInfo(0, "h", 0, "gpu0")


def test_a_damaged_rank_report_leaves_its_rank_unjudged_not_the_cluster_unreported():
    ranks = world()
    reports = {r.rank: rank_report(r.unit, r.host) for r in ranks}
    reports[1]["units"][0]["cases"]["seconds"][0] = "soon"
    doc = merge_rank_reports(reports, ranks, missing={}, run=dict(RUN))
    assert verdicts(doc)["rank1/cpu:1"] == "invalid" and doc["exit_code"] == 3
    assert "rank 1's report: units[0].cases.seconds[0]: not a number" in doc["units"][1]["reason"]


def test_the_backend_comes_from_the_rank_reports_when_not_given():
    """A rank report's run.distributed says where the rank sat and what it saw (the schema allows it)."""
    ranks = world()
    reports = {r.rank: rank_report(r.unit, r.host) for r in ranks}
    for r in ranks:
        reports[r.rank]["run"]["distributed"] = {"rank": r.rank, "world_size": 4, "backend": "nccl"}
        jsonschema.validate(reports[r.rank], SCHEMA)
    doc = merge_rank_reports(reports, ranks, missing={}, run=dict(RUN))
    jsonschema.validate(doc, SCHEMA)
    assert doc["run"]["distributed"]["backend"] == "nccl" and "rank" not in doc["run"]["distributed"]
