"""Helpers shared by the command modules: one place where library errors become `Error: …` and an exit code."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import click

from sdcscan.errors import SdcscanError

F = TypeVar("F", bound=Callable[..., object])  # an option decorator hands back the function it got
P = ParamSpec("P")
R = TypeVar("R")


def reports_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Decorate a click command body: SdcscanError -> one line `Error: …` on stderr and its exit code;
    with --json, also the error as JSON on stdout (`emit_error`)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except SdcscanError as err:
            click.echo(f"Error: {err}", err=True)
            if kwargs.get("as_json"):
                emit_error(str(err), err.exit_code)
            sys.exit(err.exit_code)

    return wrapper


def emit_error(message: str, exit_code: int) -> None:
    """A command asked for --json that ends in an error: a machine reading stdout gets a JSON document
    too, `{"error": MESSAGE, "exit_code": N}`, never an empty stream."""
    emit_json({"error": message, "exit_code": exit_code})


def emit_json(data: object) -> None:
    """Machine output goes to stdout, one JSON document."""
    import json

    click.echo(json.dumps(data, indent=2, sort_keys=False))


def report_options(func: F) -> F:
    """Add -o/--out PATH and --json, the two ways a command hands a report to machines."""
    func = click.option("--json", "as_json", is_flag=True, help="Print the report JSON on stdout.")(func)
    out = click.option(
        "-o",
        "--out",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write the report JSON here (atomically).",
    )
    return out(func)


# `compare` and `ingest` read reports the same way (`fleet.reading.read_reports(workers=...)`).
jobs_option = click.option(
    "--jobs",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Processes reading reports; 0: one per CPU when there are many files.",
)
