"""The command line: parse, call the library, render, exit. No torch at import, so `--help` is instant."""

from __future__ import annotations

import click

from sdcscan import __version__
from sdcscan.cli.abft import calibrate, selftest
from sdcscan.cli.doctor import doctor
from sdcscan.cli.fleet import compare, golden
from sdcscan.cli.info import info, profiles, workloads
from sdcscan.cli.ingest import ingest_cmd
from sdcscan.cli.ops import COMMANDS as OPS_COMMANDS
from sdcscan.cli.report import report_cmd
from sdcscan.cli.run import run_cmd
from sdcscan.cli.sentinel import sentinel_cmd
from sdcscan.errors import EXIT_INTERRUPTED, EXIT_INVALID

# Commands that stop gracefully on SIGINT/SIGTERM (a report, 130/143): they keep the entry point's
# handlers until they install their own; every other command gets Python's defaults back.
_GRACEFUL_STOP = frozenset({"run", "doctor"})


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="sdcscan")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Screen CPUs and GPUs for silent data corruption.

    Exit codes: 0 pass, 1 fail (SDC suspected), 2 usage or profile error,
    3 invalid (could not run or judge), 130 interrupted (SIGINT), 143 terminated (SIGTERM).
    """
    if ctx.invoked_subcommand not in _GRACEFUL_STOP:
        from sdcscan.interrupts import release

        release()


for _command in (
    run_cmd,
    profiles,
    workloads,
    info,
    *OPS_COMMANDS,
    sentinel_cmd,
    compare,
    ingest_cmd,
    golden,
    calibrate,
    selftest,
    doctor,
    report_cmd,
):
    cli.add_command(_command)


def main() -> None:
    """The `sdcscan` command: `cli` behind a guard that keeps the exit-code contract whatever happens.

    1 means a unit miscomputes and nothing else, so nothing else may end in 1: click's own `Aborted!`
    (exit 1 on a Ctrl-C outside a run) becomes 130, a click usage error stays 2, and any unexpected
    exception becomes exit 3 with one `Error:` line and a crash file holding the traceback.
    """
    import sys

    from sdcscan.cli import streams
    from sdcscan.errors import EXIT_USAGE
    from sdcscan.interrupts import Interrupted, exit_untouchable

    streams.install()  # a closed pipe or a full disk under stdout/stderr never changes the exit code
    from sdcscan.doctor.children import die_with_parent

    die_with_parent()  # a child command of `sdcscan doctor` ends with it
    try:
        code = cli.main(standalone_mode=False)
    except click.exceptions.Abort:  # click turns KeyboardInterrupt (and EOF at a prompt) into Abort
        code = _interrupted(EXIT_INTERRUPTED)
    except KeyboardInterrupt:
        code = _interrupted(EXIT_INTERRUPTED)
    except Interrupted as stop:
        code = _interrupted(stop.exit_code)
    except click.exceptions.ClickException as err:
        err.show()
        code = err.exit_code if err.exit_code == EXIT_USAGE else EXIT_USAGE  # never click's default 1
        if "--json" in sys.argv[1:]:  # a refused option of a command asked for JSON: JSON on stdout too
            from sdcscan.cli.common import emit_error

            emit_error(err.format_message(), code)
    except SystemExit as done:  # the commands end with sys.exit(their code)
        code = done.code
    except Exception as err:
        from sdcscan.cli.crash import report_crash

        report_crash(err)
        code = EXIT_INVALID
    if code is not None and not isinstance(code, int):  # sys.exit("message"): print it, never exit 1
        print(code, file=sys.stderr)
        code = EXIT_INVALID
    exit_untouchable(code or 0)


def _interrupted(exit_code: int) -> int:
    import sys

    print("interrupted\nexit: interrupted", file=sys.stderr)
    return exit_code
