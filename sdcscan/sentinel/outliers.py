"""Kernel-log events tallied per unit, and the cores on which more different programs crash than chance allows.

Meta's "Hardware Sentinel" finds defective cores without running a test: application crashes the
kernel logs (segfaults and traps name the CPU they most likely ran on) spread over the cores of a
healthy host as the scheduler spreads the programs, while a core that miscomputes makes many unrelated
programs crash on it. `core_outliers` tests each core for that (see its docstring for the statistic);
`tally` and `host_counts` summarise every event per unit and per host for the report; `findings`
says what the evidence is and what to do next. Machine checks and NVIDIA's hardware Xids are evidence
on their own and get a finding whatever the statistics say. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sdcscan.errors import UsageError
from sdcscan.outcomes import unit_order
from sdcscan.report.document import Finding, Outlier
from sdcscan.sentinel.kernel_events import KINDS, KernelEvent, normalise_pci
from sdcscan.timefmt import iso_utc

CRASH_KINDS = frozenset({"segfault", "trap"})  # application crashes: the evidence the test counts
DEFAULT_ALPHA = 1e-3  # family-wise: the chance that a healthy host shows any outlier core
# Fewer distinct programs are never called an outlier, whatever p says: on a host with hundreds of
# cores two programs crashing on one core is already "unlikely", yet a parent and its child pinned to
# one cpuset (taskset, a container's cpuset) crash together for reasons that have nothing to do with it.
MIN_PROGRAMS = 3
EXAMPLES = 5  # program names a finding shows
UNKNOWN_GPU = "gpu:unknown"
KIND_OUTLIER = "sentinel"  # a core far more programs crash on than its peers
KIND_MCE = "machine_check"  # the processor reported an error it detected (MCE records)
KIND_XID = "xid"  # NVIDIA's driver reported a hardware, memory or bus error of a GPU

# Xids that NVIDIA's "XID Errors" (GPU Deployment and Management Documentation, the table of causes,
# and its Xid catalog for Ampere and newer) lists as hardware, ECC, NVLink or bus errors rather than
# errors of the application: these name a GPU to look at. Others (13 graphics engine exception, 31
# GPU memory page fault, 43 GPU stopped processing, 45 preemptive cleanup) follow from what a program
# did, so they are only counted.
HARDWARE_XIDS: Mapping[int, str] = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
_BANK = re.compile(r"\bbank (\d{1,4})\b")  # events.mce_detail: "bank 5 status 0x…"


@dataclass(frozen=True, slots=True)
class UnitTally:
    """What the kernel logged about one unit (a logical CPU, a GPU) in the window read."""

    unit: str  # "cpu:N", "cuda:N", or "gpu:<pci>" for an Xid of a GPU not mapped to a unit
    counts: dict[str, int]  # kind -> events (only kinds that occurred, in KINDS order)
    processes: int  # distinct (comm, pid)
    programs: int  # distinct programs (comm, else the binary named)
    first_seen: float | None  # POSIX seconds, None when no event had a time
    last_seen: float | None
    xids: dict[int, int] = field(default_factory=dict)  # Xid number -> events
    mce_banks: dict[int, int] = field(default_factory=dict)  # machine-check bank -> records
    binaries: int = 0  # distinct mappings the crashes were in (" in libc.so.6[...]"): shared libraries too

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: times as UTC ISO-8601, Xid numbers and banks as string keys."""
        return {
            "unit": self.unit,
            "counts": dict(self.counts),
            "processes": self.processes,
            "programs": self.programs,
            "binaries": self.binaries,
            "first_seen": _iso(self.first_seen),
            "last_seen": _iso(self.last_seen),
            "xids": {str(k): v for k, v in sorted(self.xids.items())},
            "mce_banks": {str(k): v for k, v in sorted(self.mce_banks.items())},
        }


@dataclass(frozen=True, slots=True)
class CoreOutlier:
    """A core on which far more different programs crashed than its peers make likely."""

    unit: str  # "cpu:N"
    programs: int  # distinct programs that crashed on it
    expected: float  # distinct programs its peers saw, on average: what the core's share would be
    peers: int  # the other logical CPUs of the host
    p_value: float  # one-sided, after correction (Bonferroni) for the number of cores tested
    events: int  # crash events on it (a program may crash many times)
    examples: tuple[str, ...]  # a few program names, the most frequent first

    def to_dict(self) -> Outlier:
        """JSON-ready."""
        return {
            "unit": self.unit,
            "programs": self.programs,
            "expected": self.expected,
            "peers": self.peers,
            "p_value": self.p_value,
            "events": self.events,
            "examples": list(self.examples),
        }


# --------------------------------------------------------------------------------------------------
# Tallies


def program_of(event: KernelEvent) -> str | None:
    """The program an event is about: its process name (comm), else the binary the fault was in.

    comm comes first: the binary is the mapping the instruction pointer was in, and most crashes of
    unrelated programs happen in a shared library (`libc.so.6`), which would merge them into one.
    """
    return event.comm or event.binary or None


def unit_of(event: KernelEvent, gpu_units: Mapping[str, str]) -> str | None:
    """The unit an event is about: `cpu:N`; an Xid's `cuda:N` (via `gpu_units`, normalised PCI id ->
    unit), else `gpu:<pci>`; None for an event that names no CPU (host-level only)."""
    if event.kind == "xid":
        pci = normalise_pci(event.pci) if event.pci else None
        return UNKNOWN_GPU if pci is None else gpu_units.get(pci, f"gpu:{pci}")
    return f"cpu:{event.cpu}" if event.cpu is not None and event.cpu >= 0 else None


def tally(
    events: Sequence[KernelEvent], *, gpu_units: Mapping[str, str] | None = None
) -> dict[str, UnitTally]:
    """Per unit: events by kind, distinct processes, programs and binaries, first and last seen.

    Args:
        events: parsed kernel events (`sentinel.events.parse_messages`).
        gpu_units: PCI bus id (any usual spelling: `00000000:3B:00.0`, `0000:3b:00`) -> `cuda:N`.
            Xids of a GPU it does not list go to `gpu:<pci>`.

    Returns:
        unit -> its tally, units in order (`cpu:2` before `cpu:10`). Events that name no CPU (traps
        and segfaults of older kernels) are in `host_counts` only.
    """
    keys = {normalise_pci(k) or k: v for k, v in (gpu_units or {}).items()}
    by_unit: dict[str, list[KernelEvent]] = defaultdict(list)
    for e in events:
        unit = unit_of(e, keys)
        if unit is not None:
            by_unit[unit].append(e)
    return {u: _tally_one(u, by_unit[u]) for u in sorted(by_unit, key=unit_order)}


def _tally_one(unit: str, events: list[KernelEvent]) -> UnitTally:
    kinds = Counter(e.kind for e in events)
    times = [e.time for e in events if e.time is not None and math.isfinite(e.time)]
    banks = Counter(int(m[1]) for e in events if e.kind == "mce" and (m := _BANK.search(e.detail)))
    return UnitTally(
        unit=unit,
        counts={k: kinds[k] for k in (*KINDS, *sorted(set(kinds) - set(KINDS))) if kinds[k]},
        processes=len({(e.comm, e.pid) for e in events if e.comm is not None or e.pid is not None}),
        programs=len({p for e in events if (p := program_of(e)) is not None}),
        first_seen=min(times) if times else None,
        last_seen=max(times) if times else None,
        xids=dict(Counter(e.xid for e in events if e.kind == "xid" and e.xid is not None)),
        mce_banks=dict(banks),
        binaries=len({e.binary for e in events if e.binary is not None}),
    )


def host_counts(events: Iterable[KernelEvent]) -> dict[str, int]:
    """Events per kind for the whole host, those that name no CPU included; every kind of KINDS is listed."""
    kinds = Counter(e.kind for e in events)
    return {k: kinds[k] for k in (*KINDS, *sorted(set(kinds) - set(KINDS)))}


# --------------------------------------------------------------------------------------------------
# The outlier test


def core_outliers(
    events: Sequence[KernelEvent],
    *,
    cpus: int,
    alpha: float = DEFAULT_ALPHA,
    min_programs: int = MIN_PROGRAMS,
) -> list[CoreOutlier]:
    """The cores on which far more different programs crashed than their peers make likely.

    Per core i, d_i is the number of distinct programs (`program_of`) with at least one segfault or
    trap that names that core; M = sum of d_i. If crashes are not tied to a core, each of the M
    (program, core) pairs falls on core i with chance 1/cpus, so d_i ~ Binomial(M, 1/cpus); the
    one-sided p_i = P(X >= d_i) is corrected for testing every core (Bonferroni: p = min(1, cpus * p_i))
    and a core is an outlier when p < alpha and d_i >= min_programs.

    Counting distinct programs rather than crash events is what keeps one program that crashes
    repeatedly from looking like a bad core: crashing 500 times on one core adds 1 to that core, and
    crashing on every core adds 1 to every core (which makes the counts more even than the binomial,
    so the test only gets more cautious). What stands out is many unrelated programs failing on one
    core, which is what a core that miscomputes does.

    Args:
        events: parsed kernel events; only segfaults and traps that name a CPU below `cpus` count.
        cpus: the host's logical CPU count (cores with no crash are peers too). An event naming a CPU
            at or above it is tallied in its own unit (`tally`) and noted (`range_notes`), never tested.
        alpha: family-wise false-alarm rate per host, in (0, 1).
        min_programs: fewest distinct programs that can make a core an outlier (>= 1).

    Returns:
        Outlier cores, smallest p first.

    Raises:
        UsageError: cpus < 1, alpha outside (0, 1), or min_programs < 1.
    """
    _check_args(cpus, alpha, min_programs)
    per_core = crash_programs(events, cpus=cpus)
    total = sum(len(progs) for progs in per_core.values())
    if cpus < 2 or total == 0:  # one CPU has no peer to be compared with
        return []
    tested = [
        _test(core, progs, total, cpus) for core, progs in per_core.items() if len(progs) >= min_programs
    ]
    return sorted((o for o in tested if o.p_value < alpha), key=lambda o: (o.p_value, unit_order(o.unit)))


def _test(core: int, programs: Counter[str], total: int, cpus: int) -> CoreOutlier:
    """One core's distinct programs against Binomial(total, 1/cpus), corrected for the cpus tested."""
    d = len(programs)
    ranked = sorted(programs.items(), key=lambda kv: (-kv[1], kv[0]))
    return CoreOutlier(
        unit=f"cpu:{core}",
        programs=d,
        expected=(total - d) / (cpus - 1),
        peers=cpus - 1,
        p_value=min(1.0, cpus * binomial_sf(d, total, 1.0 / cpus)),
        events=sum(programs.values()),
        examples=tuple(name for name, _ in ranked[:EXAMPLES]),
    )


def crash_programs(events: Iterable[KernelEvent], *, cpus: int) -> dict[int, Counter[str]]:
    """Core -> crash events per program, for segfaults and traps naming a CPU in 0..cpus-1."""
    per_core: dict[int, Counter[str]] = defaultdict(Counter)
    for e in events:
        if e.kind not in CRASH_KINDS or e.cpu is None or not 0 <= e.cpu < cpus:
            continue
        program = program_of(e)
        if program is not None:
            per_core[e.cpu][program] += 1
    return dict(sorted(per_core.items()))


def range_notes(events: Iterable[KernelEvent], *, cpus: int) -> list[str]:
    """A note when events name CPUs this host does not have (a log of another boot or machine?)."""
    beyond = sorted({e.cpu for e in events if e.cpu is not None and e.cpu >= cpus})
    if not beyond:
        return []
    shown = ", ".join(f"cpu:{c}" for c in beyond[:EXAMPLES]) + (", …" if len(beyond) > EXAMPLES else "")
    return [
        f"events name {len(beyond)} CPU(s) beyond this host's {cpus} logical CPUs ({shown}): tallied in "
        f"their own units, left out of the outlier test (a log of another boot or machine?)"
    ]


def _check_args(cpus: int, alpha: float, min_programs: int) -> None:
    if isinstance(cpus, bool) or not isinstance(cpus, int) or cpus < 1:
        raise UsageError(f"sentinel: the host's logical CPU count must be a whole number >= 1, got {cpus!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 1:
        raise UsageError(f"sentinel: alpha must be a number between 0 and 1 (exclusive), got {alpha!r}")
    if isinstance(min_programs, bool) or not isinstance(min_programs, int) or min_programs < 1:
        raise UsageError(f"sentinel: min_programs must be a whole number >= 1, got {min_programs!r}")


def binomial_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), exact to rounding, in time proportional to the spread of X.

    The tail on the far side of the mean is summed from its largest term outwards with the ratio of
    successive terms, stopping once the rest cannot change the sum; the first term comes from
    `math.lgamma`, so n in the millions neither overflows nor loops over every term.
    """
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    if k > n * p:  # upper tail: terms fall from k on
        return min(1.0, _tail_sum(k, n, p, up=True))
    return max(0.0, 1.0 - _tail_sum(k - 1, n, p, up=False))  # 1 - P(X <= k-1); terms fall below k


def _tail_sum(start: int, n: int, p: float, *, up: bool) -> float:
    """Sum of the binomial terms from `start` outwards (up to n, or down to 0), all smaller than the first."""
    q = 1.0 - p
    log_first = (
        math.lgamma(n + 1) - math.lgamma(start + 1) - math.lgamma(n - start + 1)
        + start * math.log(p) + (n - start) * math.log1p(-p)
    )  # fmt: skip
    total, term, j = 0.0, 1.0, start  # terms relative to the first
    while term > 0.0 and term >= total * 1e-17:
        total += term
        if up:
            if j >= n:
                break
            term *= (n - j) / (j + 1) * (p / q)
            j += 1
        else:
            if j <= 0:
                break
            term *= j / (n - j + 1) * (q / p)
            j -= 1
    return math.exp(log_first) * total


# --------------------------------------------------------------------------------------------------
# Findings


def findings(
    outliers: Sequence[CoreOutlier],
    tallies: Mapping[str, UnitTally],
    *,
    host: Mapping[str, int] | None = None,
) -> list[Finding]:
    """The report's findings: outlier cores, then machine checks per unit, then hardware Xids per GPU.

    Args:
        outliers: `core_outliers`.
        tallies: `tally`.
        host: `host_counts`, to name machine checks that named no CPU (a host-level finding).

    Returns:
        `{"kind", "unit", "message", "next"}` dicts: `sentinel` (outlier core), `machine_check`, `xid`.
    """
    out = [_outlier_finding(o, tallies.get(o.unit)) for o in outliers]
    ordered = [tallies[u] for u in sorted(tallies, key=unit_order)]
    out += [_mce_finding(t.unit, t.counts["mce"], t.mce_banks) for t in ordered if t.counts.get("mce")]
    out += [f for t in ordered if (f := _xid_finding(t)) is not None]
    unattributed = (host or {}).get("mce", 0) - sum(t.counts.get("mce", 0) for t in tallies.values())
    if unattributed > 0:  # machine checks that named no CPU: still hardware evidence, of the host
        out.append(_mce_finding(None, unattributed, {}))
    return out


def _outlier_finding(o: CoreOutlier, t: UnitTally | None) -> Finding:
    names = ", ".join(o.examples) + (", …" if o.programs > len(o.examples) else "")
    crashes = _crash_words(t.counts) if t is not None else f"{o.events} crash(es)"
    return _finding(
        KIND_OUTLIER,
        o.unit,
        f"{o.unit}: {o.programs} different programs crashed on it ({names}; {crashes}) where its "
        f"{o.peers} peers make {o.expected:.2g} likely ({p_text(o.p_value)})",
        f"screen it directly: sdcscan run --units {o.unit} -p burnin",
    )


def _crash_words(counts: Mapping[str, int]) -> str:
    words = {"segfault": "segfault(s)", "trap": "trap(s)"}
    return ", ".join(f"{counts[k]} {words[k]}" for k in ("segfault", "trap") if counts.get(k)) or "no crashes"


def _mce_finding(unit: str | None, records: int, banks: Mapping[int, int]) -> Finding:
    """Machine checks of a unit, or (unit None) those that named no CPU."""
    in_banks = f" in bank(s) {', '.join(str(b) for b in sorted(banks))}" if banks else ""
    who, target = (unit, f"--units {unit} ") if unit is not None else ("host", "")
    return _finding(
        KIND_MCE,
        unit,
        f"{who}: {records} machine-check record(s){'' if unit else ' that name no CPU'}{in_banks}: the "
        "processor reported a hardware error it detected",
        f"read the decoded records (ras-mc-ctl --errors, or mcelog), then screen it: sdcscan run {target}-p burnin",
    )


def _xid_finding(t: UnitTally) -> Finding | None:
    hardware = {x: n for x, n in sorted(t.xids.items()) if x in HARDWARE_XIDS}
    if not hardware:
        return None
    listed = ", ".join(f"Xid {x} {HARDWARE_XIDS[x]} ×{n}" for x, n in hardware.items())
    others = {x: n for x, n in sorted(t.xids.items()) if x not in HARDWARE_XIDS}
    rest = f"; {sum(others.values())} other Xid event(s) ({', '.join(map(str, others))})" if others else ""
    # An Xid of a GPU not mapped to a cuda:N unit: screen every GPU of the host.
    target = f"--units {t.unit if t.unit.startswith('cuda:') else 'cuda'}"
    return _finding(
        KIND_XID,
        t.unit,
        f"{t.unit}: {sum(hardware.values())} Xid event(s) NVIDIA lists as hardware, memory or bus errors "
        f"({listed}){rest}",
        f"check its ECC and row-remapping state (nvidia-smi -q -d ECC,ROW_REMAPPER), then screen it: "
        f"sdcscan run {target} -p burnin",
    )


def _finding(kind: str, unit: str | None, message: str, next_step: str) -> Finding:
    return {"kind": kind, "unit": unit, "message": message, "next": next_step}


def p_text(p: float) -> str:
    """`p = 2e-9` (one significant digit); `p < 1e-300` where the value underflowed to 0."""
    if p <= 0.0:
        return "p < 1e-300"
    if p >= 1e-3:
        return f"p = {p:.2g}"
    mantissa, _, exponent = f"{p:.0e}".partition("e")
    return f"p = {mantissa}e{int(exponent)}"


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    try:
        return iso_utc(ts)
    except (OverflowError, ValueError, OSError):  # a time beyond what datetime can hold
        return None
