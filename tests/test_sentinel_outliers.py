"""The analysis half of `sdcscan sentinel` (issue 14): per-unit tallies of kernel-log events, the cores on
which more different programs crash than chance allows, and the findings a report carries.

Simulated hosts come from numpy's generator with fixed seeds (independent of the code under test):
programs crash a Poisson number of times, each time on a uniformly random core.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from sdcscan.errors import UsageError
from sdcscan.report import validate_report
from sdcscan.sentinel.kernel_events import KernelEvent
from sdcscan.sentinel.outliers import (
    HARDWARE_XIDS,
    KIND_MCE,
    KIND_OUTLIER,
    KIND_XID,
    CoreOutlier,
    binomial_sf,
    core_outliers,
    findings,
    host_counts,
    p_text,
    range_notes,
    tally,
)
from tests.helpers.reports import build_report

CPUS = 64
NOISY_EVERY_CORE = [
    KernelEvent("segfault", None, cpu=c, comm="noisy", pid=1000 + k, binary="libc.so.6")
    for c in range(CPUS)
    for k in range(500)
]  # one program crashing 500 times on every core: built once, shared by the seeds


def seg(cpu: int | None, comm: str | None, pid: int = 1, time: float | None = None) -> KernelEvent:
    return KernelEvent("segfault", time, cpu=cpu, comm=comm, pid=pid, binary="libc.so.6", detail="error 4")


def background(seed: int, *, cpus: int = CPUS, programs: int = 40, rate: float = 1.0) -> list[KernelEvent]:
    """`programs` programs each crashing Poisson(`rate`) times, each crash on a uniformly random core."""
    rng = np.random.default_rng(seed)
    events = []
    for n, times in enumerate(rng.poisson(rate, size=programs)):
        for core in rng.integers(0, cpus, size=int(times)):
            events.append(seg(int(core), f"prog{n}", pid=seed * 1000 + n))
    return events


# --------------------------------------------------------------------------------------------------
# The p-value


@pytest.mark.parametrize("p", [0.01, 1 / 64, 0.3, 0.5, 0.9])
def test_binomial_tail_matches_a_brute_force_sum_for_small_n(p):
    """P(X >= k) equals the exact rational sum of the binomial terms, for every k of n up to 30."""
    pf = Fraction(p)
    for n in range(31):
        for k in range(-1, n + 2):
            exact = sum(
                (math.comb(n, j) * pf**j * (1 - pf) ** (n - j) for j in range(max(k, 0), n + 1)), Fraction(0)
            )
            assert binomial_sf(k, n, p) == pytest.approx(float(exact), rel=1e-9, abs=1e-300), (n, k)


def test_binomial_tail_of_a_large_n_matches_a_log_space_sum_and_stays_fast():
    """n = 200,000: the answer agrees with summing every term's logarithm; no overflow, no long loop."""
    n, p = 200_000, 1 / 64
    for k in (1, 3000, 3125, 3300, 4000):
        logs = [
            math.lgamma(n + 1)
            - math.lgamma(j + 1)
            - math.lgamma(n - j + 1)
            + j * math.log(p)
            + (n - j) * math.log1p(-p)
            for j in range(k, min(n, k + 5000) + 1)
        ]
        top = max(logs)
        brute = math.exp(top) * sum(math.exp(v - top) for v in logs)
        if k <= n * p:
            brute = min(1.0, brute)  # the window holds the bulk of the mass: compare loosely
            assert binomial_sf(k, n, p) == pytest.approx(brute, abs=1e-9)
        else:
            assert binomial_sf(k, n, p) == pytest.approx(brute, rel=1e-9)


def test_binomial_tail_edges():
    """p of 0 or 1, k beyond n, and k of 0 give the exact answers."""
    assert binomial_sf(0, 5, 0.3) == 1.0
    assert binomial_sf(6, 5, 0.3) == 0.0
    assert binomial_sf(1, 5, 0.0) == 0.0
    assert binomial_sf(5, 5, 1.0) == 1.0
    assert binomial_sf(1, 0, 0.5) == 0.0


# --------------------------------------------------------------------------------------------------
# The outlier test: silent on healthy hosts, firing on a bad core


def test_a_healthy_host_with_a_program_crashing_everywhere_shows_no_outlier_in_200_seeds():
    """Background crashes of many programs plus one program crashing 500 times on every core: at most
    the alpha-expected number of false alarms (0.2 in 200 hosts at alpha 1e-3, so at most one)."""
    alarms = [s for s in range(200) if core_outliers(background(s) + NOISY_EVERY_CORE, cpus=CPUS)]
    assert len(alarms) <= 1, alarms


def test_the_false_alarm_rate_of_healthy_hosts_stays_below_alpha():
    """At alpha 0.1 (and no minimum of programs) the share of healthy hosts with any outlier is at most
    alpha, with the slack of 200 draws: the binomial is a conservative model of the spread."""
    alarms = sum(
        1
        for s in range(200)
        if core_outliers(background(s, programs=120), cpus=CPUS, alpha=0.1, min_programs=1)
    )
    assert alarms <= 30, alarms  # 20 expected at most; 30 is more than 2 standard deviations above


def test_one_program_crashing_500_times_on_one_core_is_not_an_outlier():
    """Repeated crashes of one program are one program: the core it is pinned to is not named."""
    for s in range(20):
        noisy = [seg(5, "pinned", pid=k) for k in range(500)]
        assert core_outliers(background(s) + noisy, cpus=CPUS) == [], s


def test_a_core_on_which_8_different_programs_crashed_is_named_and_no_other():
    """Eight unrelated programs crashing on cpu:17 among 64 cores with background crashes: exactly cpu:17."""
    for s in range(20):
        bad = [seg(17, f"victim{n}", pid=9000 + n) for n in range(8) for _ in range(1 + n % 3)]
        found = core_outliers(background(s) + bad, cpus=CPUS)
        assert [o.unit for o in found] == ["cpu:17"], s
        o = found[0]
        assert o.programs >= 8 and o.peers == 63 and o.expected < 1.5 and o.p_value < 1e-3
        assert o.events >= 15 and len(o.examples) == 5 and o.examples[0].startswith("victim")


def test_two_core_host_needs_a_one_sided_landslide():
    """2 CPUs: 12 of 12 programs on one core is an outlier (p = 2 * 2^-12); 10 of 10 (p = 0.002) or
    an even split is not."""
    twelve = [seg(0, f"p{n}") for n in range(12)]
    assert [o.unit for o in core_outliers(twelve, cpus=2)] == ["cpu:0"]
    assert core_outliers(twelve, cpus=2)[0].p_value == pytest.approx(2 * 0.5**12)
    assert core_outliers(twelve[:10], cpus=2) == []
    assert core_outliers([seg(n % 2, f"p{n}") for n in range(40)], cpus=2) == []


def test_nothing_to_test_gives_nothing():
    """No events, one CPU (no peers), or crashes that name no CPU: no outlier."""
    assert core_outliers([], cpus=CPUS) == []
    assert core_outliers([seg(0, f"p{n}") for n in range(50)], cpus=1) == []
    assert core_outliers([seg(None, f"p{n}") for n in range(50)], cpus=CPUS) == []


def test_events_naming_cpus_the_host_lacks_are_tallied_and_noted_never_tested():
    """CPU 99 on a 64-CPU host: its own unit in the tally, a note, and no outlier from it."""
    beyond = [seg(99, f"p{n}") for n in range(30)]
    assert core_outliers(beyond, cpus=CPUS) == []
    assert tally(beyond)["cpu:99"].programs == 30
    (note,) = range_notes(beyond, cpus=CPUS)
    assert "cpu:99" in note and "64 logical CPUs" in note
    assert range_notes(background(1), cpus=CPUS) == []


def test_fewer_programs_than_the_minimum_are_never_an_outlier():
    """Two programs on one core of a 1024-CPU host are 'unlikely' but not evidence (min_programs = 3)."""
    two = [seg(3, "parent"), seg(3, "child")]
    assert core_outliers(two, cpus=1024) == []
    assert [o.unit for o in core_outliers(two, cpus=1024, min_programs=2)] == ["cpu:3"]


def test_traps_count_like_segfaults_and_machine_checks_do_not():
    """Invalid-opcode traps are crashes of the program; machine checks are not program crashes."""
    traps = [KernelEvent("trap", None, cpu=9, comm=f"p{n}", pid=n, detail="invalid opcode") for n in range(9)]
    mces = [KernelEvent("mce", None, cpu=4, detail=f"bank {n} status 0x1") for n in range(50)]
    assert [o.unit for o in core_outliers(traps + mces, cpus=CPUS)] == ["cpu:9"]


def test_a_program_is_its_comm_else_its_binary():
    """Crashes in libc of different programs are different programs; a crash without comm counts by binary."""
    no_comm = [KernelEvent("segfault", None, cpu=2, comm=None, pid=n, binary=f"tool{n}") for n in range(8)]
    assert core_outliers(no_comm, cpus=CPUS)[0].programs == 8
    assert tally([seg(0, "a"), seg(0, "b")])["cpu:0"].programs == 2  # both in libc.so.6


@pytest.mark.parametrize(
    ("cpus", "alpha", "min_programs"),
    [
        (0, 1e-3, 3),
        (-1, 1e-3, 3),
        (True, 1e-3, 3),
        (2.5, 1e-3, 3),
        (8, 0.0, 3),
        (8, 1.0, 3),
        (8, math.nan, 3),
        (8, 1e-3, 0),
    ],
)
def test_invalid_arguments_are_usage_errors(cpus, alpha, min_programs):
    """A CPU count below 1 or not whole, alpha outside (0, 1), or no minimum of programs: exit 2."""
    with pytest.raises(UsageError):
        core_outliers([], cpus=cpus, alpha=alpha, min_programs=min_programs)


# --------------------------------------------------------------------------------------------------
# Tallies


def test_tally_counts_kinds_processes_programs_and_times_per_unit():
    """Per unit: events by kind, distinct (comm, pid), distinct programs, first and last seen."""
    events = [
        seg(3, "python3", pid=10, time=100.0),
        seg(3, "python3", pid=10, time=300.0),
        seg(3, "python3", pid=11, time=200.0),
        seg(3, "java", pid=12),
        KernelEvent("trap", 50.0, cpu=3, comm="sshd", pid=13, detail="invalid opcode"),
        KernelEvent("mce", 60.0, cpu=3, detail="bank 5 status 0xbe00000000800400"),
        KernelEvent("mce", 61.0, cpu=3, detail="bank 5 status 0xbe00000000800400"),
        KernelEvent("mce", 62.0, cpu=3, detail="bank 7"),
        seg(10, "bash", time=5.0),
        KernelEvent("trap", 1.0, cpu=None, comm="ls", pid=1, detail="invalid opcode"),
    ]
    t = tally(events)
    assert list(t) == ["cpu:3", "cpu:10"]  # cpu:3 before cpu:10; the trap without CPU is host-only
    c3 = t["cpu:3"]
    assert c3.counts == {"segfault": 4, "trap": 1, "mce": 3}
    assert (c3.processes, c3.programs) == (4, 3)
    assert (c3.first_seen, c3.last_seen) == (50.0, 300.0)
    assert c3.mce_banks == {5: 2, 7: 1}
    assert host_counts(events) == {"segfault": 5, "trap": 2, "mce": 3, "xid": 0}
    assert host_counts([]) == {"segfault": 0, "trap": 0, "mce": 0, "xid": 0}
    assert tally([]) == {}
    doc = c3.to_dict()
    assert doc["first_seen"] == "1970-01-01T00:00:50Z" and doc["mce_banks"] == {"5": 2, "7": 1}
    json.dumps(doc, allow_nan=False)


def test_xids_go_to_the_cuda_unit_of_their_pci_id_whatever_its_spelling():
    """NVML spells `00000000:3B:00.0`, the Xid line `0000:3b:00`: they meet; an unmapped GPU is gpu:<pci>."""
    events = [
        KernelEvent("xid", 1.0, cpu=None, comm="python3", pid=7, detail="xid 79: GPU has fallen off the bus", pci="0000:3b:00.0", xid=79),
        KernelEvent("xid", 2.0, cpu=None, pid=8, detail="xid 13", pci="0000:3b:00.0", xid=13),
        KernelEvent("xid", 3.0, cpu=None, detail="xid 48", pci="0000:5e:00.0", xid=48),
        KernelEvent("xid", 4.0, cpu=None, detail="xid 48", pci=None, xid=48),
    ]  # fmt: skip
    t = tally(events, gpu_units={"00000000:3B:00.0": "cuda:1"})
    assert sorted(t) == ["cuda:1", "gpu:0000:5e:00.0", "gpu:unknown"]
    assert t["cuda:1"].xids == {79: 1, 13: 1} and t["cuda:1"].counts == {"xid": 2}
    assert t["cuda:1"].to_dict()["xids"] == {"13": 1, "79": 1}
    nexts = [f["next"] for f in findings([], t)]
    assert [n.rsplit(": ", 1)[1] for n in nexts] == [
        "sdcscan run --units cuda:1 -p burnin",
        "sdcscan run --units cuda -p burnin",  # a GPU no unit maps to: screen all GPUs of the host
        "sdcscan run --units cuda -p burnin",
    ]


# --------------------------------------------------------------------------------------------------
# Findings


def _bad_core_events() -> list[KernelEvent]:
    bad = [
        seg(7, name, pid=n)
        for n, name in enumerate(["python3", "java", "sshd", "gcc", "cc1", "ld", "make", "bash", "awk"])
    ]
    return background(3) + bad + [seg(7, "python3", pid=99)] * 5


def test_an_outlier_finding_names_the_evidence_and_the_next_step():
    """The message names the programs, the crashes, what the peers make likely and p; next is a burn-in."""
    events = _bad_core_events()
    outliers = core_outliers(events, cpus=CPUS)
    (f,) = [f for f in findings(outliers, tally(events)) if f["kind"] == KIND_OUTLIER]
    assert f["unit"] == "cpu:7"
    msg = f["message"]
    assert msg.startswith("cpu:7: ") and "different programs crashed on it (python3, " in msg
    assert "segfault(s)) where its 63 peers make " in msg and "likely (p = " in msg and ", …" in msg
    assert f["next"] == "screen it directly: sdcscan run --units cpu:7 -p burnin"


def test_findings_have_the_shape_of_report_findings():
    """Every finding validates as one of a report's findings; outliers and tallies serialise as strict JSON."""
    events = [
        *_bad_core_events(),
        KernelEvent("mce", 1.0, cpu=2, detail="bank 5 status 0x1"),
        KernelEvent("xid", 1.0, cpu=None, detail="xid 79", pci="0000:3b:00.0", xid=79),
    ]
    tallies = tally(events, gpu_units={"0000:3b:00.0": "cuda:0"})
    outliers = core_outliers(events, cpus=CPUS)
    found = findings(outliers, tallies, host=host_counts(events))
    assert [(f["kind"], f["unit"]) for f in found] == [
        (KIND_OUTLIER, "cpu:7"),
        (KIND_MCE, "cpu:2"),
        (KIND_XID, "cuda:0"),
    ]
    validate_report(build_report([], findings=found))
    json.dumps([o.to_dict() for o in outliers] + [t.to_dict() for t in tallies.values()], allow_nan=False)


def test_a_healthy_log_gives_no_finding():
    """Background crashes only, application Xids only: nothing to report."""
    events = [*background(5), KernelEvent("xid", 1.0, cpu=None, detail="xid 13", pci="0000:3b:00.0", xid=13)]
    tallies = tally(events, gpu_units={"0000:3b:00.0": "cuda:0"})
    assert findings(core_outliers(events, cpus=CPUS), tallies, host=host_counts(events)) == []
    assert tallies["cuda:0"].xids == {13: 1}  # counted, not a finding


def test_machine_checks_get_a_finding_per_unit_with_their_banks():
    """Machine checks on cpu:4 (banks 5 and 7) and one naming no CPU: a unit finding and a host one."""
    events = [
        KernelEvent("mce", 1.0, cpu=4, detail="bank 5 status 0x1"),
        KernelEvent("mce", 2.0, cpu=4, detail="bank 7 status 0x1"),
        KernelEvent("mce", 3.0, cpu=None, detail="bank 1"),
    ]
    found = findings([], tally(events), host=host_counts(events))
    assert [(f["kind"], f["unit"]) for f in found] == [(KIND_MCE, "cpu:4"), (KIND_MCE, None)]
    assert "2 machine-check record(s) in bank(s) 5, 7" in found[0]["message"]
    assert "sdcscan run --units cpu:4 -p burnin" in found[0]["next"]
    assert found[1]["message"].startswith("host: 1 machine-check record(s) that name no CPU:")


@pytest.mark.parametrize("xid", sorted(HARDWARE_XIDS))
def test_each_hardware_xid_gets_a_finding_for_its_gpu(xid):
    """Xids NVIDIA lists as hardware, ECC, NVLink or bus errors name their GPU; application Xids are listed beside."""
    events = [
        KernelEvent("xid", 1.0, cpu=None, detail=f"xid {xid}", pci="0000:3b:00.0", xid=xid),
        KernelEvent("xid", 2.0, cpu=None, detail="xid 31", pci="0000:3b:00.0", xid=31),
    ]
    (f,) = findings([], tally(events, gpu_units={"0000:3b:00.0": "cuda:2"}))
    assert (f["kind"], f["unit"]) == (KIND_XID, "cuda:2")
    assert (
        f"Xid {xid} {HARDWARE_XIDS[xid]} ×1" in f["message"] and "1 other Xid event(s) (31)" in f["message"]
    )
    assert f["next"].endswith("sdcscan run --units cuda:2 -p burnin")


def test_p_values_are_written_briefly():
    """2e-9 as `p = 2e-9`, an underflow as `p < 1e-300`."""
    assert p_text(2.04e-9) == "p = 2e-9"
    assert p_text(0.0) == "p < 1e-300"
    assert p_text(0.25) == "p = 0.25"


def test_an_outlier_without_its_tally_still_reads():
    """findings() with an outlier whose unit has no tally says how many crashes it saw."""
    o = CoreOutlier(
        "cpu:1", programs=4, expected=0.1, peers=7, p_value=1e-5, events=6, examples=("a", "b", "c", "d")
    )
    (f,) = findings([o], {})
    assert "(a, b, c, d; 6 crash(es)) where its 7 peers make 0.1 likely (p = 1e-5)" in f["message"]


def test_tally_counts_distinct_processes_programs_and_binaries() -> None:
    """Two crashes of one process in libc and one of another program in its own binary: 2 processes,
    2 programs, 2 binaries; first and last seen span their times."""
    from sdcscan.sentinel.kernel_events import KernelEvent
    from sdcscan.sentinel.outliers import tally

    events = [
        KernelEvent("segfault", 100.0, 3, comm="java", pid=7, binary="libc.so.6"),
        KernelEvent("segfault", 160.0, 3, comm="java", pid=7, binary="libc.so.6"),
        KernelEvent("trap", 130.0, 3, comm="sshd", pid=9, binary="sshd"),
    ]
    (t,) = tally(events).values()
    assert (t.unit, t.processes, t.programs, t.binaries) == ("cpu:3", 2, 2, 2)
    assert t.counts == {"segfault": 2, "trap": 1}
    assert t.to_dict()["binaries"] == 2 and (t.first_seen, t.last_seen) == (100.0, 160.0)
