"""Fleet comparison: majority, undecided, partitions, invariants, invalid, slow, coverage, determinism."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from sdcscan.errors import UsageError
from sdcscan.fleet.compare import Options, summarize
from sdcscan.fleet.model import parse_time
from sdcscan.fleet.perf import robust_z
from sdcscan.fleet.reading import expand_paths, read_hosts, read_reports
from tests.helpers.fleet import PLAN_SHA, extract, good, report, unit

NOW = parse_time("2025-06-02T00:00:00Z")


def kinds(summary: Any) -> dict[tuple[str, str | None], str]:
    """(host, unit) -> kind, for compact assertions."""
    return {(f.host, f.unit): f.kind for f in summary.findings}


def one_case_fleet(case0: list[str | None]) -> list[dict[str, Any]]:
    """One unit per host; case 0 produces the given digests (None: the case errored), cases 1-3 agree."""
    out = []
    for n, d in enumerate(case0):
        digests = {0: good("c1", 0) if d == "a" else d and f"{d * 16}"[:16]}
        statuses = {0: "error"} if d is None else {}
        out.append(report(f"h{n}", [unit("cpu:0", digests=digests, statuses=statuses)]))
    return out


# One unit per host, so each row is also the hosts' vote. Issue 12 changed the rule from a strict
# majority of units to one vote per host, decided only by more than 2/3 of at least 3 voting hosts and
# a lead of 2 hosts: rows that used to convict a minority of a small or close vote (a a b; a a a b b;
# a a a b c; a a a a b c c) are now undecided, and the rows that still convict are new.
@pytest.mark.parametrize(
    ("case0", "divergent", "undecided", "groups"),
    [
        (["a"], [], [], 0),
        (["a", "a", "a"], [], [], 0),
        (["a", "a", "b"], [], ["h0", "h1", "h2"], 0),  # Adept's pattern at its smallest: nobody accused
        (["a", "b"], [], ["h0", "h1"], 0),  # two hosts and a tie
        (["a", "a", "b", "b"], [], ["h0", "h1", "h2", "h3"], 0),
        (["a", "a", "a", "b"], ["h3"], [], 0),  # 3 of 4 hosts, a lead of 2: decided
        (["a", "a", "a", "b", "b"], [], ["h0", "h1", "h2", "h3", "h4"], 0),  # 3 of 5 is a close split
        (["a", "a", "a", "b", "c"], [], ["h0", "h1", "h2", "h3", "h4"], 0),
        (["a", None, "b"], [], ["h0", "h2"], 0),  # an errored case does not vote
        (["a", "a", "a", "a", "b", "b"], [], [f"h{k}" for k in range(6)], 0),  # exactly 2/3: not enough
        (["a", "a", "a", "a", "a", "b", "b"], ["h5", "h6"], [], 1),  # a minority agreeing with itself
        (["a", "a", "a", "a", "a", "a", "b", "c"], ["h6", "h7"], [], 0),
    ],
)
def test_hosts_decide_each_case(
    case0: list[str | None], divergent: list[str], undecided: list[str], groups: int
):
    """More than 2/3 of >= 3 voting hosts and a lead of 2 win a case; otherwise it is undecided (one
    finding per host, unit None) and nobody is divergent."""
    s = summarize(extract(one_case_fleet(case0)))
    found = kinds(s)
    assert sorted(h for (h, _), k in found.items() if k == "divergent") == divergent
    assert sorted(h for (h, u), k in found.items() if k == "undecided" and u is None) == undecided
    assert len(s.groups) == groups
    assert s.exit_code == (1 if divergent else 0)


def test_divergent_evidence_names_cases_and_workloads():
    """A divergent unit's evidence: disputed count, first disputed case, its workload, the digests, and
    how many hosts and units stood on each side."""
    bad = unit("cpu:1", cases=6, digests={3: "f" * 16, 4: "e" * 16})
    fleet = [report(f"h{n}", [unit("cpu:0", cases=6), unit("cpu:1", cases=6)]) for n in range(3)]
    fleet.append(report("h9", [unit("cpu:0", cases=6), bad]))
    (f,) = summarize(extract(fleet)).findings
    e = f.evidence
    assert (f.host, f.unit, f.kind) == ("h9", "cpu:1", "divergent")
    assert e["disputed_cases"] == 2 and e["first_disputed_case"] == 3 and e["workload"] == "matmul_golden"
    assert e["workloads"] == ["matmul_golden", "train"] and e["cases_compared"] == 6
    assert e["digest"] == "f" * 16 and e["reference_digest"] == good("c1", 3) and e["basis"] == "fleet"
    # h9's two units tie on case 3, so h9 abstains: 3 hosts voted, 8 units produced a digest.
    assert (e["hosts_voted"], e["units_voted"]) == (3, 8)
    assert e["sides"] == [
        {"digest": good("c1", 3), "hosts": 3, "units": 7},
        {"digest": "f" * 16, "hosts": 0, "units": 1},
    ]
    assert e["group"] is None and e["profile_sha256"] == PLAN_SHA and e["seed"] == 7


def test_clean_fleet_is_silent():
    """Healthy units, different case counts, two cohorts: no finding, exit 0."""
    fleet = [report(f"h{n}", [unit("cpu:0", cases=3 + n % 3, cohort=f"c{n % 2}")]) for n in range(10)]
    s = summarize(extract(fleet))
    assert s.findings == () and s.exit_code == 0
    # c0 ran cases 0-4 with two units on case 4; in c1 only one unit ran case 4: not a comparison
    assert s.counts["comparison_groups"] == 2 and s.counts["cases_compared"] == 9


def test_digests_are_compared_only_within_plan_and_cohort():
    """Different cohorts or seeds legitimately produce different digests: never compared."""
    fleet = [report(f"a{n}", [unit(cohort="c1")]) for n in range(3)]
    fleet += [report("b0", [unit(cohort="c2")])]  # alone in its cohort
    fleet += [report("s0", [unit(seed=8)], seed=8)]  # alone in its plan
    assert summarize(extract(fleet)).findings == ()


def test_invariant_failures_are_findings_and_do_not_vote():
    """A `mismatch` case is an invariant finding, not also a consensus dispute."""
    rec = {
        "unit": "cpu:0",
        "index": 2,
        "workload": "train",
        "check": "abft_row",
        "where": "r3",
        "expected": "1",
        "actual": "2",
        "mask": "3",
    }
    bad = unit("cpu:0", digests={2: "f" * 16}, statuses={2: "mismatch"}, verdict="fail", mismatches=1)
    fleet = [report(f"h{n}", [unit()]) for n in range(3)] + [report("bad", [bad], mismatches=[rec])]
    s = summarize(extract(fleet))
    assert kinds(s) == {("bad", "cpu:0"): "invariant"}
    e = s.findings[0].evidence
    assert e["mismatches"] == 1 and e["first_case"] == 2 and e["checks"] == ["abft_row"]
    assert s.exit_code == 1


def test_invalid_runs_are_findings_but_do_not_fail_compare():
    """An invalid run is listed per invalid unit (or for the host); compare still exits 0 for it alone."""
    dead = unit("cpu:1", cases=0, verdict="invalid", reason="worker died")
    fleet = [report("h0"), report("h1", [unit("cpu:0"), dead]), report("h2", verdict="invalid")]
    s = summarize(extract(fleet))
    assert kinds(s) == {("h1", "cpu:1"): "invalid", ("h2", None): "invalid"}
    assert s.findings[0].evidence["reason"] == "worker died"
    assert s.exit_code == 0


def speed_fleet(values: list[float], cohort: str = "c1") -> list[dict[str, Any]]:
    """One unit per host with the given train throughputs."""
    return [report(f"h{n:02d}", [unit(cohort=cohort, ops={"train": v})]) for n, v in enumerate(values)]


@pytest.mark.parametrize(
    ("values", "slow"),
    [
        ([100.0 + k % 5 for k in range(20)], []),  # a uniform fleet
        ([100.0 + k % 5 for k in range(19)] + [50.0], ["h19"]),  # half speed
        ([100.0 + k % 5 for k in range(19)] + [93.0], []),  # z beyond the threshold, but only 7% below
        (
            [100.0 * (1 + (k % 10) / 10) for k in range(19)] + [85.0],
            [],
        ),  # far below, but in a wide spread: small z
        ([100.0] * 19 + [89.0], ["h19"]),  # MAD 0: any unit 10% below is slow
        ([100.0, 100.0, 100.0, 50.0], []),  # too few peers to judge
        ([], []),
    ],
)
def test_slow_units_need_both_a_robust_z_and_a_drop(values: list[float], slow: list[str]):
    """Slow = robust z below -3.5 AND at least 10% below the median of its (profile, cohort, workload)."""
    s = summarize(extract(speed_fleet(values)))
    assert sorted(h for (h, _), k in kinds(s).items() if k == "slow") == slow
    assert s.exit_code == (1 if slow else 0)


def test_slow_thresholds_are_configurable_and_cohorts_kept_apart():
    """A looser drop catches a 7% laggard; a slower cohort is not slow against a faster one."""
    values = [100.0 + k % 5 for k in range(19)] + [93.0]
    assert kinds(summarize(extract(speed_fleet(values)), options=Options(slow_drop=0.05))) == {
        ("h19", "cpu:0"): "slow"
    }
    fleet = speed_fleet([100.0 + k % 5 for k in range(10)]) + [
        report(f"z{n}", [unit(cohort="c2", ops={"train": 50.0 + n % 3})]) for n in range(10)
    ]
    assert summarize(extract(fleet)).findings == ()


def test_slow_evidence():
    """Evidence says the workload, throughput, the healthy peers' median, drop, z and the number of peers."""
    s = summarize(extract(speed_fleet([100.0 + k % 5 for k in range(19)] + [50.0])))
    e = s.findings[0].evidence
    assert e["workload"] == "train" and e["value"] == 50.0 and e["healthy_median"] == 102.0
    assert e["drop"] == pytest.approx(0.5098, abs=1e-4) and e["z"] < -3.5 and e["peers"] == 20


def test_robust_z():
    """0.6745 (x - median) / MAD; infinite when the MAD is 0 and x is off the median."""
    assert robust_z(90.0, 100.0, 6.745) == pytest.approx(-1.0)
    assert robust_z(100.0, 100.0, 0.0) == 0.0
    assert robust_z(99.0, 100.0, 0.0) == float("-inf")


def test_coverage_missing_and_stale_against_a_given_now():
    """Listed hosts without a usable report are missing; those whose newest report is too old are stale."""
    fleet = [
        report("fresh"),
        report("old", ended_at="2025-03-01T00:00:00Z"),
        report("old", run_id="old-2", ended_at="2025-01-01T00:00:00Z"),
        report("unlisted"),
    ]
    opts = Options(hosts=("fresh", "old", "gone"), now=NOW)
    s = summarize(extract(fleet), options=opts)
    assert kinds(s) == {("old", None): "stale", ("gone", None): "missing", ("unlisted", None): "unlisted"}
    stale = next(f for f in s.findings if f.kind == "stale")
    assert stale.evidence["newest_report_at"] == "2025-03-01T00:00:00Z" and stale.evidence["age_days"] == 93.0
    assert s.counts["unlisted_hosts"] == 1 and s.exit_code == 0
    lax = summarize(extract(fleet), options=Options(hosts=("old",), now=NOW, stale_s=100 * 86400))
    assert kinds(lax) == {
        ("fresh", None): "unlisted",
        ("unlisted", None): "unlisted",
    }  # "old" is fresh enough
    with pytest.raises(ValueError, match="now"):
        summarize(extract(fleet), options=Options(hosts=("fresh",)))


def test_several_reports_of_one_unit_merge_into_the_newest_evidence():
    """One record per (host, unit, kind); evidence from the newest report, with the number of reports."""
    bad_old = unit("cpu:0", digests={1: "f" * 16})
    bad_new = unit("cpu:0", digests={2: "e" * 16}, seed=8)
    fleet = [report(f"h{n}", [unit()]) for n in range(3)] + [
        report(f"h{n}", [unit(seed=8)], seed=8, run_id=f"h{n}-8") for n in range(3)
    ]
    fleet += [
        report("bad", [bad_old], run_id="r1"),
        report("bad", [bad_new], seed=8, run_id="r2", ended_at="2025-06-01T01:00:00Z"),
    ]
    (f,) = summarize(extract(fleet)).findings
    assert f.evidence["run"] == "r2" and f.evidence["first_disputed_case"] == 2 and f.evidence["reports"] == 2


def test_duplicates_are_skipped_deterministically():
    """The same (hostname, run id) twice: one is used, the other listed as skipped, whatever the order."""
    a = report("h1")
    b = report("h1", [unit("cpu:0")])  # same run id, different content
    for order in ([a, b], [b, a]):
        s = summarize(extract([report("h0"), *order]))
        assert [x.reason for x in s.skipped] == ["duplicate of h1.json (same host and run id)"]
        assert s.counts["reports"] == 2


def test_a_run_id_reused_under_another_plan_is_not_a_duplicate():
    """A host that reused a run id (a restored image, a fixed --run-id) for another plan: both reports are
    read, and the divergent unit of the second plan is found (issue 43: it was dropped as a duplicate)."""
    plan_b = [report(f"p{n}", [unit("cpu:0", seed=9)], seed=9, run_id=f"p{n}-run") for n in range(4)]
    divergent = report("h1", [unit("cpu:0", seed=9, digests={0: "e" * 16})], seed=9, run_id="h1-run")
    s = summarize(extract([report("h1", run_id="h1-run"), divergent, *plan_b]))
    assert not s.skipped and s.counts["reports"] == 6 and s.counts["plans"] == 2
    assert [(f.kind, f.host) for f in s.findings if f.kind == "divergent"] == [("divergent", "h1")]


def write_fleet(tmp: Path, reports: list[dict[str, Any]]) -> Path:
    """Write reports as files under tmp/reports/<len(host) % 3>/ (to exercise recursion)."""
    root = tmp / "reports"
    for r in reports:
        host = r["host"]["hostname"]
        p = root / str(len(host) % 3) / f"{host}-{r['run']['id']}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(r))
    return root


def test_same_inputs_in_any_order_give_byte_identical_json(tmp_path: Path):
    """Shuffled report order and file layout: identical `compare --json` bytes."""
    fleet = one_case_fleet(["a", "a", "a", "a", "b", "b", "c"]) + speed_fleet(
        [100.0 + k % 7 for k in range(9)] + [40.0]
    )
    fleet.append(report("h0", run_id="dup"))
    outputs = set()
    for k in range(4):
        random.Random(k).shuffle(fleet)
        root = write_fleet(tmp_path / str(k), fleet)
        shutil.copy(next(root.rglob("h1-*.json")), root / "copy.json")
        reports, skipped = read_reports([str(root)])
        random.Random(k).shuffle(reports)
        s = summarize(reports, skipped=skipped, options=Options(hosts=("h0", "zz"), now=NOW))
        text = json.dumps(s.to_dict(), indent=2).replace(str(tmp_path / str(k)), "ROOT")
        outputs.add(text)
        shutil.rmtree(tmp_path / str(k))
    assert len(outputs) == 1


def test_reader_skips_bad_files_with_reasons_and_goes_on(tmp_path: Path):
    """Truncated, non-JSON, other-schema, non-report, golden and missing inputs are listed, never fatal."""
    root = write_fleet(tmp_path, [report("h0"), report("h1")])
    good_text = next(root.rglob("h0-*.json")).read_text()
    bad = {
        "trunc.json": good_text[:50],
        "junk.json": "nope",
        "list.json": "[1, 2]",
        "v2.json": good_text.replace('"schema_version": 1', '"schema_version": 2'),
        "golden.json": '{"golden_version": 1, "entries": []}',
        "copy.json": good_text,
        "nokey.json": json.dumps({**report("h5"), "run": {**report("h5")["run"], "profile": {"name": "q"}}}),
    }
    for name, text in bad.items():
        (root / name).write_text(text)
    reports, skipped = read_reports([str(root), str(tmp_path / "nothere.json"), str(tmp_path / "*.nomatch")])
    s = summarize(reports, skipped=skipped)
    reasons = {Path(x.path).name: x.reason for x in s.skipped}
    assert (
        reasons["trunc.json"] == "truncated or not JSON" and reasons["junk.json"] == "truncated or not JSON"
    )
    assert "top level is not an object" in reasons["list.json"]
    assert "schema_version 2 is not supported" in reasons["v2.json"]
    assert reasons["golden.json"] == "a golden file, not a report"
    assert reasons["copy.json"].endswith("(identical content)")
    assert reasons["nokey.json"] == "run.profile: missing key 'sha256'"
    assert (
        reasons["nothere.json"] == "no such file or directory"
        and reasons["*.nomatch"] == "pattern matches no file"
    )
    assert s.counts["reports"] == 2 and s.findings == ()


def test_nothing_usable_is_a_usage_error(tmp_path: Path):
    """Only bad inputs: a clear error with the first reasons (exit 2)."""
    (tmp_path / "a.json").write_text("{")
    with pytest.raises(UsageError, match=r"no usable report to compare: .*a\.json: truncated") as err:
        read_reports([str(tmp_path)])
    assert err.value.exit_code == 2


def test_paths_files_directories_and_globs_are_expanded_once(tmp_path: Path):
    """A file named twice (directly, via its directory, via a glob) is read once."""
    root = write_fleet(tmp_path, [report("h0"), report("h1")])
    f = str(next(root.rglob("h0-*.json")))
    files, skipped = expand_paths([f, str(root), str(root / "*" / "*.json"), str(Path(f).parent)])
    assert len(files) == 2 and skipped == []


def test_hosts_file(tmp_path: Path):
    """One hostname per line; blanks and comments ignored; an empty list is an error."""
    p = tmp_path / "hosts"
    p.write_text("# fleet\nh1\n\nh0  # rack 3\nh1\n")
    assert read_hosts(str(p)) == ("h0", "h1")
    p.write_text("# nobody\n")
    with pytest.raises(UsageError, match="lists no host"):
        read_hosts(str(p))
