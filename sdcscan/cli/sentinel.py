"""`sdcscan sentinel`: per-core evidence from the kernel's own logs, without running a test."""

from __future__ import annotations

import sys

import click

from sdcscan.cli.common import emit_json, reports_errors
from sdcscan.cli.ops import history_option
from sdcscan.errors import EXIT_INVALID, EXIT_PASS


@click.command("sentinel", short_help="Per-core evidence from the kernel's logs (segfaults, MCEs, Xids).")
@click.option(
    "--since",
    metavar="WHEN",
    help="Start of the window: an ISO-8601 time or a duration ago (24h, 7d) "
    "[default: where the last recorded scan ended, else 7 days ago].",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the scan (section and findings) as JSON on stdout."
)
@click.option(
    "--prom", type=click.Path(dir_okay=False), help="Also write Prometheus metrics (node_exporter textfile)."
)
@history_option
@click.option(
    "--no-history", is_flag=True, help="Do not record the scan (the next one then starts where this did)."
)
@click.option("--hostname", help="Host label in the output (containers, tests).")
@reports_errors
def sentinel_cmd(**kw: object) -> None:
    """Read the kernel's logs and name cores that far more programs crash on than on their peers.

    No test runs: the evidence is what the kernel already logged (Meta's Hardware Sentinel):
    segfaults and traps per CPU, machine checks (also rasdaemon's database) and NVIDIA Xids per GPU.
    A core is an outlier when more different programs crashed on it than its peers make likely
    (a binomial test over all the host's CPUs, corrected for their number); one program crashing
    again and again, on one core or on all, is a software bug and does not count. Reading the
    kernel log needs root, or the adm / systemd-journal group (kmsg and dmesg: CAP_SYSLOG where
    kernel.dmesg_restrict=1); without it the notes say what is missing.

    Exit codes: 0 the log was read (outlier cores, machine checks and hardware Xids are findings, and
    `sdcscan_sentinel_outlier` in --prom: suspects to screen with the command each finding gives,
    whose exit code is the judgement; a crash statistic alone never exits 1); 3 no kernel log could
    be read (nothing judged).

    \b
    Example:
        sdcscan sentinel                      # since the last scan (first time: the last 7 days)
        sdcscan sentinel --since 24h --json
        sdcscan sentinel --prom /var/lib/node_exporter/textfile_collector/sdcscan-sentinel.prom
    """
    from sdcscan.render.sentinel import print_sentinel
    from sdcscan.sentinel.command import SentinelOptions, sentinel

    opts = SentinelOptions(kw["since"], kw["prom"], kw["history"], not kw["no_history"], kw["hostname"])  # type: ignore[arg-type]
    scan, hostname = sentinel(opts)
    # 1 means a unit was judged to miscompute: crash counts make a suspect, and the screen judges it.
    code = EXIT_PASS if scan.read_anything else EXIT_INVALID
    if kw["as_json"]:
        emit_json({"host": hostname, "exit_code": code, "sentinel": scan.section, "findings": scan.findings})
    print_sentinel(scan.section, scan.findings, "pass" if code == EXIT_PASS else "invalid")
    sys.exit(code)
