"""`sdcscan run`'s command line as one typed record, so nothing on the run path indexes a dict by name.

Click hands a command its options as keyword arguments named as the options are declared; `typed_args`
turns them into a `RunArgs` before the command body sees them. A field that does not match an option
fails the first invocation (the dataclass refuses unknown or missing names), which every CLI test makes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunArgs:
    """Every option of `sdcscan run`, as given (durations and lists still text: `_options` checks them)."""

    profile: str
    budget: str | None
    units_spec: str | None
    workloads: str | None
    seed: int | None
    out: str | None  # as typed: `_options` refuses `newdir/` before making it a Path
    as_json: bool
    hostname: str | None
    inject: tuple[str, ...]
    cases: int | None
    retest: int | None
    calibration: str | None
    golden_path: str | None
    background: bool | None
    max_unscreened: str | None
    telemetry_interval: float | None
    junit: str | None
    prom: str | None
    history: str | None
    no_history: bool
    distributed: bool
    standalone: bool
    nnodes: int
    nproc_per_node: int | None
    rdzv_endpoint: str | None
    rdzv_id: str | None
    collective_timeout: str
    join_timeout: str


def typed_args(body: Callable[[RunArgs], None]) -> Callable[..., None]:
    """The click callback: keyword options in, one `RunArgs` to `body`."""

    @functools.wraps(body)
    def callback(**options: Any) -> None:
        body(RunArgs(**options))

    return callback
