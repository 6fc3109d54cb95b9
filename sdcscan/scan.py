"""`sdcscan run` as a library call: options in, report and exit code out. No printing, no click."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sdcscan import faults, units
from sdcscan.assemble import iso, judge_and_build
from sdcscan.errors import RunError, UsageError
from sdcscan.journal import Journal
from sdcscan.plan import week_seed
from sdcscan.profile import Profile
from sdcscan.runner import Event, Runner
from sdcscan.worker import WorkerConfig


@dataclass
class ScanOptions:
    profile: Profile
    seed: int | None = None
    budget_s: float | None = None
    units: str | None = None
    injections: list[faults.Injection] = field(default_factory=list)
    hostname: str | None = None
    out: Path | None = None
    journal: Path | None = None
    argv: list[str] = field(default_factory=list)
    param_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    retest: int | None = None  # re-runs per failing case (None: the profile's)


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "sdcscan"


def journal_path(opts: ScanOptions, run_id: str) -> Path:
    """Beside the report when --out is given (report.json -> report.journal.jsonl), else in the state dir."""
    if opts.journal is not None:
        return opts.journal
    if opts.out is not None:
        return opts.out.with_name(opts.out.stem + ".journal.jsonl")
    return default_state_dir() / "journal" / f"{run_id}.jsonl"


def prepare(opts: ScanOptions) -> dict[str, Any]:
    """Resolve seed, units and cohorts, and check outputs are writable, before any work starts."""
    profile = opts.profile
    if opts.seed is not None:
        seed, source = opts.seed, "cli"
    elif profile.seed is not None:
        seed, source = profile.seed, "profile"
    else:
        seed, source = week_seed(profile), "week"
    chosen = units.select_units(units.discover_units(), opts.units or profile.units)
    ids = {u.id for u in chosen}
    for inj in opts.injections:
        if inj.unit not in ids:
            raise UsageError(f"--inject names {inj.unit}, which is not among the selected units")
    if opts.out is not None and not os.access(
        opts.out.parent if str(opts.out.parent) else Path("."), os.W_OK
    ):
        raise RunError(f"cannot write report to {opts.out}: directory missing or not writable")
    return {"seed": seed, "seed_source": source, "units": chosen}


def scan(opts: ScanOptions, setup: dict[str, Any], on_event: Event, started: float) -> dict[str, Any]:
    """Run the scan and return the report (also written to --out when given).

    Args:
        setup: the result of `prepare(opts)`.
        started: time.time() when the command started; the budget counts from then.
    """
    profile, seed = opts.profile, setup["seed"]
    budget = opts.budget_s or profile.budget_s
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started)) + "-" + uuid.uuid4().hex[:8]
    jpath = journal_path(opts, run_id)
    journal = Journal(jpath)
    run_doc = {
        "id": run_id,
        "profile": {"name": profile.name, "sha256": profile.sha256, "path": profile.path},
        "seed": seed,
        "seed_source": setup["seed_source"],
        "budget_s": budget,
        "started_at": iso(started),
        "argv": opts.argv,
        "workloads": [w.name for w in profile.workloads],
        "injections": [i.to_dict() for i in opts.injections],
        "journal": str(jpath),
    }
    # Enough to rebuild a report from the journal alone (`sdcscan report --from-journal`).
    journal.write(
        {
            "type": "run",
            **run_doc,
            "hostname": _hostname(opts),
            "host": units.host_inventory(),
            "units": [u.to_dict() for u in setup["units"]],
        }
    )
    configs = [
        WorkerConfig(
            u,
            profile,
            seed,
            profile.threads_per_unit,
            tuple(i for i in opts.injections if i.unit == u.id),
            opts.param_overrides,
        )
        for u in setup["units"]
    ]
    on_event("start", run=run_doc, units=[u.id for u in setup["units"]], deadline=started + budget)
    retest = profile.retest if opts.retest is None else opts.retest
    result = Runner(configs, journal, on_event, retest=retest).run(
        deadline=started + budget, command_started=started
    )
    journal.close()
    return finish(opts, setup, run_doc, result)


def finish(opts: ScanOptions, setup: dict[str, Any], run_doc: dict[str, Any], result: Any) -> dict[str, Any]:
    """Judge the results and assemble the report."""
    run_doc = {
        **run_doc,
        "ended_at": iso(result.ended),
        "duration_s": round(result.ended - result.started, 3),
    }
    if result.interrupted:
        run_doc["interrupted_by"] = result.interrupted
    unit_docs = [
        {**u.to_dict(), "cohort": result.states[u.id].cohort, "notes": result.states[u.id].notes}
        for u in setup["units"]
    ]
    return judge_and_build(
        run=run_doc,
        host={**units.host_inventory(), "hostname": _hostname(opts)},
        software=result.software,
        cohorts={s.cohort: s.cohort_fields for s in result.states.values() if s.cohort},
        units=unit_docs,
        outcomes=result.outcomes,
        problems={
            uid: s.problem or s.late
            for uid, s in result.states.items()
            if s.problem or (s.late and not s.results)
        },
        interrupted=result.interrupted,
    )


def _hostname(opts: ScanOptions) -> str:
    return opts.hostname or units.host_inventory()["hostname"]
