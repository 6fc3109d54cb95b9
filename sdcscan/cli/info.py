"""Commands that describe what sdcscan would do here: `profiles`, `workloads`, `info`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from sdcscan.cli.common import emit_json, reports_errors


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
@reports_errors
def profiles(as_json: bool) -> None:
    """List the built-in profiles.

    \b
    Example:
        sdcscan profiles
        sdcscan profiles --json
    """
    from sdcscan.profile import builtin_profile_names, load_profile

    rows = []
    for name in builtin_profile_names():
        p = load_profile(name)
        rows.append(
            {
                "name": p.name,
                "description": p.description,
                "budget_s": p.budget_s,
                "seed": p.seed,
                "workloads": [w.name for w in p.workloads],
                "sha256": p.sha256,
            }
        )
    _show(rows, as_json, lambda render: render.print_profiles)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
@reports_errors
def workloads(as_json: bool) -> None:
    """List the workloads and the evidence each supports (invariant, consensus, repeat).

    \b
    Example:
        sdcscan workloads
    """
    from sdcscan.workloads import SPECS  # the torch-free catalogue: listing needs no workload module

    rows = [
        {
            "name": name,
            "description": s.description,
            "evidence": list(s.evidence),
            "quality": s.quality.value,
            "defaults": dict(s.defaults),
            "fault_sites": list(s.fault_sites),
        }
        for name, s in sorted(SPECS.items())
    ]
    _show(rows, as_json, lambda render: render.print_workloads)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
@click.option("--threads", default=1, show_default=True, help="Threads per unit (part of the cohort key).")
@click.option(
    "--peaks",
    is_flag=True,
    help="Measure (or read from the cache) each workload's plain-op peak on one unit of each kind.",
)
@click.option(
    "-p",
    "--profile",
    default="quick",
    show_default=True,
    help="With --peaks: the profile whose shapes to time.",
)
@reports_errors
def info(as_json: bool, threads: int, peaks: bool, profile: str) -> None:
    """Show the host inventory, its units and their cohort keys; with --peaks, the plain-op peaks.

    \b
    Example:
        sdcscan info --json
        sdcscan info --peaks -p burnin
    """
    from sdcscan import parts, units

    found = units.discover_units()
    if peaks:
        _show(_peaks(found, threads, profile), as_json, _peaks_renderer)
        return
    found_parts = parts.parts_of([(u.kind, u.index, u.pci) for u in found])
    data = {
        "host": units.host_inventory(),
        "software": units.software_versions(),
        "units": [
            {**u.to_dict(), "part": part, "cohort": units.cohort_key(f), "cohort_fields": f}
            for u, part in zip(found, found_parts, strict=True)
            for f in [units.cohort_fields(u, threads)]
        ],
    }
    _show(data, as_json, lambda render: render.print_info)


def _peaks(found: list[Any], threads: int, profile_name: str) -> dict[str, Any]:
    """Each workload's plain-op peak on the first unit of each kind, configured as a worker is.

    Raises:
        ProfileError: the profile cannot be loaded (before any measurement).
        UsageError: a non-positive thread count.
    """
    from sdcscan.errors import UsageError
    from sdcscan.profile import load_profile

    if threads < 1:
        raise UsageError(f"--threads must be at least 1 (got {threads})")
    profile = load_profile(profile_name)
    first = {u.kind: u for u in reversed(found)}  # the first unit of each kind
    measured = []
    for unit in sorted(first.values(), key=lambda u: u.kind):
        from sdcscan.torch_setup import configure_torch  # torch: imported only when peaks are asked for

        torch = configure_torch(unit, threads)
        from sdcscan.peaks.rates import host_peaks

        device = torch.device(unit.id if unit.kind == "cuda" else "cpu")
        from sdcscan.units import unit_class

        params = {w.name: w.params_for(unit.kind, unit_class(unit)) for w in profile.workloads}
        measured.append(
            {"unit": unit.id, "model": unit.model, "threads": threads, **host_peaks(device, params)}
        )
    return {"profile": profile.name, "units": measured}


def _peaks_renderer(_: Any) -> Callable[[Any, Any], None]:
    from sdcscan.render.peaks import print_peaks

    return print_peaks


def _show(data: Any, as_json: bool, pick: Callable[[Any], Callable[[Any, Any], None]]) -> None:
    """JSON on stdout, or the table `pick` chooses from the render module (imported only then: rich is slow)."""
    if as_json:
        emit_json(data)
        return
    from sdcscan.render import run as render
    from sdcscan.render.console import stderr_console

    pick(render)(data, stderr_console())
