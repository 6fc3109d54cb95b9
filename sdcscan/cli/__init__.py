"""The command line: parse, call the library, render, exit. No torch at import, so `--help` is instant."""

from __future__ import annotations

import click

from sdcscan import __version__
from sdcscan.cli.abft import calibrate, selftest
from sdcscan.cli.fleet import compare, golden
from sdcscan.cli.info import info, profiles, workloads
from sdcscan.cli.ops import COMMANDS as OPS_COMMANDS
from sdcscan.cli.report import report_cmd
from sdcscan.cli.run import run_cmd


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="sdcscan")
def cli() -> None:
    """Screen CPUs and GPUs for silent data corruption.

    Exit codes: 0 pass, 1 fail (SDC suspected), 2 usage or profile error,
    3 invalid (could not run or judge), 130 interrupted (SIGINT), 143 terminated (SIGTERM).
    """


for _command in (
    run_cmd,
    profiles,
    workloads,
    info,
    *OPS_COMMANDS,
    compare,
    golden,
    calibrate,
    selftest,
    report_cmd,
):
    cli.add_command(_command)
