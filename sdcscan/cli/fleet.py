"""Commands `compare` and `golden record`: parse options, call fleet/golden, render, exit code.

Registered on the main group by `cli.add_command(compare)` and `cli.add_command(golden)`.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import click

from sdcscan.cli.common import emit_json, jobs_option, reports_errors
from sdcscan.cli.html_output import (
    check_html_target,
    fleet_inputs,
    html_option,
    write_findings_csv,
    write_fleet_html,
    write_or_exit,
)
from sdcscan.errors import EXIT_INVALID, SdcscanError, UsageError
from sdcscan.files import write_json_atomic
from sdcscan.fleet.defaults import DEFAULT_SLOW_DROP, DEFAULT_SLOW_Z
from sdcscan.timefmt import parse_duration, parse_iso_utc

P = ParamSpec("P")
R = TypeVar("R")


def internal_errors_exit_3(func: Callable[P, R]) -> Callable[P, R]:
    """Decorate a command body: an unexpected exception is exit 3 with one `Error: internal error` line.

    `main` does the same for the installed command; this keeps the contract wherever the command is
    invoked (tests, embedding) and before anything else can turn the exception into exit 1, which means
    "a unit miscomputes". The traceback goes to a crash file (`sdcscan.cli.crash`), not to the terminal.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except MemoryError:
            click.echo(
                "Error: out of memory while comparing reports (try --jobs 1, or fewer reports)", err=True
            )
            sys.exit(EXIT_INVALID)
        except (SdcscanError, click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # reports_errors and click handle these with their own codes
        except Exception as err:  # the one place in these commands that turns a bug into exit 3
            from sdcscan.cli.crash import report_crash

            report_crash(err)
            sys.exit(EXIT_INVALID)

    return wrapper


def parse_age(text: str) -> float:
    """`60d`, `8w`, `36h`, `1d12h` -> seconds (durations longer than a run budget are fine here).

    Raises:
        UsageError: not a positive duration with units (a bare `10` is refused: seconds are never meant).
    """
    return parse_duration(text, require_unit=True, examples="60d, 8w, 36h")


def _now(text: str | None) -> float:
    """The reference time for staleness: --now (tests, replays) or the clock."""
    if text is None:
        return time.time()
    try:
        return parse_iso_utc(text)
    except ValueError:
        raise UsageError(
            f"invalid --now {text!r}: expected an ISO-8601 time, e.g. 2025-06-02T12:00:00Z"
        ) from None


@click.command()
@click.argument("paths", nargs=-1)
@click.option(
    "--from",
    "from_dir",
    type=click.Path(file_okay=False),
    help="Compare a dataset written by `sdcscan ingest` (Parquet) instead of report PATHS.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option(
    "--hosts", "hosts_file", type=click.Path(dir_okay=False), help="File listing every host, one per line."
)
@click.option(
    "--stale", default="60d", show_default=True, help="Age after which a host's newest report is stale."
)
@click.option(
    "--golden", "golden_path", type=click.Path(dir_okay=False), help="Also judge units against a golden."
)
@click.option(
    "--slow-z",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_SLOW_Z,
    show_default=True,
    help="Robust z-score (against the healthy peers' median and MAD) a unit must be below to be slow, for "
    "cohorts of up to 40 units; larger cohorts raise it (Bonferroni).",
)
@click.option(
    "--slow-drop",
    type=click.FloatRange(0, 1, max_open=True),
    default=DEFAULT_SLOW_DROP,
    show_default=True,
    help="Fraction below the healthy peers' median a slow unit must also be.",
)
@click.option(
    "--fail-on",
    "fail_on",
    type=click.Choice(["undecided"]),
    multiple=True,
    help="Also exit 3 when a host is undecided (the fleet could not judge a case it ran); 1 still wins.",
)
@click.option(
    "--engine",
    "engine_name",
    type=click.Choice(["duckdb", "spark"]),
    default="duckdb",
    show_default=True,
    help="Where --from DIR is judged: DuckDB in this process, or Apache Spark (pip install 'sdcscan[spark]').",
)
@click.option(
    "--spark-master",
    help="Spark master URL for --engine spark (default local[*]: every CPU of this machine).",
)
@click.option(
    "--spark-remote",
    help="Spark Connect URL (sc://HOST:PORT) of an existing cluster, for --engine spark.",
)
@jobs_option
@html_option
@click.option(
    "--csv",
    "csv_path",
    type=click.Path(dir_okay=False),
    help="Also write every finding as CSV here (host, unit, kind, evidence, part, rerun, run).",
)
@click.option(
    "--now",
    "now_text",
    hidden=True,
    help="Reference time for --stale and future timestamps (ISO-8601), for replays and tests.",
)
@reports_errors
@internal_errors_exit_3
def compare(
    paths: tuple[str, ...],
    from_dir: str | None,
    as_json: bool,
    hosts_file: str | None,
    stale: str,
    golden_path: str | None,
    slow_z: float,
    slow_drop: float,
    fail_on: tuple[str, ...],
    engine_name: str,
    spark_master: str | None,
    spark_remote: str | None,
    jobs: int,
    html_path: str | None,
    csv_path: str | None,
    now_text: str | None,
) -> None:
    """Compare reports from many hosts: name divergent, failing, slow, stale and missing units.

    PATHS are report files, directories and globs; or --from DIR, a dataset `sdcscan ingest` wrote,
    compared with the same rules in DuckDB, or on Spark with --engine spark (docs/fleet_sql.md). Directories are searched recursively, following
    symbolic links (each directory once), for *.json and *.json.gz in any case; gzip is read wherever
    it is found. Every input not read is listed with the reason. Digests are compared among units of
    the same plan (profile and seed) and cohort. Units vote within their host, each host casts one
    vote per case from its newest report of the plan (older ones are listed as superseded), and a
    golden overrules the vote. A case is decided by at least 3 hosts, the winner holding more than 2/3
    of them and leading by 2; a unit that disagrees with the decision, or with its own host's majority,
    is divergent; a close split is undecided and accuses nobody (the output says what would decide it). With --hosts, listed hosts without a report that tested something are
    missing, hosts whose newest report is older than --stale are stale, reported hosts not listed are
    named, and a name differing from the list only by case or domain counts as that host (an alias).
    A report dated more than an hour after now is a warning (its host's clock is ahead).

    The JSON (--json) is written to stdout before anything is drawn on stderr; --html FILE also writes a
    self-contained page (findings, each cohort's throughput distribution, coverage by age, where failing
    units cluster), --csv FILE every finding as CSV. Each unit finding's evidence carries the command
    that screens that unit again on its host (`rerun`) and, where its report names it, the part (`part`). Exit 1 when a unit is divergent, fails an invariant or is slow; with --fail-on
    undecided, 3 when a host is undecided and nothing else fails; 0 otherwise; 2 when nothing is usable
    or an option is wrong; 3 on an internal error, when reading fails for want of resources, or when the
    --html page or the --csv file cannot be written (1 still, when a unit fails: a write error never
    hides it).

    \b
    Example:
        sdcscan compare reports/ --hosts fleet.txt --stale 45d
        sdcscan compare 'reports/2025-W23/*.json' --json > findings.json
        sdcscan compare reports/ --hosts fleet.txt --html fleet.html
    """
    from sdcscan.fleet.compare import Source
    from sdcscan.fleet.compare import compare as compare_fleet
    from sdcscan.fleet.golden import index_golden, load_golden
    from sdcscan.fleet.reading import read_hosts
    from sdcscan.fleet.summary import Options
    from sdcscan.render.console import stderr_console
    from sdcscan.render.fleet import render_compare
    from sdcscan.render.fleet_progress import FleetProgressBar

    source = Source(paths, from_dir, engine_name, spark_master, spark_remote)
    source.check()
    inputs = fleet_inputs(paths, from_dir, hosts_file, golden_path)
    check_html_target(html_path, inputs)  # exit 2 before work
    check_html_target(csv_path, [*inputs, ("--html", html_path)], option="--csv")
    stale_s = parse_age(stale)
    hosts = read_hosts(hosts_file) if hosts_file else None
    golden = index_golden(load_golden(golden_path)) if golden_path else None
    now = _now(now_text)  # also for reports dated in the future, with or without --hosts
    opts = Options(
        slow_z=slow_z,
        slow_drop=slow_drop,
        hosts=hosts,
        stale_s=stale_s,
        now=now,
        golden=golden,
        fail_on_undecided="undecided" in fail_on,
        overview=html_path is not None,  # what the page draws beside the findings (not in the JSON)
    )
    with FleetProgressBar(stderr_console(), wanted=not as_json) as progress:
        summary = compare_fleet(source, opts, jobs=jobs or None, progress=progress)
    if as_json:  # first: a failure while drawing the table must not cost automation its JSON
        emit_json(summary.to_dict())
        sys.stdout.flush()
    write_or_exit(
        summary.exit_code,
        lambda: write_fleet_html(html_path, summary, paths, from_dir),
        lambda: write_findings_csv(csv_path, summary),
    )
    render_compare(summary)
    sys.exit(summary.exit_code)


@click.group()
def golden() -> None:
    """Goldens: the fleet's consensus digests, to judge one host with no peers.

    \b
    Example:
        sdcscan golden record reports/ -o golden.json
        sdcscan run --profile qualify --golden golden.json
    """


@golden.command("record")
@click.argument("reports", nargs=-1, required=True)
@click.option(
    "-o",
    "--out",
    "out_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Golden file to write (atomically).",
)
@click.option(
    "--min-votes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Fewest units that must agree on a case's digest for it to be recorded.",
)
@reports_errors
@internal_errors_exit_3
def record(reports: tuple[str, ...], out_path: str, min_votes: int) -> None:
    """Record the consensus digest of every (plan, cohort, case) from REPORTS into a golden file.

    Cases without a clear (strict) majority are refused and listed, never recorded. Use reports of
    the `qualify` profile (fixed seed) from known-good hosts; then `sdcscan run --golden` or
    `sdcscan compare --golden` judge any host against it.

    \b
    Example:
        sdcscan golden record qualify-reports/ -o golden.json
        sdcscan golden record a.json b.json c.json -o golden.json --min-votes 2
    """
    from sdcscan.files import check_output_target
    from sdcscan.fleet.golden_record import record_extracted
    from sdcscan.fleet.reading import read_reports
    from sdcscan.render.fleet import render_golden_record

    check_output_target(out_path, option="--out")  # exit 2 before reading the reports
    found, skipped = read_reports(reports)
    data, dups = record_extracted(found, min_votes=min_votes)
    if not data["entries"]:
        raise UsageError(f"no case had a clear majority of at least {min_votes} unit(s): nothing recorded")
    write_json_atomic(out_path, data)
    render_golden_record(data, sorted([*skipped, *dups], key=lambda s: (s.path, s.reason)), out_path)
