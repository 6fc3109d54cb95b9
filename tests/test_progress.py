"""The progress display as the run's event sink: each typed event lands where it should (plain output, no TTY)."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from sdcscan.events import (
    CaseFinished,
    CaseStarted,
    PhaseChanged,
    RunNote,
    RunStarted,
    UnitProblem,
    UnitReady,
)
from sdcscan.render.run import Progress

START = RunStarted(
    profile="quick",
    seed=42,
    seed_source="cli",
    budget_s=60.0,
    journal="run.journal.jsonl",
    units=("cpu:0", "cpu:1"),
    deadline=1e12,
)


def plain_progress() -> tuple[Progress, StringIO]:
    out = StringIO()
    return Progress(Console(file=out, width=100, no_color=True)), out


def test_run_started_prints_the_run_and_lists_the_units_as_starting():
    """The first lines say profile, seed (and where it came from), budget, unit count and the journal."""
    progress, out = plain_progress()
    progress(START)
    assert out.getvalue().splitlines() == [
        "sdcscan run: profile quick, seed 42 (cli), budget 60 s, 2 units",
        "journal: run.journal.jsonl",
    ]
    assert progress.state == {"cpu:0": "starting", "cpu:1": "starting"}


def test_a_run_note_is_printed_as_it_is():
    """A note before the run (e.g. it runs without the run lock) is one line, word for word."""
    progress, out = plain_progress()
    progress(RunNote("note: running without the run lock"))
    assert out.getvalue().splitlines() == ["note: running without the run lock"]


def test_unit_and_case_events_update_the_table_state_silently():
    """Ready, case started and main-pass outcomes change the counters and print nothing."""
    progress, out = plain_progress()
    progress(START)
    before = out.getvalue()
    progress(UnitReady("cpu:0"))
    progress(CaseStarted("cpu:0", 0, "train"))
    progress(CaseFinished("cpu:0", 0, "train", 0, {"status": "ok", "ops": 2e9, "seconds": 1.0}))
    progress(CaseFinished("cpu:0", 1, "train", 0, {"status": "mismatch", "ops": None, "seconds": None}))
    assert progress.state["cpu:0"] == "running" and progress.current["cpu:0"] == "train"
    assert (progress.cases["cpu:0"], progress.bad["cpu:0"]) == (2, 1)
    assert (progress.ops["cpu:0"], progress.busy_s["cpu:0"]) == (2e9, 1.0)
    assert out.getvalue() == before


def test_re_run_outcomes_are_not_counted_as_progress():
    """Attempt 1 and later are re-runs: the case count stays where the main pass left it."""
    progress, _ = plain_progress()
    progress(START)
    progress(CaseFinished("cpu:1", 0, "train", 1, {"status": "mismatch", "ops": 1.0, "seconds": 1.0}))
    assert (progress.cases["cpu:1"], progress.bad["cpu:1"]) == (0, 0)


def test_problems_and_the_re_run_phase_are_printed_in_plain_output():
    """Without a live table, a stopped unit and the re-run phase each get one line."""
    progress, out = plain_progress()
    progress(START)
    progress(UnitProblem("cpu:1", "case 3 (train) hung: no result after 61 s; worker killed"))
    progress(PhaseChanged("retest", (3, 7)))
    assert progress.state["cpu:1"] == "invalid"
    assert out.getvalue().splitlines()[-2:] == [
        "cpu:1: case 3 (train) hung: no result after 61 s; worker killed",
        "re-running disputed cases 3, 7 on the units involved",
    ]


def test_markup_in_a_profile_name_and_the_out_path_prints_as_typed():
    """Issue 15, finding 9: a profile named `[/oops]` and an --out path with `[x]` raised MarkupError or
    lost their brackets; they print as typed, and so do a unit's problem and a note."""
    progress, out = plain_progress()
    start = RunStarted(
        profile="[/oops] [bold]x[/]",
        seed=1,
        seed_source="profile",
        budget_s=5.0,
        journal="out[x]/r[/].journal.jsonl",
        units=("cpu:0",),
        deadline=1e12,
    )
    progress(start)
    progress(UnitProblem("cpu:0", "raised ValueError('[/x]')"))
    progress(RunNote("note: [red]not red[/red]"))
    assert out.getvalue().splitlines() == [
        "sdcscan run: profile [/oops] [bold]x[/], seed 1 (profile), budget 5 s, 1 units",
        "journal: out[x]/r[/].journal.jsonl",
        "cpu:0: raised ValueError('[/x]')",
        "note: [red]not red[/red]",
    ]


def test_control_characters_in_progress_lines_are_escaped():
    """An ANSI escape in a unit's problem (e.g. from a workload's error text) is shown, not obeyed."""
    progress, out = plain_progress()
    progress(START)
    progress(UnitProblem("cpu:1", "died \x1b[2J\r\x07"))
    assert out.getvalue().splitlines()[-1] == "cpu:1: died \\x1b[2J\\r\\x07"


def test_on_a_terminal_the_clock_and_the_starting_wait_advance_without_events():
    """Issue 45: workers preparing their pools send no event for minutes on a busy host; the live table
    still redraws, and its clock and each starting unit's wait move on (2.6 s: at least three values)."""
    import dataclasses
    import re
    import time

    out = StringIO()
    console = Console(file=out, width=100, force_terminal=True, no_color=True)
    with Progress(console) as progress:
        progress(dataclasses.replace(START, deadline=time.time() + 60))
        time.sleep(2.6)  # no event at all
    clocks = set(re.findall(r"sdcscan  (\d+)/60 s", out.getvalue()))
    waits = set(re.findall(r"starting, (\d+) s", out.getvalue()))
    assert len(clocks) >= 3 and len(waits) >= 3, (clocks, waits)
