"""Issue 12: one vote per host, the newest report wins, a golden overrules, `undecided` is not silence,
machines that share a hostname stay apart. Each fleet comes from `scripts/simulate_fleet.py --scenario`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from sdcscan.cli.fleet import compare
from sdcscan.errors import ReportError
from sdcscan.fleet.compare import Options, summarize
from sdcscan.fleet.golden import index_golden
from sdcscan.fleet.golden_record import record
from sdcscan.fleet.model import Extractor
from sdcscan.report import SCHEMA_PATH
from sdcscan.units import machine_id
from tests.helpers.fleet import extract, good, report, unit
from tests.helpers.scripts import load_script

SIM = load_script("simulate_fleet")
ALL8 = [f"cpu:{k}" for k in range(8)]


def run_scenario(name: str, *, golden: bool = False, shuffle: int | None = None) -> Any:
    """Summarize a scenario's reports as `compare` does (source = HOST-N.json, as write_scenario names them)."""
    docs = list(enumerate(SIM.scenario_reports(name)))
    if shuffle is not None:
        random.Random(shuffle).shuffle(docs)
    ex = Extractor()
    reports = [ex.extract(r, source=f"{r['host']['hostname']}-{n}.json") for n, r in docs]
    opts = Options(golden=index_golden(SIM.golden_document()) if golden else None)
    return summarize(reports, options=opts)


def found(summary: Any) -> list[tuple[str, str, str | None]]:
    """(kind, host, unit) of every finding, in output order."""
    return [(f.kind, f.host, f.unit) for f in summary.findings]


def one(summary: Any, kind: str, host: str, unit: str | None) -> dict[str, Any]:
    """The evidence of the one finding (kind, host, unit)."""
    (f,) = [f for f in summary.findings if (f.kind, f.host, f.unit) == (kind, host, unit)]
    return f.evidence


GOOD1 = SIM.base_cases(SIM.COHORTS[0], SIM.SCENARIO_SEED, SIM.SCENARIO_CASES)["digest"][1]


def wrong1(tag: str) -> str:
    return SIM.wrong_digest(tag, 1)


@pytest.mark.parametrize(
    ("votes", "decision"),
    [
        ({"a": 3}, "a"),
        ({"a": 2}, None),  # too few hosts, even unanimous
        ({"a": 2, "b": 1}, None),  # Adept: two of three
        ({"a": 3, "b": 1}, "a"),  # more than 2/3 and a lead of 2
        ({"a": 4, "b": 2}, None),  # exactly 2/3: not more
        ({"a": 5, "b": 2}, "a"),
        ({"a": 3, "b": 1, "c": 1}, None),  # 3 of 5
        ({"a": 7, "b": 3}, "a"),
        ({}, None),
    ],
)
def test_fleet_decision_rule(votes: dict[str, int], decision: str | None):
    """Hosts decide a disputed case only with >= 3 voters, more than 2/3 of them and a lead of 2: one
    single-unit host per vote, judged by the SQL rule. Decided: the other digests' hosts are divergent
    against it; open: every host is undecided; one digest only: nothing to judge."""
    held = [d for d, n in sorted(votes.items()) for _ in range(n)]
    digests = {d: good("c1", 1) if d == "a" else wrong1(d) for d in votes}
    reports = [report(f"h{k}", [unit("cpu:0", digests={1: digests[d]})]) for k, d in enumerate(held)]
    s = summarize(extract(reports)) if reports else None
    if s is None or len(votes) == 1:
        assert s is None or found(s) == []
        return
    if decision is None:
        assert found(s) == [("undecided", f"h{k}", None) for k in range(len(held))]
        return
    wrong = [("divergent", f"h{k}", "cpu:0") for k, d in enumerate(held) if d != decision]
    assert found(s) == wrong
    assert {one(s, *w)["reference_digest"] for w in wrong} == {digests[decision]}


@pytest.mark.parametrize(
    ("wrong", "healthy", "peers"),
    [(5, 3, 1), (5, 3, 2), (3, 1, 1), (3, 1, 2), (2, 1, 1), (2, 1, 2)],
)
def test_a_host_whose_majority_is_wrong_does_not_get_its_healthy_units_accused(wrong, healthy, peers):
    """Issue 30: most of one host's units share a wrong digest, and the 1 or 2 other hosts of the cohort
    agree with its healthy minority. Too few hosts to decide: the host is undecided, and its healthy
    units are never named divergent on their own host's vote (they were, basis "host", exit 1)."""
    units = [unit(f"cpu:{k}", digests={1: wrong1("big")}) for k in range(wrong)]
    units += [unit(f"cpu:{wrong + k}") for k in range(healthy)]
    peer_reports = [
        report(f"peer{k}", [unit(f"cpu:{j}") for j in range(wrong + healthy)]) for k in range(peers)
    ]
    s = summarize(extract([report("big", units), *peer_reports]))
    assert not [f for f in s.findings if f.kind == "divergent"], found(s)
    assert ("undecided", "big", None) in found(s)
    e = one(s, "undecided", "big", None)
    assert e["host_digest"] == wrong1("big") and e["sides"][0]["hosts"] == peers
    assert s.exit_code == 0


@pytest.mark.parametrize("peers", [3, 4, 6])
def test_a_host_whose_majority_is_wrong_is_accused_once_the_fleet_can_decide(peers):
    """The other direction: with 3 or more other hosts (4+ in the cohort) the fleet decides, the host's
    wrong majority is divergent (basis fleet) and its healthy minority is not."""
    units = [unit(f"cpu:{k}", digests={1: wrong1("big")}) for k in range(5)]
    units += [unit(f"cpu:{5 + k}") for k in range(3)]
    peer_reports = [report(f"peer{k}", [unit(f"cpu:{j}") for j in range(8)]) for k in range(peers)]
    s = summarize(extract([report("big", units), *peer_reports]))
    assert found(s) == [("divergent", "big", f"cpu:{k}") for k in range(5)]
    assert {one(s, "divergent", "big", f"cpu:{k}")["basis"] for k in range(5)} == {"fleet"}
    assert s.exit_code == 1


def test_a_unit_against_its_host_is_still_divergent_when_the_fleet_is_split():
    """The exception is narrow: where the other hosts do not all hold the minority's digest, a unit
    that differs from its host's majority on an open case stays divergent (basis host)."""
    units = [unit(f"cpu:{k}", digests={1: wrong1("x")}) for k in range(3)] + [unit("cpu:3")]
    others = [report("p0", [unit("cpu:0")]), report("p1", [unit("cpu:0", digests={1: wrong1("y")})])]
    s = summarize(extract([report("big", units), *others]))
    assert ("divergent", "big", "cpu:3") in found(s)
    assert one(s, "divergent", "big", "cpu:3")["basis"] == "host"


def test_an_8_unit_host_cannot_outvote_two_healthy_2_unit_hosts():
    """8 wrong units on one host against 2 healthy hosts of 2 units: 1 host against 2, undecided, and
    the finding counts hosts, not only units. With 4 healthy peers the 8 units are divergent."""
    s = run_scenario("big-faulty-host")
    assert found(s) == [("undecided", h, None) for h in ("big", "small0", "small1")]
    e = one(s, "undecided", "big", None)
    assert e["sides"] == [
        {"digest": GOOD1, "hosts": 2, "units": 4},
        {"digest": wrong1("big"), "hosts": 1, "units": 8},
    ]
    assert e["host_digest"] == wrong1("big") and e["units"] == ALL8 and e["undecided_cases"] == 2
    assert (e["hosts_voted"], e["units_voted"]) == (3, 12) and e["why"].startswith("close split")
    assert (s.exit_code, s.exit_code_with(True)) == (0, 3)
    s = run_scenario("big-faulty-host-4-peers")
    # All 8 units agree with each other, not with the fleet: one row for the host, naming its units.
    assert found(s) == [("divergent", "big", None)]
    e = one(s, "divergent", "big", None)
    assert e["units"] == ALL8
    assert e["basis"] == "fleet" and e["disputed_cases"] == 2 and e["sides"][0]["hosts"] == 4
    assert s.exit_code == 1


def test_adept_pattern_accuses_nobody():
    """3 hosts, 2 share a wrong digest: no host is divergent, each is undecided; exit 0 (3 on request)."""
    s = run_scenario("adept")
    assert found(s) == [("undecided", h, None) for h in ("ring0", "ring1", "ring2")]
    assert one(s, "undecided", "ring2", None)["host_digest"] == GOOD1
    assert s.counts["undecided_cases"] == 2 and s.counts["undecided"] == 3
    assert (s.exit_code, s.exit_code_with(True)) == (0, 3)


def test_reruns_of_one_host_do_not_stuff_the_ballot():
    """Three reports of one wrong host against 2 peers: one vote (undecided, nobody accused), the two
    older reports superseded. Against 4 peers the newest report alone convicts it."""
    s = run_scenario("reruns")
    assert found(s) == [("undecided", h, None) for h in ("flaky", "peer0", "peer1")]
    assert [(x["host"], x["path"], x["superseded_by"]["path"]) for x in s.superseded] == [
        ("flaky", "flaky-0.json", "flaky-2.json"),
        ("flaky", "flaky-1.json", "flaky-2.json"),
    ]
    assert (s.counts["reports"], s.counts["superseded"], s.exit_code) == (3, 2, 0)
    s = run_scenario("reruns-4-peers")
    assert found(s) == [("divergent", "flaky", None)]
    e = one(s, "divergent", "flaky", None)
    assert e["units"] == ["cpu:0", "cpu:1"]
    assert e["reports"] == 1 and e["run"] == "flaky-4242-1748862000" and e["sides"][1]["hosts"] == 1
    assert s.exit_code == 1


def test_a_fixed_host_stops_being_accused_and_a_broken_one_starts():
    """Old failing + new passing report: no finding, the old one superseded (fail -> pass). The reverse:
    the new report's unit is divergent, citing its own run; the old passing report superseded."""
    s = run_scenario("fixed-host")
    assert found(s) == [] and s.exit_code == 0
    (old,) = s.superseded
    assert (old["host"], old["verdict"], old["superseded_by"]["verdict"]) == ("node", "fail", "pass")
    s = run_scenario("broken-host")
    assert found(s) == [("divergent", "node", "cpu:0")] and s.exit_code == 1
    e = one(s, "divergent", "node", "cpu:0")
    assert e["run"] == s.superseded[0]["superseded_by"]["run"]
    assert e["own_run"] == {
        "run": e["run"],
        "findings": ["divergent"],
        "reason": "digest disagreed with the cohort majority at case 1 (matmul_golden)",
        "retest": "persistent",
    }
    assert (s.superseded[0]["verdict"], s.superseded[0]["superseded_by"]["verdict"]) == ("pass", "fail")


def test_a_golden_overrules_a_wrong_majority():
    """4 hosts share a wrong digest, 1 is right. Voting alone convicts the right one (4 hosts against
    1); with the golden the 4 are divergent (basis golden, one group) and the right host is named
    nowhere, neither divergent nor undecided."""
    s = run_scenario("golden-vs-majority")
    assert found(s) == [("divergent", "right", None)]
    s = run_scenario("golden-vs-majority", golden=True)
    assert found(s) == [("divergent", f"wrong{k}", None) for k in range(4)]
    e = one(s, "divergent", "wrong2", None)
    assert e["basis"] == "golden" and e["reference_digest"] == GOOD1 and e["group"] == "G1"
    (group,) = s.groups
    assert (group["units"], group["hosts"], group["shared_cases"]) == (8, 4, 2)
    assert "right" not in json.dumps(s.to_dict()["findings"]) and s.exit_code == 1


def test_a_golden_settles_a_tie_inside_one_host():
    """A lone 2-unit host whose units tie: the golden names the wrong unit; the other is no suspect."""
    lone = report("q", [unit("cpu:0", digests={1: "f" * 16}), unit("cpu:1")])
    s = summarize(extract([lone]))
    assert found(s) == [("undecided", "q", None)]
    assert one(s, "undecided", "q", None)["why"].startswith("the host's own units tie")
    g = index_golden(record([report(f"h{k}") for k in range(3)]))
    s = summarize(extract([lone]), options=Options(golden=g))
    assert found(s) == [("divergent", "q", "cpu:0")] and s.exit_code == 1


def test_a_unit_its_own_run_named_failing_is_reported_without_peers():
    """A 2-unit host alone, its run named cpu:1 failing (did not reproduce): cpu:1 is divergent citing
    its own run, cpu:0 is listed nowhere. Without the run's verdict the tie is undecided."""
    s = run_scenario("own-run-named")
    assert found(s) == [("divergent", "solo", "cpu:1")] and s.exit_code == 1
    e = one(s, "divergent", "solo", "cpu:1")
    assert e["basis"] == "host" and e["sides"] == [
        {"digest": GOOD1, "units": 1},
        {"digest": wrong1("solo"), "units": 1},
    ]
    assert e["own_run"]["findings"] == ["not_reproducible"] and e["own_run"]["retest"] == "transient"
    undecided = SIM.scenario_report(SIM.ScenarioHost("solo", wrong={1: "solo"}))  # the run named nobody
    s = summarize(extract([undecided]))
    assert found(s) == [("undecided", "solo", None)] and s.exit_code == 0
    assert one(s, "undecided", "solo", None)["units"] == ["cpu:0", "cpu:1"]


def test_own_run_conviction_stands_even_where_the_fleet_agrees_with_the_unit():
    """Re-runs showed cpu:1 does not reproduce; its main-pass digests match everyone: still divergent,
    on its own run's word, unless a golden covering every case clears it."""
    named = SIM.scenario_report(SIM.ScenarioHost("solo", wrong={1: "solo"}, named_failing=(1,)))
    named["units"][1]["cases"]["digest"] = named["units"][0]["cases"]["digest"]
    peers = [SIM.scenario_report(h) for h in SIM._peers(3)]
    ex = Extractor()
    reports = [ex.extract(r, source=f"{n}.json") for n, r in enumerate([named, *peers])]
    s = summarize(reports)
    assert found(s) == [("divergent", "solo", "cpu:1")]
    assert one(s, "divergent", "solo", "cpu:1")["basis"] == "own run" and s.exit_code == 1
    s = summarize(reports, options=Options(golden=index_golden(SIM.golden_document())))
    assert found(s) == [] and s.exit_code == 0


def test_an_8_against_8_split_is_two_undecided_hosts_with_a_next_step():
    """Two 8-unit hosts that disagree: 2 findings (one per host, not 16 rows), each with what would
    decide it; exit 0, or 3 with fail_on_undecided."""
    s = run_scenario("split-8v8")
    assert found(s) == [("undecided", "left", None), ("undecided", "right", None)]
    e = one(s, "undecided", "left", None)
    assert e["why"] == "only 2 host(s) voted; at least 3 are needed" and e["units"] == ALL8
    assert "--golden GOLDEN" in e["next"] and "more hosts of cohort sim-cohort-a" in e["next"]
    assert f"sdcscan run --profile quick --seed 4242 --units {','.join(ALL8)}" in e["next"]
    assert s.exit_code == 0
    docs = SIM.scenario_reports("split-8v8")
    strict = summarize(extract(docs), options=Options(fail_on_undecided=True))
    assert strict.exit_code == 3 and strict.to_dict()["exit_code"] == 3
    assert strict.options["fail_on_undecided"] is True


def test_undecided_never_overrides_a_failure_exit_code():
    """A divergent unit anywhere: exit 1 with or without fail_on_undecided (1 outranks 3)."""
    docs = SIM.scenario_reports("split-8v8") + SIM.scenario_reports("own-run-named")
    s = summarize(extract(docs), options=Options(fail_on_undecided=True))
    assert {f.kind for f in s.findings} == {"divergent", "undecided"} and s.exit_code == 1


def test_two_machines_with_one_hostname_are_kept_apart():
    """Different machine ids: two hosts, named `node (machine ID)`, and a collision finding. The same
    machine id twice: one host, the older report superseded, no collision."""
    s = run_scenario("hostname-collision")
    a, b = (f"node (machine {m})" for m in (SIM.MACHINE_A, SIM.MACHINE_B))
    assert found(s) == [("divergent", a, "cpu:0"), ("collision", "node", None)]
    assert one(s, "collision", "node", None) == {
        "hostname": "node",
        "machines": sorted([a, b]),
        "untagged_reports": 0,
    }
    assert (s.counts["hosts"], s.counts["reports"], s.superseded, s.exit_code) == (5, 5, (), 1)
    s = run_scenario("same-machine-twice")
    assert found(s) == [("divergent", "node", "cpu:0")]
    assert one(s, "divergent", "node", "cpu:0")["reports"] == 1 and len(s.superseded) == 1


def test_a_report_without_machine_id_under_a_shared_name_stays_under_the_bare_name():
    """Which machine wrote it is unknown: not merged into either machine, counted in the collision."""
    docs = SIM.scenario_reports("hostname-collision")
    docs.append(SIM.scenario_report(SIM.ScenarioHost("node", 4, age=SIM.timedelta(hours=5))))
    s = summarize(extract(docs))
    assert one(s, "collision", "node", None)["untagged_reports"] == 1
    assert s.counts["hosts"] == 6 and s.superseded == ()


@pytest.mark.parametrize("name", sorted(SIM.SCENARIOS))
def test_scenarios_in_any_order_give_identical_json(name: str):
    """Report order never changes the result (newest-report choice, host votes, groups, superseded)."""
    outputs = {json.dumps(run_scenario(name, shuffle=k).to_dict(), sort_keys=True) for k in range(3)}
    assert len(outputs) == 1


@pytest.mark.parametrize("value", [5, "", "x" * 65, "a b", "ä" * 4, ["a"], True])
def test_a_malformed_machine_id_refuses_the_report(value: Any):
    """host.machine_id must be a short alphanumeric hash; null or absent is no id."""
    doc = SIM.scenario_report(SIM.ScenarioHost("h"))
    doc["host"]["machine_id"] = value
    with pytest.raises(ReportError, match="machine_id"):
        Extractor().extract(doc, source="h.json")
    for ok in (None, "abc123"):
        doc["host"]["machine_id"] = ok
        assert Extractor().extract(doc, source="h.json").machine_id == ok


def test_scenario_reports_follow_the_schema_and_machine_id_is_optional():
    """Every scenario report validates; machine_id may be absent or null, not an arbitrary string."""
    schema = json.loads(SCHEMA_PATH.read_text())
    for name in SIM.SCENARIOS:
        for doc in SIM.scenario_reports(name):
            jsonschema.validate(doc, schema)
    doc = SIM.scenario_report(SIM.ScenarioHost("h"))
    doc["host"]["machine_id"] = None
    jsonschema.validate(doc, schema)
    doc["host"]["machine_id"] = "not a hash!"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)


def test_machine_id_is_a_short_hash_never_the_raw_id(tmp_path: Path):
    """16 hex digits of a hash of the first readable id file; None when none is readable."""
    raw = "4c4c4544003910568052b7c04f4e3332"
    (tmp_path / "id").write_text(raw + "\n")
    (tmp_path / "blank").write_text("\n")
    (tmp_path / "uninit").write_text("uninitialized\n")
    got = machine_id((str(tmp_path / "missing"), str(tmp_path / "blank"), str(tmp_path / "id")))
    assert got is not None and len(got) == 16 and int(got, 16) >= 0 and got not in raw
    assert machine_id((str(tmp_path / "id"),)) == got
    assert machine_id((str(tmp_path / "missing"), str(tmp_path / "uninit"))) is None


def test_compare_cli_json_for_issue_12_scenarios(tmp_path: Path):
    """Through `sdcscan compare --json`: the Adept pattern exits 0 with three undecided hosts, and the
    golden overrules a wrong majority with exit 1; superseded reports are listed on stdout and stderr."""
    SIM.write_scenario("adept", tmp_path / "adept")
    result = CliRunner().invoke(compare, [str(tmp_path / "adept" / "reports"), "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [(f["kind"], f["host"], f["unit"]) for f in doc["findings"]] == [
        ("undecided", h, None) for h in ("ring0", "ring1", "ring2")
    ]
    assert doc["compare_version"] == 2 and doc["exit_code"] == 0
    assert "Next for ring0: " in result.stderr and "--seed 4242" in result.stderr
    out = tmp_path / "gm"
    SIM.write_scenario("golden-vs-majority", out)
    result = CliRunner().invoke(
        compare, [str(out / "reports"), "--golden", str(out / "golden.json"), "--json"]
    )
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert {(f["host"], f["evidence"]["basis"]) for f in doc["findings"]} == {
        (f"wrong{k}", "golden") for k in range(4)
    }
    SIM.write_scenario("reruns", tmp_path / "reruns")
    result = CliRunner().invoke(compare, [str(tmp_path / "reruns" / "reports"), "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [Path(x["path"]).name for x in doc["superseded"]] == ["flaky-0.json", "flaky-1.json"]
    assert "Superseded 2 older report(s)" in result.stderr


def test_a_host_rolls_up_only_when_all_its_units_agree_with_each_other():
    """Two wrong units of a host with different wrong digests are two rows: they do not agree with each
    other, so nothing says the cause is host-wide. One wrong unit beside a healthy one is its own row."""
    peers = [report(f"p{k}") for k in range(4)]
    two_ways = report("odd", [unit("cpu:0", digests={1: "e" * 16}), unit("cpu:1", digests={1: "f" * 16})])
    assert found(summarize(extract([*peers, two_ways]))) == [
        ("divergent", "odd", "cpu:0"),
        ("divergent", "odd", "cpu:1"),
    ]
    one_bad = report("half", [unit("cpu:0", digests={1: "e" * 16}), unit("cpu:1")])
    assert found(summarize(extract([*peers, one_bad]))) == [("divergent", "half", "cpu:0")]


def test_a_case_with_many_digests_lists_the_largest_sides_and_counts_the_rest():
    """Issue 30: `sides` is capped at MAX_SIDES digests (the most hosts first), always with the finding's
    own digest and its reference, and `sides_omitted` counts what was left out; nothing is capped below."""
    from sdcscan.fleet.divergence import MAX_SIDES

    healthy = [report(f"ok{k}", [unit("cpu:0")]) for k in range(30)]  # > 2/3 of the hosts
    wrong = [
        report(f"bad{k:02d}", [unit("cpu:0", digests={1: wrong1(f"w{k}")})]) for k in range(MAX_SIDES + 4)
    ]
    s = summarize(extract(healthy + wrong))
    assert found(s) == [("divergent", f"bad{k:02d}", "cpu:0") for k in range(MAX_SIDES + 4)]
    for k in range(MAX_SIDES + 4):
        e = one(s, "divergent", f"bad{k:02d}", "cpu:0")
        digests = [side["digest"] for side in e["sides"]]
        assert digests[0] == good("c1", 1) and e["digest"] in digests
        assert len(digests) in (MAX_SIDES, MAX_SIDES + 1)
        shown_wrong = len(digests) - 1
        assert e["sides_omitted"] == {
            "digests": MAX_SIDES + 4 - shown_wrong,
            "hosts": MAX_SIDES + 4 - shown_wrong,
            "units": MAX_SIDES + 4 - shown_wrong,
        }
    small = summarize(extract(healthy + wrong[:3]))
    assert all("sides_omitted" not in f.evidence for f in small.findings)
