"""Commands `compare` and `golden record`: parse options, call fleet/golden, render, exit code.

Registered on the main group by `cli.add_command(compare)` and `cli.add_command(golden)`.
"""

from __future__ import annotations

import sys
import time

import click

from sdcscan.cli.common import emit_json, reports_errors
from sdcscan.errors import UsageError
from sdcscan.files import write_json_atomic
from sdcscan.fleet.compare import DEFAULT_SLOW_DROP, DEFAULT_SLOW_Z, Options, summarize
from sdcscan.fleet.golden import index_golden, load_golden, record_extracted
from sdcscan.fleet.model import dedupe
from sdcscan.fleet.reading import read_hosts, read_reports
from sdcscan.timefmt import parse_duration, parse_iso_utc


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
@click.argument("paths", nargs=-1, required=True)
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
    help="Robust z-score (median/MAD) beyond which a unit may be slow.",
)
@click.option(
    "--slow-drop",
    type=click.FloatRange(0, 1, max_open=True),
    default=DEFAULT_SLOW_DROP,
    show_default=True,
    help="Fraction below the median a slow unit must also be.",
)
@click.option(
    "--now", "now_text", hidden=True, help="Reference time for --stale (ISO-8601), for replays and tests."
)
@reports_errors
def compare(
    paths: tuple[str, ...],
    as_json: bool,
    hosts_file: str | None,
    stale: str,
    golden_path: str | None,
    slow_z: float,
    slow_drop: float,
    now_text: str | None,
) -> None:
    """Compare reports from many hosts: name divergent, failing, slow, stale and missing units.

    PATHS are report files, directories (searched recursively for *.json) and globs. Digests are
    compared among units of the same plan (profile and seed) and cohort; the strict majority of each
    case wins, a unit that disagrees is divergent. Unreadable or foreign files are skipped and listed.
    Exit 1 when a unit is divergent, fails an invariant or is slow; 0 otherwise; 2 when nothing is usable.

    \b
    Example:
        sdcscan compare reports/ --hosts fleet.txt --stale 45d
        sdcscan compare 'reports/2025-W23/*.json' --json > findings.json
    """
    from sdcscan.render.fleet import render_compare

    stale_s = parse_age(stale)
    hosts = read_hosts(hosts_file) if hosts_file else None
    golden = index_golden(load_golden(golden_path)) if golden_path else None
    now = _now(now_text) if hosts is not None else None
    reports, skipped = read_reports(paths)
    opts = Options(slow_z=slow_z, slow_drop=slow_drop, hosts=hosts, stale_s=stale_s, now=now, golden=golden)
    summary = summarize(reports, options=opts, skipped=skipped)
    del reports  # the summary holds what is printed; let the extracts go before rendering
    render_compare(summary)
    if as_json:
        emit_json(summary.to_dict())
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
    from sdcscan.render.fleet import render_golden_record

    check_output_target(out_path, option="--out")  # exit 2 before reading the reports
    found, skipped = read_reports(reports)
    kept, dups = dedupe(found)
    data = record_extracted(kept, min_votes=min_votes)
    if not data["entries"]:
        raise UsageError(f"no case had a clear majority of at least {min_votes} unit(s): nothing recorded")
    write_json_atomic(out_path, data)
    render_golden_record(data, sorted([*skipped, *dups], key=lambda s: (s.path, s.reason)), out_path)
