"""Command `ingest`: reports -> a Parquet dataset for `compare --from` (and Spark or Trino).

Registered on the main group by `cli.add_command(ingest_cmd)`. pyarrow is imported only when the
command runs (`sdcscan.fleet.ingest`), never when the command line is imported.
"""

from __future__ import annotations

import sys

import click

from sdcscan.cli.common import emit_json, jobs_option, reports_errors
from sdcscan.cli.fleet import internal_errors_exit_3
from sdcscan.outcomes import printable

MAX_SKIPPED_SHOWN = 20  # skipped inputs listed one per line; --json lists them all


@click.command("ingest")
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "-o",
    "--out",
    "--to",
    "to_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Dataset directory: created when missing, appended to when it is one (--to: the older name).",
)
@jobs_option
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON on stdout.")
@reports_errors
@internal_errors_exit_3
def ingest_cmd(paths: tuple[str, ...], to_dir: str, jobs: int, as_json: bool) -> None:
    """Write reports into a Parquet dataset that `compare --from DIR` reads.

    For fleets that outgrow one machine. PATHS are report files, directories and globs, read as
    `compare` reads them; every input not used is listed with the reason. The dataset holds one row
    per (host, unit, case) and per report, unit, workload, partitioned by plan (profile and seed) and
    by the day the run ended. Ingesting again appends (repeated reports are dropped by compare).
    `compare --from DIR` judges them (DuckDB, or Spark with --engine spark); Trino reads the same
    files: see docs/fleet_sql.md.

    Exit 0 when reports were written; 2 when nothing usable was found, DIR is not a dataset, or
    pyarrow or duckdb is missing; 3 when writing fails.

    \b
    Example:
        sdcscan ingest reports/2025-W23 -o fleet.parquet
        sdcscan compare --from fleet.parquet --hosts fleet.txt
    """
    from sdcscan.fleet.ingest import ingest
    from sdcscan.render.console import stderr_console
    from sdcscan.render.fleet_progress import FleetProgressBar

    with FleetProgressBar(stderr_console(), wanted=not as_json) as progress:
        result = ingest(paths, to_dir, workers=jobs or None, progress=progress)
    if as_json:
        emit_json(result.to_dict())
        sys.exit(0)
    click.echo(
        f"Ingested {result.reports} report(s) into {printable(result.directory)}: "
        f"{result.rows['cases']} case row(s), {result.rows['units']} unit row(s) in {result.files} file(s); "
        f"{len(result.skipped)} input(s) skipped."
    )
    for s in result.skipped[:MAX_SKIPPED_SHOWN]:
        click.echo(f"  skipped {printable(s.path)}: {printable(s.reason)}")
    if len(result.skipped) > MAX_SKIPPED_SHOWN:
        click.echo(f"  ... and {len(result.skipped) - MAX_SKIPPED_SHOWN} more (--json lists them all)")
    sys.exit(0)
