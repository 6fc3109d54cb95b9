"""Slow units and hosts (sdcscan/fleet/perf.py).

Checked here: a healthy reference that a slow batch cannot absorb, a threshold that grows with the
cohort, "slow on most of its workloads", one finding for a host whose units are mostly slow, one
sample per host. Large fleets are built as extracts by scripts/bench_slow.py's generator: healthy
units have 3% normal spread on each workload, slow ones run at 0.75.
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from sdcscan.fleet import perf
from sdcscan.fleet.compare import Options, summarize
from sdcscan.fleet.findings import FleetFinding
from sdcscan.fleet.model import HostReport
from sdcscan.fleet.perf import Reference, slow_threshold
from sdcscan.render.fleet import describe, render_compare
from tests.helpers.fleet import extract, report, unit
from tests.helpers.scripts import load_script

bench = load_script("bench_slow")
GRID = (96.0, 98.0, 100.0, 102.0, 104.0)  # healthy speeds, cycled: median 100, MAD 2


def judge(reports: Iterable[HostReport], **kw: Any) -> tuple[FleetFinding, ...]:
    """The slow findings of `reports` with compare's defaults (z 3.5, drop 10%, 5 peers)."""
    opts = {"slow_z": 3.5, "slow_drop": 0.10, "slow_min_units": 5, **kw}
    return tuple(f for f in summarize(list(reports), options=Options(**opts)).findings if f.kind == "slow")


def where(findings: Iterable[FleetFinding]) -> set[tuple[str, str | None]]:
    """(host, unit) of each finding; every finding here must be `slow`."""
    out = set()
    for f in findings:
        assert f.kind == "slow"
        out.add((f.host, f.unit))
    return out


def grid_fleet(
    hosts: int, units: int = 1, workloads: Iterable[str] = ("train",)
) -> dict[str, list[dict[str, float]]]:
    """host -> per unit, workload -> speed: healthy speeds from GRID, so medians and MADs are exact."""
    wls = tuple(workloads)
    fleet: dict[str, list[dict[str, float]]] = {}
    for i in range(hosts):
        fleet[f"h{i:05d}"] = [{w: GRID[(i * units + k) % len(GRID)] for w in wls} for k in range(units)]
    return fleet


def extracts(fleet: dict[str, list[dict[str, float]]]) -> list[HostReport]:
    """The fleet as report extracts (units cpu:0, cpu:1, ...)."""
    return [
        bench.host_report(host, [bench.unit_record(f"cpu:{k}", tp) for k, tp in enumerate(units)])
        for host, units in fleet.items()
    ]


def planted_findings(slow: set[tuple[str, str]], units: int) -> set[tuple[str, str | None]]:
    """What must be reported for these slow units: the host when most of its units, else each unit."""
    by_host: dict[str, set[str]] = {}
    for host, uid in slow:
        by_host.setdefault(host, set()).add(uid)
    out: set[tuple[str, str | None]] = set()
    for host, uids in by_host.items():
        if len(uids) >= 2 and 2 * len(uids) > units:
            out.add((host, None))
        else:
            out.update((host, u) for u in uids)
    return out


@pytest.mark.parametrize("fraction", [0.01, 0.10, 0.20, 0.30, 0.40])
def test_a_slow_batch_is_found_whole_and_alone(fraction: float):
    """Up to 40% of a cohort 25% slow: every slow unit is found and no healthy one.

    The old median/MAD reference moved toward the batch and missed it. The old rule also flagged
    healthy units that were slow on one workload, and reported each unit of a slow host as its own row.
    """
    hosts, units = 2000, 8
    slow = bench.pick_slow_units(hosts, units, fraction, seed=3)
    findings = judge(bench.generate(hosts, units=units, slow=slow, seed=4))
    assert where(findings) == planted_findings(slow, units)
    assert bench.flagged_units(findings) == slow  # host findings list exactly the slow units
    for f in findings:
        assert 0.15 < f.evidence["drop"] < 0.35  # 25%, give or take 3% noise on each workload


def test_a_healthy_fleet_of_10k_hosts_has_no_slow_unit():
    """10,000 hosts x 8 units x 2 workloads with 3% spread: no finding.

    The old rule (median and MAD of all peers, z 3.5, any one workload) flagged 39 units here.
    """
    assert judge(bench.generate(10_000, seed=11)) == ()


def test_noise_shared_by_a_units_workloads_raises_no_false_alarm():
    """3% of a unit's speed shared by both its workloads: "most workloads" cannot help, the threshold does.

    With a fixed threshold of 3.5, "most workloads" still lets 15 units through here (the old rule: 28).
    """
    fleet = bench.generate(10_000, spread=0.005, shared=0.03, seed=12)
    assert judge(fleet) == ()


def test_the_threshold_grows_with_the_cohort():
    """--slow-z up to 40 peers, then Bonferroni: about sqrt(2 ln n), and a lower --slow-z lowers it."""
    assert slow_threshold(3.5, 5) == slow_threshold(3.5, 40) == 3.5
    assert [round(slow_threshold(3.5, n), 2) for n in (1000, 80_000, 800_000)] == [4.28, 5.17, 5.59]
    sizes = [41, 100, 10**3, 10**4, 10**5, 10**6, 10**9]
    ts = [slow_threshold(3.5, n) for n in sizes]
    assert ts == sorted(ts) and len(set(ts)) == len(ts)
    assert slow_threshold(3.0, 10**5) < slow_threshold(3.5, 10**5)
    assert slow_threshold(50.0, 10**6) == 50.0  # its tail underflows: the floor stands


@pytest.mark.parametrize(("peers", "slow"), [(1000, True), (20_000, False)])
def test_the_same_unit_is_slow_among_few_peers_and_noise_among_many(peers: int, slow: bool):
    """z -4.72 and 14% below: beyond the threshold of 1,000 peers (4.28), within that of 20,000 (4.91)."""
    fleet = grid_fleet(peers - 1)
    fleet["lag"] = [{"train": 86.0}]
    findings = judge(extracts(fleet))
    assert where(findings) == ({("lag", "cpu:0")} if slow else set())
    if slow:
        e = findings[0].evidence
        assert (e["healthy_median"], e["drop"], e["z"], e["z_threshold"]) == (100.0, 0.14, -4.72, 4.28)
        assert (e["peers"], e["healthy_peers"]) == (1000, 999)


@pytest.mark.parametrize(
    ("speeds", "slow_on"),
    [
        ({"train": 50.0, "matmul_golden": 100.0}, None),  # one of two workloads: noise, not a slow unit
        ({"train": 50.0, "matmul_golden": 50.0}, ["matmul_golden", "train"]),
        ({"train": 50.0, "matmul_golden": 50.0, "gemm_int8": 100.0}, ["matmul_golden", "train"]),
        ({"train": 50.0, "matmul_golden": 100.0, "gemm_int8": 100.0}, None),  # 1 of 3 is no majority
        ({"train": 50.0}, ["train"]),  # it ran one workload: that one decides
    ],
)
def test_a_unit_is_slow_only_on_most_of_its_workloads(speeds: dict[str, float], slow_on: list[str] | None):
    """Slow = slow on a strict majority of the workloads judged (all of them when 1 or 2); evidence lists
    every judged workload's drop."""
    fleet = grid_fleet(40, workloads=speeds)
    fleet["lag"] = [speeds]
    findings = judge(extracts(fleet))
    if slow_on is None:
        assert findings == ()
        return
    (f,) = findings
    assert (f.host, f.unit) == ("lag", "cpu:0")
    e = f.evidence
    assert e["slow_workloads"] == slow_on and e["judged_workloads"] == len(speeds)
    assert {w["workload"]: (w["drop"], w["slow"]) for w in e["workloads"]} == {
        w: (round(1 - x / 100.0, 4), x < 100.0) for w, x in speeds.items()
    }
    assert (
        e["workload"] == "train" and e["drop"] == 0.5 and e["value"] == 50.0 and e["value_unit"] == "flop/s"
    )


def test_a_host_whose_units_are_mostly_slow_is_one_finding():
    """All 8 or 5 of 8 slow: one host row listing them; 4 of 8 or 1 of 8: one row per unit."""
    fleet = grid_fleet(60, units=8)
    slow_units = {"all": range(8), "most": range(5), "half": range(4), "one": range(1), "pair": range(2)}
    for host, ks in slow_units.items():
        n = 2 if host == "pair" else 8
        fleet[host] = [{"train": 75.0 if k in ks else 100.0} for k in range(n)]
    findings = judge(extracts(fleet))
    assert where(findings) == {
        ("all", None),
        ("most", None),
        ("pair", None),
        *{("half", f"cpu:{k}") for k in range(4)},
        ("one", "cpu:0"),
    }
    hosts = {f.host: f for f in findings if f.unit is None}
    e = hosts["all"].evidence
    assert (e["units_slow"], e["units_judged"], e["drop"], e["drop_min"], e["drop_max"]) == (
        8,
        8,
        0.25,
        0.25,
        0.25,
    )
    assert [u["unit"] for u in e["units"]] == [f"cpu:{k}" for k in range(8)]
    assert all(u["drop"] == 0.25 and u["slow_workloads"] == ["train"] for u in e["units"])
    assert describe(hosts["all"]) == (
        "all 8 units are slow, typically 25% below their cohort's healthy median (25% to 25%): "
        "cpu:0, cpu:1, cpu:2, cpu:3, cpu:4, cpu:5, cpu:6, cpu:7"
    )
    assert describe(hosts["most"]).startswith("5 of 8 units are slow, typically 25% below")


def test_only_the_newest_report_of_a_host_counts():
    """A fixed host stops being slow; re-runs of a slow host neither repeat it nor add peers."""
    fleet = extracts(grid_fleet(5))

    def lag(speed: float, t: float) -> HostReport:
        return bench.host_report(
            "lag", [bench.unit_record("cpu:0", {"train": speed})], ended_at=t, run_id=f"r{t}"
        )

    assert judge([*fleet, lag(50.0, 1.0), lag(100.0, 2.0)]) == ()
    (f,) = judge([*fleet, lag(100.0, 1.0), lag(50.0, 2.0), lag(50.0, 3.0)])
    assert (f.host, f.unit, f.evidence["run"], f.evidence["peers"]) == ("lag", "cpu:0", "r3.0", 6)


def test_efficiency_makes_a_workload_slow_where_throughput_does_not():
    """Reports carry each workload's efficiency (achieved over the unit's own plain-op peak): a unit at
    normal speed whose workloads reach half the efficiency of its peers' is slow by that measure, and a
    workload is slow when any measure is."""

    def host(name: str, efficiency: float) -> dict[str, Any]:
        doc = report(name, [unit("cpu:0", ops={"train": 100.0, "matmul_golden": 100.0})])
        for rec in doc["units"][0]["throughput"].values():
            rec["peak_ops_per_s"], rec["efficiency"] = 100.0 / efficiency, efficiency
        return doc

    rng = random.Random(3)
    fleet = [host(f"h{k}", 0.8 + rng.uniform(-0.02, 0.02)) for k in range(40)] + [host("lag", 0.4)]
    (f,) = summarize(extract(fleet)).findings
    assert (f.host, f.kind, f.evidence["measure"]) == ("lag", "slow", "efficiency")
    assert f.evidence["slow_workloads"] == ["matmul_golden", "train"]
    assert {(w["measure"], w["slow"]) for w in f.evidence["workloads"]} == {
        ("efficiency", True),
        ("ops_per_s", False),
    }
    healthy = [host(f"h{k}", 0.8 + rng.uniform(-0.02, 0.02)) for k in range(41)]
    assert summarize(extract(healthy)).findings == ()


def test_the_result_does_not_depend_on_input_order():
    """Same reports, any order: the same findings and evidence."""
    slow = bench.pick_slow_units(300, 8, 0.3, seed=5)
    fleet = bench.generate(300, slow=slow, seed=6)
    shuffled = list(fleet)
    random.Random(7).shuffle(shuffled)
    assert judge(fleet) == judge(shuffled) != ()


def test_groups_without_a_positive_median_are_not_judged():
    """All-zero throughput gives no reference to lose speed against: no finding, no error."""
    fleet = {f"h{i}": [{"train": 0.0}] for i in range(10)}
    assert judge(extracts(fleet)) == ()


def test_compare_reports_a_slow_host_once_and_fails():
    """End to end through `summarize` and the renderer: one host row, exit 1, JSON-serialisable."""
    reports = [
        report(f"h{i}", [unit(f"cpu:{k}", ops={"train": GRID[(i + k) % 5]}) for k in range(4)])
        for i in range(10)
    ]
    reports.append(report("hot", [unit(f"cpu:{k}", ops={"train": 60.0}) for k in range(4)]))
    s = summarize(extract(reports))
    assert [(f.host, f.unit, f.kind) for f in s.findings] == [("hot", None, "slow")]
    assert s.exit_code == 1 and s.counts["slow"] == 1
    assert json.loads(json.dumps(s.to_dict()))["findings"][0]["evidence"]["units_slow"] == 4
    out = Console(file=io.StringIO(), width=300)
    render_compare(s, out)
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert "all 4 units are slow, typically 40% below" in text


def test_a_unit_slow_run_after_run_is_found_by_its_combined_score():
    """Issue 30: 15% slow on both workloads in each of 3 reports, among units whose speed varies 5% from
    run to run. One report alone cannot tell it from the healthy tail (t_n = 5.2 at 8,000 units; it is
    3 spreads deep): its three reports together can, and the evidence says so."""
    slow = {("h00007", "cpu:3")}
    one_report = bench.generate(1000, spread=0.05, factor=0.85, slow=slow, reports=1, seed=3)
    assert where(judge(one_report)) == set()
    reports = bench.generate(1000, spread=0.05, factor=0.85, slow=slow, reports=3, seed=3)
    (f,) = judge(reports)
    assert (f.host, f.unit) == ("h00007", "cpu:3")
    c = f.evidence["combined"]
    assert c["reports"] == 3 and c["z"] <= -c["z_threshold"] and c["loss"] >= 0.10
    if not f.evidence["slow_workloads"]:  # found by the combined score alone: the text says how
        assert "over 3 report(s) (" in describe(f) and "over them) its combined z is" in describe(f)
        assert c["recent_loss"] >= 0.10  # the loss holds over its reports, not only in the newest


def test_the_combined_score_accuses_no_healthy_unit_nor_a_fixed_or_glitching_one():
    """The other way: healthy fleets with 3 reports per host give no finding; a unit slow in its two
    older reports but fixed in the newest is not slow; one slow workload in every report (the other at
    full speed) is not a throttle."""
    for seed in range(3):
        assert judge(bench.generate(2000, spread=0.05, reports=3, seed=seed)) == ()
    reports = bench.generate(1000, spread=0.05, factor=0.7, slow={("h00007", "cpu:3")}, reports=3, seed=4)
    newest = max((r for r in reports if r.host == "h00007"), key=lambda r: r.ended_at)
    healthy = bench.unit_record("cpu:3", {w: x for w, x in bench.NOMINAL.items()})
    fixed = [
        r if r is not newest else replace(r, units=(*r.units[:3], healthy, *r.units[4:])) for r in reports
    ]
    assert judge(fixed) == ()
    glitch = []
    for r in bench.generate(1000, spread=0.05, reports=3, seed=5):
        if r.host == "h00007":
            odd = bench.unit_record(
                "cpu:3",
                {"train": 0.8 * bench.NOMINAL["train"], "matmul_golden": bench.NOMINAL["matmul_golden"]},
            )
            r = replace(r, units=(*r.units[:3], odd, *r.units[4:]))
        glitch.append(r)
    assert judge(glitch) == ()


@given(
    median=st.floats(1e-3, 1e12),
    mad_share=st.one_of(st.just(0.0), st.floats(1e-6, 0.5)),
    z=st.floats(0.5, 12.0),
    drop=st.floats(0.0, 0.9),
    x_share=st.floats(0.0, 1.5),
)
def test_the_drawn_slow_threshold_is_where_is_slow_begins(
    median: float, mad_share: float, z: float, drop: float, x_share: float
) -> None:
    """`Reference.slow_below` (what the fleet page draws) and `is_slow` (what compare judges by) agree on
    every value away from the threshold itself, where rounding may fall either way."""
    ref = Reference(
        peers=50, healthy_peers=50, median=median, mad=mad_share * median, z_threshold=z, drop=drop
    )
    x = x_share * median
    edge = ref.slow_below
    if abs(x - edge) <= 1e-9 * max(abs(edge), median):
        return
    assert ref.is_slow(x) == (x < edge)


@pytest.mark.parametrize("fraction", [0.02, 0.3, 0.5])
def test_a_15_percent_loss_at_3_5_percent_spread_is_found_nine_times_in_ten_over_three_reports(
    fraction: float,
):
    """Issue 44's target: 2%, 30% and half of a cohort 15% slow, run-to-run noise of 3.5% on each
    workload, three reports per host: at least 90% of the slow units found, no healthy one (2,000 hosts
    here; scripts/bench_slow.py --grid measures 10,000). Before the newest report's loss was taken on
    average over the workloads, each workload had to show it: 87-90% at 10,000 hosts. Before the band
    was refitted for a slow batch (`perf._band_edge`), half the cohort slow was found 60% of the time."""
    hosts, units = 2000, 8
    slow = bench.pick_slow_units(hosts, units, fraction, seed=11)
    row = bench.scenario(
        hosts, units, slow, spread=0.035, shared=0.0, old=False, factor=0.85, reports_per_host=3
    )
    assert row["false_units"] == 0 and row["recall"] >= 0.9, row


@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.4])
def test_the_healthy_reference_stands_with_a_large_slow_batch(fraction: float):
    """The healthy median and spread of a cohort where a share of the units run 15% slow (3.5% noise):
    within 1% and 15% of the healthy units' own (measured: 0.5% and 15% at 40%). With the first fit
    alone, 40% slow put the spread at 1.6 times the healthy one (half the cohort: 2.9 times), and a
    unit at 0.78 of the healthy speed was not found. At half the cohort one report's reference is still
    too wide (2.0 times); three reports' combined score finds such a batch (the test above)."""
    rng = np.random.default_rng(7)
    healthy = rng.normal(1.0, 0.035, 20_000)
    values = np.concatenate([healthy, rng.normal(0.85, 0.035, int(20_000 * fraction / (1 - fraction)))])
    ref = perf.healthy_reference(rng.permutation(values), z=3.5, drop=0.10)
    assert ref is not None
    assert ref.median == pytest.approx(np.median(healthy), rel=0.01)
    assert ref.mad / perf.MAD_TO_SIGMA == pytest.approx(0.035, rel=0.15)
    assert ref.is_slow(0.78) and not ref.is_slow(0.95)  # 6.3 and 1.4 healthy spreads below


@pytest.mark.parametrize("noise", ["normal", "skewed", "t3"])
def test_the_benchmarks_noise_kinds_have_mean_1_and_the_spread_asked(noise: str):
    """`bench_slow.py --noise`: every kind is a speed factor of mean 1 and sd `spread`; `skewed` has its
    long tail on the slow side."""
    rng = random.Random(3)
    x = np.array([bench.noise_factor(rng, 0.035, noise) for _ in range(100_000)])
    assert x.mean() == pytest.approx(1.0, abs=0.001)
    assert x.std() == pytest.approx(0.035, rel=0.1 if noise == "t3" else 0.02)  # t3: an infinite 4th moment
    skew = float(((x - x.mean()) ** 3).mean() / x.std() ** 3)
    assert (skew < -1.0) if noise == "skewed" else abs(skew) < (1.0 if noise == "t3" else 0.05)


@pytest.mark.parametrize(("noise", "reports"), [("skewed", 1), ("skewed", 3), ("t3", 1)])
def test_a_healthy_fleet_whose_runs_have_long_tails_has_no_slow_unit(noise: str, reports: int):
    """10,000 hosts whose runs are now and then slowed by other work (`skewed`: a long tail of slow runs)
    or have heavy tails both ways (`t3`), at 3.5% sd: no finding. With thresholds from the normal model
    alone these fleets had 153 (skewed, one report), 9 (three reports) and 3 (t3) healthy units named
    slow; the cohort's own tails now set the cut (`perf.tail_cut`) and the combined score asks for the
    loss in every recent report on average."""
    assert judge(bench.generate(10_000, spread=0.035, noise=noise, reports=reports, seed=21)) == ()


@pytest.mark.parametrize(("factor", "reports"), [(0.7, 1), (0.85, 3)])
def test_slow_units_among_long_tailed_healthy_ones_are_still_found(factor: float, reports: int):
    """The other way: in the `skewed` fleet, 10% of the units 30% slow are found from one report, and
    15% slow over three; a 15% loss in one report is no longer told from the healthy tail there."""
    hosts, units = 10_000, 8
    slow = bench.pick_slow_units(hosts, units, 0.1, seed=5)
    row = bench.scenario(
        hosts, units, slow, spread=0.035, shared=0.0, old=False, factor=factor, reports_per_host=reports,
        noise="skewed",
    )  # fmt: skip
    assert row["false_units"] == 0 and row["recall"] >= 0.99, row


def _calm_samples(rng: np.random.Generator, draw: Any, units: int, workloads: int) -> list[np.ndarray]:
    """What slow.py's `_tail_samples` gives `tail_cut`: each workload's z where the unit's others are calm."""
    z = draw(rng, (units, workloads))
    low = z <= perf.CALM
    return [z[(low.sum(1) - low[:, w]) == 0, w] for w in range(workloads)]


def test_the_cohorts_own_tail_cut_lies_beyond_a_long_tail_and_inside_a_normal_one():
    """Normal noise: the tail cut is shallower than t_n (the normal model's threshold stands); a long tail
    of slow runs moves it deeper; a cohort too small to show the depth gives none."""
    rng = np.random.default_rng(3)
    budget = perf.tail_budget(3.5)
    t_n = slow_threshold(3.5, 80_000)
    normal = perf.tail_cut(_calm_samples(rng, lambda g, s: g.normal(size=s), 80_000, 2), 80_000, 2, budget)
    assert normal is not None and -t_n < normal < -3.0  # both workloads past 3.4 spreads: 0.009 of 80,000

    def skewed(g: np.random.Generator, s: tuple[int, int]) -> np.ndarray:
        return -(g.gamma(2.0, 1.0, s) - 2.0) / 0.8  # robust z: a gamma's long tail, on the slow side

    deep = perf.tail_cut(_calm_samples(rng, skewed, 80_000, 2), 80_000, 2, budget)
    assert deep is not None and deep < -t_n
    few = _calm_samples(rng, lambda g, s: g.normal(size=s), 400, 2)
    shallow = perf.tail_cut(few, 400, 2, budget)  # as deep as 5 calm units show: t_n stands
    assert shallow is not None and shallow > -slow_threshold(3.5, 400)


def test_the_tail_cut_counts_the_samples_it_stands_on():
    """Hand-made tails of 64 units and 2 workloads, calm units at -5 or 0, a budget of 2 healthy units:
    8 and 16 units at -5 give 64 * (8/64) * (16/64) = 2 there, so the cut is -5. A budget of 1.9 is met
    at no sample: the cut is as deep as the cohort shows, -5 again. 4 and 32 units give 2 at -5, but
    on 4 units: the cut stays where 5 units show it, at 0. Four units in all show nothing."""

    def tail(at_minus_5: int, size: int = 64) -> np.ndarray:
        return np.array([-5.0] * at_minus_5 + [0.0] * (size - at_minus_5))

    assert perf.tail_cut([tail(8), tail(16)], 64, 2, 2.0) == -5.0
    assert perf.tail_cut([tail(8), tail(16)], 64, 2, 1.9) == -5.0
    assert perf.MIN_TAIL_COUNT == 5 and perf.tail_cut([tail(4), tail(32)], 64, 2, 2.0) == 0.0
    assert perf.tail_cut([tail(1, 4), tail(1, 4)], 4, 2, 2.0) is None
