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
@reports_errors
def info(as_json: bool, threads: int) -> None:
    """Show the host inventory, its units and their cohort keys.

    \b
    Example:
        sdcscan info --json
    """
    from sdcscan import units

    found = units.discover_units()
    data = {
        "host": units.host_inventory(),
        "software": units.software_versions(),
        "units": [
            {**u.to_dict(), "cohort": units.cohort_key(f), "cohort_fields": f}
            for u in found
            for f in [units.cohort_fields(u, threads)]
        ],
    }
    _show(data, as_json, lambda render: render.print_info)


def _show(data: Any, as_json: bool, pick: Callable[[Any], Callable[[Any, Any], None]]) -> None:
    """JSON on stdout, or the table `pick` chooses from the render module (imported only then: rich is slow)."""
    if as_json:
        emit_json(data)
        return
    from sdcscan.render import run as render
    from sdcscan.render.console import stderr_console

    pick(render)(data, stderr_console())
