"""The cluster report of a launch that ended without one from rank 0: written by the launcher from what
the ranks left.

Rank 0 writes the cluster report. A launch of this machine alone can end without it: a SIGINT or
SIGTERM before the ranks started, or while they were starting (a rank still loading Python has no
handler yet, and the stop the launcher passes on ends it), or rank 0 gone. Then the launcher writes
the cluster report itself, from every rank report of this launch that was written and, for each rank
that wrote none, its unit `invalid` with the reason. So a run stopped by any signal the launcher can
catch still leaves its report at --out, saying `interrupted`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from sdcscan import units
from sdcscan.errors import ReportError
from sdcscan.files import read_json
from sdcscan.launch.cluster_report import RankInfo, merge_rank_reports
from sdcscan.launch.rank import cluster_report_path, report_path_of_rank, unit_of_rank
from sdcscan.outputs.publish import publish
from sdcscan.report.document import Report, Run
from sdcscan.scan import ScanOptions, plan_seed
from sdcscan.timefmt import iso_utc


def written_by_launch(path: Path, run_id: str) -> bool:
    """Whether `path` holds the cluster report of the world `run_id` (not one an earlier run left there)."""
    try:
        doc = read_json(path)
    except ReportError:
        return False
    run = doc.get("run") if isinstance(doc, dict) else None
    return isinstance(run, dict) and str(run.get("id", "")).startswith(f"{run_id}-")


def write_cluster_report(
    opts: ScanOptions, run_id: str, ranks: int, *, interrupted_by: str | None, why: str
) -> Path:
    """Write the cluster report of the world `run_id` (its `ranks` ranks all on this machine) from the
    rank reports it left, and return its path.

    Args:
        why: the reason of a rank without a report, with `{rank}` for its number.

    Raises:
        ReportError: the report (or a JUnit or Prometheus file asked for) could not be written.
    """
    hostname = opts.hostname or units.host_inventory()["hostname"]
    reports: dict[int, dict[str, Any]] = {}
    infos = []
    for rank in range(ranks):
        path = report_path_of_rank(opts, run_id, rank)
        doc = _rank_report(path, run_id)
        if doc is not None:
            reports[rank] = doc
        unit = unit_of_rank(rank, ranks)
        infos.append(RankInfo(rank, hostname, rank, unit.id, unit.pci, str(path) if doc else None))
    missing = {r: why.format(rank=r) for r in range(ranks) if r not in reports}
    run = _run_doc(opts, run_id, reports, interrupted_by)
    cluster = merge_rank_reports(reports, infos, missing=missing, run=run)
    out = cluster_report_path(opts, run_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    publish(cluster, replace(opts.outputs, report=out, record_history=False, lock=False))
    return out


def _rank_report(path: Path, run_id: str) -> dict[str, Any] | None:
    """The report a rank of this world wrote at `path`, unchecked (the cluster report validates it);
    None when there is none, or it is another run's."""
    try:
        doc = read_json(path)
    except ReportError:
        return None
    if not isinstance(doc, dict):
        return None
    seen = doc.get("run", {}).get("distributed", {}) if isinstance(doc.get("run"), dict) else {}
    return doc if isinstance(seen, dict) and seen.get("run_id") == run_id else None


def _run_doc(
    opts: ScanOptions, run_id: str, reports: dict[int, dict[str, Any]], interrupted_by: str | None
) -> Run:
    """The cluster's `run`: the first rank report's, as rank 0 would have made it; else the plan's."""
    now = time.time()
    if reports:
        first = cast(Report, reports[min(reports)])
        run: Run = {**first["run"], "id": f"{run_id}-{first['run']['id']}", "ended_at": iso_utc(now)}
        run.pop("distributed", None)
        run.pop("journal", None)
    else:
        seed, source = plan_seed(opts)
        profile = opts.profile
        run = {
            "id": f"{run_id}-launcher",
            "profile": {"name": profile.name, "sha256": profile.sha256, "path": profile.path},
            "seed": seed,
            "seed_source": source,  # type: ignore[typeddict-item]  # one of cli, profile, week
            "budget_s": opts.budget,
            "duration_s": round(now - opts.started, 3),
            "started_at": iso_utc(opts.started),
            "ended_at": iso_utc(now),
            "argv": opts.argv,
            "workloads": [w.name for w in profile.workloads],
        }
    if interrupted_by:
        run["interrupted_by"] = interrupted_by
    return run
