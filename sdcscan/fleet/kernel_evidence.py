"""Kernel-log evidence in `compare`: the cores each host's `sdcscan sentinel` named, and one core on many hosts.

A run report may carry a top-level `sentinel` section (the kernel-log window read, per-unit tallies and
`outliers`: cores on which far more different programs crashed than on their peers). `read_section`
keeps only the outlier cores of it, ignoring any value of the wrong type, NaN or an absurd size: the
section is optional and no verdict rests on it. `host_findings` gives one `sentinel` finding per outlier
core of each host's newest section; `same_core_findings` one more when the same core index is an outlier on
several hosts of one CPU model (by `host.cpu_model`): that points at the model (an erratum, microcode)
or at the way work is scheduled (a service pinned to that core), not at each host. Neither is proof
that a core miscomputes, so neither changes the exit code of `compare`. Pure: no I/O.

Imports nothing from the rest of `sdcscan.fleet` (the extract in `fleet.model` imports this module):
reports come in as anything with the few attributes `_Report` names.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

MAX_ENTRIES = 1024  # outlier entries of one section looked at: no host has more cores than this tests
MAX_TEXT_CHARS = 40  # a program name, a time: what evidence keeps of a string from another host
MAX_EXAMPLES = 5
MAX_HOSTS_LISTED = 20  # host names a fleet finding lists; its count is exact
MIN_HOSTS_SAME_CORE = 2  # hosts of one model with the same outlier core that make a fleet finding
_CPU_UNIT = re.compile(r"cpu:(0|[1-9][0-9]{0,6})")


@dataclass(frozen=True, slots=True)
class SentinelCore:
    """One outlier core a report's sentinel section names; numbers of the wrong type are None."""

    unit: str  # "cpu:N"
    programs: int | None  # distinct programs that crashed on it
    expected: float | None  # what its peers make likely
    p_value: float | None  # corrected for the number of cores tested
    examples: tuple[str, ...]  # a few program names


@dataclass(frozen=True, slots=True)
class SentinelSection:
    """What `compare` keeps of a report's `sentinel` section."""

    outliers: tuple[SentinelCore, ...]
    since: str | None  # the kernel-log window read, as the report says it
    until: str | None
    ignored: int  # outlier entries left out: not an object, or no `cpu:N` unit, or a repeated one


def read_section(value: object) -> SentinelSection | None:
    """A report's `sentinel` section, or None when there is none or it is not an object; never raises."""
    if not isinstance(value, dict):
        return None
    entries = value.get("outliers")
    entries = entries[:MAX_ENTRIES] if isinstance(entries, list) else []
    cores: list[SentinelCore] = []
    seen: set[str] = set()
    for entry in entries:
        core = _core(entry)
        if core is not None and core.unit not in seen:
            seen.add(core.unit)
            cores.append(core)
    return SentinelSection(
        outliers=tuple(sorted(cores, key=lambda c: int(c.unit[4:]))),
        since=_text(value.get("since")),
        until=_text(value.get("until")),
        ignored=len(entries) - len(cores),
    )


def _core(entry: object) -> SentinelCore | None:
    """One outlier entry, or None when it names no logical CPU."""
    if not isinstance(entry, dict):
        return None
    unit = entry.get("unit")
    if not isinstance(unit, str) or _CPU_UNIT.fullmatch(unit) is None:
        return None
    examples = entry.get("examples")
    names = [t for e in examples[:MAX_EXAMPLES] if (t := _text(e))] if isinstance(examples, list) else []
    p_value = _number(entry.get("p_value"))
    return SentinelCore(
        unit=unit,
        programs=_count(entry.get("programs")),
        expected=_number(entry.get("expected")),
        p_value=p_value if p_value is not None and p_value <= 1.0 else None,
        examples=tuple(names),
    )


def _text(value: object) -> str | None:
    return value[:MAX_TEXT_CHARS] if isinstance(value, str) and value else None


def _count(value: object) -> int | None:
    """A whole number 0..10**9, else None (a bool, a float, a negative or a 5000-digit number)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10**9:
        return value
    return None


def _number(value: object) -> float | None:
    """A finite number >= 0 as a float, else None (a bool, NaN, infinite, negative or beyond a float)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        as_float = float(value)
    except OverflowError:
        return None
    return as_float if math.isfinite(as_float) and as_float >= 0 else None


# --------------------------------------------------------------------------------------------------
# Findings


class _Report(Protocol):
    """What the findings read of a report (`fleet.model.HostReport` has it)."""

    @property
    def key(self) -> str: ...
    @property
    def cpu_model(self) -> str | None: ...
    @property
    def sentinel(self) -> SentinelSection | None: ...


R = TypeVar("R", bound=_Report)


def host_findings(reports: Sequence[R]) -> list[tuple[R, str, dict[str, object]]]:
    """(report, unit, evidence) for each outlier core of each report's sentinel section: the caller
    passes each host's newest report with a section (`fleet.sentinel_steps` picks it in SQL)."""
    out = []
    for r in reports:
        section = r.sentinel
        if section is None:
            continue
        for core in section.outliers:
            out.append((r, core.unit, _host_evidence(r, section, core)))
    return out


def _host_evidence(r: _Report, section: SentinelSection, core: SentinelCore) -> dict[str, object]:
    said = "its own `sdcscan sentinel` named it an outlier core"
    if core.programs is not None:
        names = f" ({', '.join(core.examples)}{', …' if core.programs > len(core.examples) else ''})"
        said = f"{core.programs} different programs crashed on it{names if core.examples else ''}"
        if core.expected is not None:
            said += f" where its peers make {core.expected:.2g} likely"
        if core.p_value is not None:
            said += f" (p = {core.p_value:.1g})"
    window = f" between {section.since} and {section.until}" if section.since and section.until else ""
    return {
        "programs": core.programs,
        "expected": core.expected,
        "p_value": core.p_value,
        "examples": list(core.examples),
        "since": section.since,
        "until": section.until,
        "cpu_model": r.cpu_model,
        "reason": (
            f"kernel logs{window}: {said}; not proof of a fault: screen it directly: "
            f"sdcscan run --units {core.unit} -p burnin"
        ),
    }


def same_core_findings(
    outlier_hosts: Mapping[str, Mapping[str, list[str]]], hosts_per_model: Mapping[str, int]
) -> list[tuple[str, str, dict[str, object]]]:
    """The fleet findings from CPU model -> outlier core -> host keys, and each model's count of hosts
    with a section (the Parquet path counts those in SQL and brings only hosts with outliers here)."""
    out = []
    for model, units in sorted(outlier_hosts.items()):
        for unit, names in sorted(units.items(), key=lambda kv: int(kv[0][4:])):
            if len(names) >= MIN_HOSTS_SAME_CORE:
                evidence = _fleet_evidence(model, unit, sorted(names), hosts_per_model[model])
                out.append((f"fleet: {model}", unit, evidence))
    return out


def _fleet_evidence(model: str, unit: str, names: list[str], hosts: int) -> dict[str, object]:
    return {
        "cpu_model": model,
        "hosts": len(names),
        "hosts_with_sentinel": hosts,
        "host_names": names[:MAX_HOSTS_LISTED],
        "reason": (
            f"{unit} is an outlier core on {len(names)} of {hosts} host(s) of this CPU model with kernel-log "
            f"evidence: a problem of the model (an erratum, microcode) or a scheduling artefact (work "
            f"pinned to {unit}, interrupts served there) rather than {len(names)} bad cores; screen one "
            f"of them (sdcscan run --units {unit} -p burnin) and compare with hosts of other models"
        ),
    }
