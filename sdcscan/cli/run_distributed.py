"""`sdcscan run --distributed`: the options, and the two ways in (sdcscan's launcher, or torchrun's)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

import click

from sdcscan.cli.run_args import RunArgs
from sdcscan.errors import EXIT_FAIL
from sdcscan.report.document import Report

if TYPE_CHECKING:  # for the types only: `sdcscan --help` imports neither the run core nor rich
    from sdcscan.interrupts import Interrupted
    from sdcscan.launch.launcher import LaunchResult
    from sdcscan.launch.rank import DistOptions
    from sdcscan.render.console import Console
    from sdcscan.scan import ScanOptions

F = TypeVar("F", bound=Callable[..., object])

_OPTIONS = (
    click.option(
        "--distributed",
        is_flag=True,
        help="One rank per GPU (NCCL) or CPU core (gloo) across nodes: collectives checked bit for bit, "
        "per-hop blame, data-parallel training hashes, live digest exchange; see deploy/README.md.",
    ),
    click.option(
        "--standalone", is_flag=True, help="Distributed: this machine alone (rendezvous on localhost)."
    ),
    click.option(
        "--nnodes", type=click.IntRange(1, 100000), default=1, show_default=True, help="Distributed: nodes."
    ),
    click.option(
        "--nproc-per-node",
        type=click.IntRange(1, 4096),
        help="Distributed: ranks on this node (default: its GPUs, else its CPU cores).",
    ),
    click.option(
        "--rdzv-endpoint", metavar="HOST:PORT", help="Distributed: the c10d rendezvous (the first node)."
    ),
    click.option(
        "--rdzv-id", metavar="ID", help="Distributed: the run's id, the same on every node (e.g. the job id)."
    ),
    click.option(
        "--collective-timeout",
        metavar="DURATION",
        default="10s",
        show_default=True,
        help="Distributed: a collective whose peer does not answer within this fails, and the peer is named.",
    ),
    click.option(
        "--join-timeout",
        metavar="DURATION",
        default="120s",
        show_default=True,
        help="Distributed: give up (exit 3) when the other ranks have not joined within this.",
    ),
)


def distributed_options(func: F) -> F:
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def check_not_distributed(args: RunArgs) -> None:
    """Distributed-only options without --distributed are a usage error, not silently ignored."""
    from sdcscan.errors import UsageError

    given = [
        flag
        for flag, key in (
            ("--standalone", "standalone"),
            ("--nproc-per-node", "nproc_per_node"),
            ("--rdzv-endpoint", "rdzv_endpoint"),
            ("--rdzv-id", "rdzv_id"),
        )
        if getattr(args, key)
    ]
    if args.nnodes != 1:
        given.append("--nnodes")
    if given:
        verb = "means" if len(given) == 1 else "mean"
        raise UsageError(f"{', '.join(given)} only {verb} something with --distributed")


def dist_options(args: RunArgs) -> DistOptions:
    """--collective-timeout, --join-timeout and the rank injections, checked before any work."""
    from sdcscan.collectives.env import parse_rank_injection
    from sdcscan.errors import UsageError
    from sdcscan.launch.rank import DistOptions
    from sdcscan.timefmt import parse_duration

    def seconds(option: str, text: str, low: float, high: float) -> float:
        try:
            value = parse_duration(text, max_s=high)
        except UsageError as err:
            raise UsageError(f"{option}: {err}") from None
        if value < low:
            raise UsageError(f"{option}: at least {low:.0f} s")
        return value

    return DistOptions(
        timeout_s=seconds("--collective-timeout", args.collective_timeout, 1.0, 3600.0),
        join_timeout_s=seconds("--join-timeout", args.join_timeout, 5.0, 86400.0),
        injections=tuple(parse_rank_injection(s) for s in args.inject),
    )


def run_distributed(args: RunArgs, opts: ScanOptions, console: Console) -> NoReturn:
    """Run as a rank under torchrun (RANK in the environment), or launch this node's ranks."""
    from sdcscan.collectives.env import in_torchrun

    dist = dist_options(args)
    if in_torchrun():
        _as_torchrun_rank(args, opts, dist, console)
    _as_launcher(args, opts, dist, console)


def _as_torchrun_rank(args: RunArgs, opts: ScanOptions, dist: DistOptions, console: Console) -> NoReturn:
    """torchrun started this process as one rank: run it; rank 0 shows the cluster's summary."""
    from sdcscan.collectives.env import from_environment
    from sdcscan.errors import UsageError
    from sdcscan.launch.rank import cluster_report_path, rank_report_path, run_rank
    from sdcscan.report import load_report

    if args.standalone or args.rdzv_endpoint or args.rdzv_id or args.nproc_per_node or args.nnodes != 1:
        raise UsageError(
            "under torchrun, give the launch options to torchrun, not to sdcscan run --distributed"
        )
    env = from_environment()
    code = run_rank(opts, dist, env)
    if env.rank == 0:
        _show(load_report(cluster_report_path(opts, env.run_id)), args, console)
    else:
        console.print(f"rank {env.rank}: exit {code}; report {rank_report_path(opts, env)}")
    sys.exit(code)


def _as_launcher(args: RunArgs, opts: ScanOptions, dist: DistOptions, console: Console) -> NoReturn:
    """Launch this node's ranks and show the cluster report; the exit code is the last `exit:` line's.

    A SIGINT or SIGTERM at any moment ends in 130/143, with the cluster report at --out on a one-node
    launch (`_stopped`). One that comes after the ranks ended, while the report is shown, is said as
    such after the report's own `exit:` line, and the code is 130/143.
    """
    from sdcscan import interrupts
    from sdcscan.launch.launcher import launch_run_id

    run_id = launch_run_id(args.rdzv_id)
    try:
        result = _launch(args, opts, dist, run_id, console)
    except interrupts.Interrupted as stop:
        interrupts.hold()  # the ranks were stopped: what they left is written whatever comes now
        _stopped(args, opts, run_id, stop, console)
    interrupts.hold()
    for line in result.lines:
        console.print(line)
    if result.cluster_report is None and args.nnodes == 1 and result.lines:
        result = _written_from_what_the_ranks_left(args, opts, run_id, result, console)
    if result.cluster_report is None:
        console.print(f"exit {result.exit_code} (the cluster report is written on the node of rank 0)")
        interrupts.exit_untouchable(_late_signal(result.exit_code, console))
    _show(_load(result.cluster_report), args, console)
    interrupts.exit_untouchable(_late_signal(result.exit_code, console))


def _written_from_what_the_ranks_left(
    args: RunArgs, opts: ScanOptions, run_id: str, result: LaunchResult, console: Console
) -> LaunchResult:
    """A rank died before rank 0 wrote the cluster report (while the ranks were starting, rank 0 itself):
    on a one-node launch the launcher writes it from what the ranks left, as after a stop, so the run
    leaves its report at --out. Its code stays the launch's (3), or 1 where a rank's report failed a unit."""
    from dataclasses import replace

    from sdcscan.errors import ReportError
    from sdcscan.launch.stopped import write_cluster_report

    ranks = args.nproc_per_node or _default_ranks()
    why = "rank {rank} ended without a report: a rank of the world died, and the launcher stopped the others"
    try:
        path = write_cluster_report(opts, run_id, ranks, interrupted_by=None, why=why)
    except ReportError as err:
        console.print(f"Error: the cluster report could not be written: {err}")
        return result
    code = EXIT_FAIL if _load(str(path))["verdict"] == "fail" else result.exit_code
    return replace(result, exit_code=code, cluster_report=str(path))


def _launch(
    args: RunArgs, opts: ScanOptions, dist: DistOptions, run_id: str, console: Console
) -> LaunchResult:
    """Check the launch options, take the host's run lock, and run this node's ranks."""
    from sdcscan.errors import UsageError
    from sdcscan.launch.launcher import LaunchOptions, launch
    from sdcscan.outputs.publish import check_targets, run_lock

    where = LaunchOptions(
        nproc_per_node=args.nproc_per_node or _default_ranks(),
        standalone=args.standalone,
        nnodes=args.nnodes,
        rdzv_endpoint=args.rdzv_endpoint,
        rdzv_id=args.rdzv_id,
    )
    where.check()
    check_targets(opts.outputs)
    for rank, _, _ in dist.injections:
        if rank >= where.world_size:
            raise UsageError(f"--inject names rank {rank}; the world has ranks 0 to {where.world_size - 1}")
    with run_lock(opts.outputs) as note:  # one lock for all of this node's ranks
        if note:
            console.print(note)
        console.print(
            f"distributed: {where.nproc_per_node} rank(s) on this node, {where.world_size} in the world; "
            f"budget {opts.budget:.0f} s"
        )
        return launch(opts, dist, where, run_id)


def _stopped(args: RunArgs, opts: ScanOptions, run_id: str, stop: Interrupted, console: Console) -> NoReturn:
    """SIGINT or SIGTERM stopped the launch: show rank 0's cluster report if it wrote one, else write it
    from what the ranks left (`stopped.write_cluster_report`). A node of several has only its own ranks:
    the cluster report is rank 0's node's to write."""
    from sdcscan import interrupts
    from sdcscan.errors import ReportError
    from sdcscan.launch.rank import cluster_report_path
    from sdcscan.launch.stopped import write_cluster_report, written_by_launch

    if args.nnodes > 1:
        console.print(f"{stop.name}: this node's ranks were stopped; rank 0's node writes the cluster report")
        console.print("exit: interrupted")
        interrupts.exit_untouchable(stop.exit_code)
    path = cluster_report_path(opts, run_id)
    try:
        if not written_by_launch(path, run_id):
            ranks = args.nproc_per_node or _default_ranks()
            why = f"the launcher was stopped by {stop.name} before rank {{rank}} wrote its report"
            path = write_cluster_report(opts, run_id, ranks, interrupted_by=stop.name, why=why)
    except Exception as err:  # the disk (ReportError), or torch cut off mid-import cannot name the GPUs
        why = str(err) if isinstance(err, ReportError) else f"{type(err).__name__}: {err}"
        console.print(f"Error: the cluster report could not be written: {why}\nexit: interrupted")
        interrupts.exit_untouchable(stop.exit_code)
    _show(_load(str(path)), args, console)
    interrupts.exit_untouchable(stop.exit_code)


def _late_signal(code: int, console: Console) -> int:
    """The launch's code, unless SIGINT or SIGTERM came after the ranks ended (then 130/143, said)."""
    from sdcscan import interrupts

    signum = interrupts.received()
    if signum is None:
        return code
    console.print(
        f"{interrupts.signal_name(signum)} arrived after the ranks ended; the cluster report is complete\n"
        "exit: interrupted"
    )
    return interrupts.exit_code(signum)


def _load(path: str) -> Report:
    from sdcscan.report import load_report

    return load_report(path)


def _default_ranks() -> int:
    from sdcscan import units

    return len(units.gpu_units()) or len(units.cpu_units())


def _show(report: Report, args: RunArgs, console: Console) -> None:
    from sdcscan.cli.common import emit_json
    from sdcscan.render.run import render_summary

    render_summary(report, console)
    if args.as_json:
        emit_json(report)
