"""`sdcscan run` as a library call: options in, the judged and published report out. No printing, no click.

`scan(opts, on_event)` resolves and checks everything first (seed, units, outputs, golden: errors here
come before any work), holds the host's run lock, runs one worker per unit with telemetry sampled
beside them, judges every piece of evidence once (`sdcscan.judgement.verdict`), and writes the outputs the
options ask for. Progress reaches the caller only through `on_event`.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from sdcscan import faults, interrupts, parts, units
from sdcscan.background import host_pacing, priority
from sdcscan.calibration.peers import caches_to_forget
from sdcscan.collectives.env import BARRIER_S, RankSetup
from sdcscan.errors import InputRefused, ReportError, SdcscanError, UsageError
from sdcscan.events import Event, EventSink, RunNote, RunStarted
from sdcscan.files import calibration_cache_dir
from sdcscan.fleet.golden import GoldenIndex, index_golden, load_golden
from sdcscan.journal import Journal
from sdcscan.judgement.assemble import UnitFacts, judge_and_build
from sdcscan.judgement.evidence import PROBLEM_NOT_SCREENED, PROBLEM_STARVED, GoldenEntry, Problem
from sdcscan.outputs import history
from sdcscan.outputs.publish import Outputs, ReportOnlyPrinted, check_targets, history_path, publish, run_lock
from sdcscan.profile import Profile
from sdcscan.report.document import Distributed, Part, Report, Run, Telemetry
from sdcscan.run import capacity
from sdcscan.run.plan import week_seed
from sdcscan.run.runner import Runner, RunResult, end_bound_s, warm_up_workers
from sdcscan.run.worker import WorkerConfig
from sdcscan.sentinel import window as sentinel
from sdcscan.telemetry.sampler import GPU_INTERVAL_S, CaseClock, Sampler, telemetry_findings
from sdcscan.timefmt import iso_utc, parse_iso_utc
from sdcscan.workloads import SPECS

TELEMETRY_INTERVAL_S = 5.0


@dataclass
class ScanOptions:
    """Everything `sdcscan run` can be asked; precedence (default < profile < flag) is resolved by the caller."""

    profile: Profile
    seed: int | None = None
    budget_s: float | None = None
    units: str | None = None
    injections: list[faults.Injection] = field(default_factory=list)
    hostname: str | None = None
    outputs: Outputs = field(default_factory=Outputs)
    journal: Path | None = None
    argv: list[str] = field(default_factory=list)
    param_overrides: dict[str, dict[str, object]] = field(default_factory=dict)
    retest: int | None = None  # re-runs per failing case (None: the profile's)
    cases: int | None = None  # each unit stops after cases 0..cases-1 (None: when the budget ends)
    golden: str | os.PathLike[str] | None = None  # judge digests against this golden file
    started: float = field(default_factory=time.time)  # the budget counts from here (the command's start)
    background: bool | None = None  # Ripple mode (None: the profile's)
    max_unscreened_s: float = host_pacing.MAX_UNSCREENED_S  # background: screen whatever the load after this
    rank: RankSetup | None = None  # a distributed run: this process is one rank (one unit) of the world
    telemetry_interval_s: float | None = None  # seconds between samples (None: 5, or 1 with a GPU)

    @property
    def budget(self) -> float:
        """The run's budget in seconds: --budget where given, else the profile's (the one precedence rule)."""
        return self.budget_s if self.budget_s is not None else self.profile.budget_s

    @property
    def out(self) -> Path | None:
        return self.outputs.report


@dataclass(frozen=True)
class Setup:
    """What `prepare` resolved before any work: the seed, the units, the golden's entries."""

    seed: int
    seed_source: str  # cli | profile | week
    units: list[units.Unit]
    golden: GoldenIndex | None = None  # (plan, cohort) -> the golden's digests
    background: bool = False
    priority: dict[str, object] = field(default_factory=dict)  # background: what the parent was granted


class OutputError(ReportError):
    """The run was judged but an output could not be written; `report` is the judged report, and
    `only_printed` says that nothing but the caller's printing it keeps the run's results."""

    def __init__(self, message: str, report: Report, *, only_printed: bool = False) -> None:
        super().__init__(message)
        self.report, self.only_printed = report, only_printed


def scan(opts: ScanOptions, on_event: EventSink | None = None) -> Report:
    """Run the scan and return the judged report, with every output the options ask for written.

    Raises:
        UsageError, ProfileError (exit 2), RunError (exit 3): before any work starts.
        InputRefused (exit 2): a unit proved an input unusable while it prepared (a calibration file too
            tight for its clean products); the run is stopped and void, its journal removed.
        RunActiveError: another run holds this host's run lock.
        OutputError: the run was judged but an output could not be written (the report is attached).
        interrupts.Interrupted: SIGINT or SIGTERM came before the workers were started (nothing ran).
            One that comes later stops the run instead: the report says `interrupted`, and one that
            comes while the report is judged and written only shows in `interrupts.received()`.
    """
    emit = on_event or _ignore
    with interrupts.installed():
        setup = prepare(opts)
        if setup.background:  # before the fork server starts: it and every worker inherit this
            setup.priority.update(priority.lower_priority(idle_scheduler=False))
        # Only now, so that a refused option never starts a torch import: the fork server's import
        # then overlaps taking the lock, opening the journal and starting the telemetry.
        warm_up_workers()
        with run_lock(opts.outputs) as note:
            if note:
                emit(RunNote(note))
            report = run_and_judge(opts, setup, emit)
            try:
                publish(report, opts.outputs)
            except ReportError as err:
                raise OutputError(str(err), report, only_printed=isinstance(err, ReportOnlyPrinted)) from None
    return report


def journal_path(opts: ScanOptions, run_id: str) -> Path:
    """This run's own journal: beside the report when --out is given (report.json ->
    report.RUN_ID.journal.jsonl), else `journal/RUN_ID.jsonl` in the state directory.

    The run id in the name means two runs with the same --out never share (or clobber) a journal.
    """
    if opts.journal is not None:
        return opts.journal
    if opts.out is not None:
        return opts.out.with_name(f"{opts.out.stem}.{run_id}.journal.jsonl")
    return journal_dir(opts) / f"{run_id}.jsonl"


def journal_dir(opts: ScanOptions) -> Path:
    """The directory this run's journal goes to (`journal_path`)."""
    if opts.journal is not None:
        return opts.journal.parent
    if opts.out is not None:
        return opts.out.parent
    return history.default_state_dir() / "journal"


def prepare(opts: ScanOptions) -> Setup:
    """Check the outputs and the history, resolve seed and units and read the golden, before any work starts.

    Raises:
        UsageError: an output path is empty, a directory, a device, FIFO, socket or symlink, or its
            directory is missing or unwritable; the history is unreadable, empty, foreign or damaged
            (`publish.check_targets`); an injection names a unit that is not selected; the journal and
            outputs do not fit their filesystems' free space, or the open-file limit is too low
            (`sdcscan.run.capacity`).
        ProfileError, ReportError: the units or the golden file (see `units`, `load_golden`); threads
            or case sizes the host cannot hold (`capacity.check_host_fits`).
    """
    check_targets(opts.outputs)
    profile = opts.profile
    seed, source = plan_seed(opts)
    chosen = units.select_units(units.discover_units(), opts.units or profile.units)
    ids = {u.id for u in chosen}
    for inj in opts.injections:
        if inj.unit not in ids:
            raise UsageError(f"--inject names {inj.unit}, which is not among the selected units")
    distributed = [w.name for w in profile.workloads if SPECS[w.name].distributed]
    if distributed and opts.rank is None:
        raise UsageError(
            f"workload {', '.join(distributed)} runs only in a distributed run (sdcscan run --distributed)"
        )
    on = background_mode(profile, opts.background, distributed=opts.rank is not None)
    _check_capacity(opts, chosen)
    return Setup(seed, source, chosen, _golden_index(opts.golden), background=on)


def _check_capacity(opts: ScanOptions, chosen: list[units.Unit]) -> None:
    """The host can hold this run: threads and case sizes, disk space for the journal and the outputs,
    open files (the soft limit raised where the hard one allows), processes, a CPU quota. See
    `sdcscan.run.capacity`."""
    capacity.check_host_fits(opts.profile, chosen)
    files = (("--out", opts.out), ("--junit", opts.outputs.junit), ("--prom", opts.outputs.prom))
    claims = capacity.run_claims(len(chosen), opts.budget, journal_dir(opts), files, opts.cases)
    capacity.check_disk_space(claims)
    capacity.reserve_open_files(len(chosen))
    capacity.check_tasks(len(chosen), opts.profile.threads_per_unit)
    capacity.check_cpu_quota(len(chosen))


def plan_seed(opts: ScanOptions) -> tuple[int, str]:
    """The run's seed and where it came from: --seed, else the profile's, else the ISO week's."""
    if opts.seed is not None:
        return opts.seed, "cli"
    if opts.profile.seed is not None:
        return opts.profile.seed, "profile"
    return week_seed(opts.profile), "week"


def background_mode(profile: Profile, flag: bool | None, *, distributed: bool) -> bool:
    """Whether the run is in background (Ripple) mode: the flag, else the profile's.

    Raises:
        UsageError: background mode in a distributed run (a rank that yields stalls its peers).
    """
    on = profile.background if flag is None else flag
    if on and distributed:
        raise UsageError(
            "--background does not combine with --distributed: a rank cannot yield its peers' time"
        )
    return on


def _golden_index(path: str | os.PathLike[str] | None) -> GoldenIndex | None:
    return None if path is None else index_golden(load_golden(path))


def run_and_judge(opts: ScanOptions, setup: Setup, on_event: EventSink) -> Report:
    """Run every unit until the budget ends (SIGINT or SIGTERM stops it early) and return the judged report."""
    profile, seed, started = opts.profile, setup.seed, opts.started
    budget = opts.budget
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started)) + "-" + uuid.uuid4().hex[:8]
    jpath = journal_path(opts, run_id)
    journal = Journal(jpath)
    run_doc = {
        "id": run_id,
        "profile": {"name": profile.name, "sha256": profile.sha256, "path": profile.path},
        "seed": seed,
        "seed_source": setup.seed_source,
        "budget_s": budget,
        **({} if opts.cases is None else {"cases_per_unit": opts.cases}),
        "started_at": iso_utc(started),
        "argv": opts.argv,
        "workloads": [w.name for w in profile.workloads],
        "injections": [i.to_dict() for i in opts.injections],
        "journal": str(jpath),
    }
    # Enough to rebuild a report from the journal alone (`sdcscan report --from-journal`).
    journal.write(
        {
            "type": "run",
            **run_doc,
            "hostname": _hostname(opts),
            "host": units.host_inventory(),
            "units": [u.to_dict() for u in setup.units],
        }
    )
    configs = [
        WorkerConfig(
            u,
            profile,
            seed,
            profile.threads_per_unit,
            tuple(i for i in opts.injections if i.unit == u.id),
            opts.param_overrides,
            background=setup.background,
            rank=opts.rank,
            cases=opts.cases,
        )
        for u in setup.units
    ]
    on_event(
        RunStarted(
            profile=profile.name,
            seed=seed,
            seed_source=setup.seed_source,
            budget_s=budget,
            journal=str(jpath),
            units=tuple(u.id for u in setup.units),
            deadline=started + budget,
        )
    )
    retest = profile.retest if opts.retest is None else opts.retest
    # GPUs are sampled every second, and their utilisation, clock and power also over case time only.
    gpus = any(u.kind == "cuda" for u in setup.units)
    clock = CaseClock()
    on_event = _tee(on_event, clock.observe)
    interval = opts.telemetry_interval_s or (GPU_INTERVAL_S if gpus else TELEMETRY_INTERVAL_S)
    with Sampler(setup.units, interval_s=interval, busy=clock.busy) as sampler:
        pacing = _pace(opts, setup, deadline=started + budget, on_event=on_event)
        if pacing is not None:
            run_doc["background"] = {"parent_priority": setup.priority, "pacing": pacing.to_dict()}
        grace = 0.0 if opts.rank is None else opts.rank.timeout_s + BARRIER_S
        runner = Runner(configs, journal, on_event, retest=retest, background=setup.background, grace_s=grace)
        if pacing is None or pacing.screen:
            result = runner.run(deadline=started + budget, command_started=started)
        else:
            result = _not_screened(runner, started, pacing)
    journal.close()
    if result.refused is not None:  # a usage error found by a unit: nothing is judged or kept
        jpath.unlink(missing_ok=True)
        raise InputRefused(result.refused)
    if journal.failed is not None or not jpath.exists():
        # It no longer holds every finished case (or is gone): the report must not point to it as if it did.
        run_doc["journal"] = None
        run_doc["journal_lost"] = f"{jpath}: {journal.failed or 'removed during the run'}"
    return finish(opts, setup, run_doc, result, sampler.summary())


def _tee(first: EventSink, second: Callable[[object], None]) -> EventSink:
    """An EventSink that hands every event to both."""

    def both(event: Event) -> None:
        first(event)
        second(event)

    return both


def _pace(
    opts: ScanOptions, setup: Setup, *, deadline: float, on_event: EventSink
) -> host_pacing.Pacing | None:
    """Background mode: wait until the host is quiet enough, or due for a screen (None: not background)."""
    if not setup.background:
        return None
    unscreened = _unscreened_s(opts)
    pacing = host_pacing.wait_for_quiet_host(
        unscreened_s=unscreened, deadline=deadline, max_unscreened_s=opts.max_unscreened_s
    )
    if pacing.waited_s >= 1.0 or not pacing.screen:
        on_event(RunNote(_pacing_note(pacing)))
    return pacing


def _unscreened_s(opts: ScanOptions) -> float | None:
    """Seconds since this host's last judged run (pass or fail) ended; None when it has none on record."""
    try:
        recent = history.runs(history_path(opts.outputs.history), limit=200)
    except SdcscanError:
        return None
    for run in recent:  # newest first
        if run.get("verdict") not in ("pass", "fail"):
            continue
        try:
            return max(0.0, time.time() - parse_iso_utc(str(run.get("ended_at"))))
        except ValueError:
            continue
    return None


def _pacing_note(p: host_pacing.Pacing) -> str:
    load = "unknown" if p.load_per_cpu is None else f"{p.load_per_cpu:.2f}"
    if not p.screen:
        return (
            f"{host_pacing.NOT_SCREENED}: the host stayed busy for the whole budget (load {load} per CPU, "
            f"above the {p.threshold:.2f} allowed {_ago(p.unscreened_s)} after the last screen)"
        )
    return f"background: waited {p.waited_s:.0f} s for the host to quiet down (load {load} per CPU)"


def _ago(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds / 3600:.1f} h"


def _not_screened(runner: Runner, started: float, pacing: host_pacing.Pacing) -> RunResult:
    """The result of a background run the host's load kept from starting: every unit unscreened."""
    for state in runner.states.values():
        state.late, state.not_screened = _pacing_note(pacing), not pacing.screen
    return RunResult(runner.states, {}, [], started, time.time())


def finish(
    opts: ScanOptions, setup: Setup, started: dict[str, object], result: RunResult, telemetry: Telemetry
) -> Report:
    """Judge the results, with the golden's entries for this plan when there is one, and assemble the report.

    `started` is the `run` object as the run began (id, profile, seed, budget, …); its end is added here.
    """
    ended = {"ended_at": iso_utc(result.ended), "duration_s": round(result.ended - result.started, 3)}
    run_doc = cast(Run, {**started, **ended})
    if result.interrupted:
        run_doc["interrupted_by"] = result.interrupted
    if opts.rank is not None:
        run_doc["distributed"] = _rank_doc(opts.rank, result)
    found_parts = parts.parts_of([(u.kind, u.index, u.pci) for u in setup.units])
    unit_docs = [_unit_facts(u, result, part) for u, part in zip(setup.units, found_parts, strict=True)]
    _forget_calibrations(caches_to_forget({u["id"]: u["cohort"] for u in unit_docs}, result.outcomes))
    report = judge_and_build(
        run=run_doc,
        host={**units.host_inventory(), "hostname": _hostname(opts)},
        software=result.software,
        cohorts={s.cohort: s.cohort_fields for s in result.states.values() if s.cohort},
        units=unit_docs,
        outcomes=result.outcomes,
        problems=_problems(result),
        interrupted=result.interrupted,
        golden=_golden_entries(setup, opts.profile.sha256, result),
        telemetry=telemetry,
        telemetry_findings=telemetry_findings(telemetry),
    )
    # The run's end bound (README: budget + 10 s + re-run window + 3 s): the kernel log never holds it past.
    bound = opts.started + end_bound_s(opts.budget)
    _add_kernel_evidence(report, opts.started, result.ended, unit_docs, deadline=bound)
    return report


def _unit_facts(u: units.Unit, result: RunResult, part: Part) -> UnitFacts:
    state = result.states[u.id]
    facts: UnitFacts = {
        "id": u.id,
        "kind": u.kind,
        "model": u.model,
        "cohort": state.cohort,
        "notes": state.notes,
        "peaks": state.peaks,
        "pacing": state.pacing,
    }
    if u.pci:
        facts["pci"] = u.pci
    if part:
        facts["part"] = part
    return facts


def _rank_doc(rank: RankSetup, result: RunResult) -> Distributed:
    """A rank report's `run.distributed`: where the rank sat and what its worker saw of the world."""
    seen = next((s.world for s in result.states.values() if s.world), {})
    return cast(
        Distributed,
        {  # the world's summary comes from the worker, as JSON
            **rank.env.to_dict(),
            "hostname": rank.hostname,
            "injections": [f.to_dict() for f in rank.faults],
            "timeout_s": rank.timeout_s,
            **{k: v for k, v in seen.items() if k not in ("rank", "world_size")},
        },
    )


def _add_kernel_evidence(
    report: Report, started: float, ended: float, unit_docs: list[UnitFacts], *, deadline: float
) -> None:
    """The kernel's own log of the run's window (segfaults per core, machine checks, Xids) beside the
    tests: its findings say what to screen, and never change the run's verdict or exit code."""
    gpus = {u["pci"]: u["id"] for u in unit_docs if u.get("pci")}
    found = sentinel.scan_window_quietly(started, ended, gpus, deadline=deadline)
    if found is not None:
        report["sentinel"] = found.section
        report["findings"] += found.findings


def _forget_calibrations(names: set[str]) -> None:
    """Remove cached calibrations that units of one cohort disagreed on: the next run measures again."""
    for name in sorted(names):
        with contextlib.suppress(OSError):  # already gone, or a read-only state directory: nothing to undo
            (calibration_cache_dir() / name).unlink()


def _problems(result: RunResult) -> dict[str, str | Problem]:
    """unit -> why it cannot be judged: the runner stopped it, or it started too late to run a case
    (with the evidence code that says the host's own work kept it from running, where that is why)."""
    out: dict[str, str | Problem] = {}
    for uid, s in result.states.items():
        if s.problem:
            out[uid] = Problem(uid, reason=s.problem, code=PROBLEM_STARVED) if s.starved else s.problem
        elif s.late and not s.results:
            out[uid] = Problem(uid, reason=s.late, code=PROBLEM_NOT_SCREENED if s.not_screened else None)
    return out


def _golden_entries(
    setup: Setup, profile_sha256: str, result: RunResult
) -> dict[str, GoldenEntry | None] | None:
    """cohort -> the golden's entry for this run's plan and that cohort (None where it has none)."""
    if setup.golden is None:
        return None
    plan = (profile_sha256, setup.seed)
    cohorts = {s.cohort or f"unstarted:{uid}" for uid, s in result.states.items()}
    return {c: setup.golden.get((plan, c)) for c in cohorts}


def _ignore(event: Event) -> None:
    """The default event sink: a library caller that wants no progress."""


def _hostname(opts: ScanOptions) -> str:
    return opts.hostname or units.host_inventory()["hostname"]
