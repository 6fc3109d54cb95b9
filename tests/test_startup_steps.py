"""A unit's start-up tells where it is (issue 45): its worker says each step as it begins it (torch, each
workload's prepare, the plain-op peaks), the live table shows the step and the wait, and a worker that
never becomes ready is stopped with the step it was in."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from io import StringIO

from rich.console import Console

from sdcscan.events import RunStarted, UnitPreparing
from sdcscan.profile import load_profile
from sdcscan.render.run import Progress
from sdcscan.run.runner import UnitState, _step_note
from sdcscan.run.worker import WorkerConfig, worker_main
from sdcscan.units import Unit
from sdcscan.workloads import SPECS

CPU0 = Unit(id="cpu:0", kind="cpu", index=0, model="test")


def test_a_worker_says_each_start_up_step_before_it_is_ready() -> None:
    """The shipped worker, spawned as a run spawns it, on the quick profile at its tiny sizes."""
    profile = load_profile("quick")
    names = [w.name for w in profile.workloads]
    cfg = WorkerConfig(
        unit=CPU0,
        profile=profile,
        seed=7,
        threads=1,
        param_overrides={name: dict(SPECS[name].tiny) for name in names},
    )
    spawn = multiprocessing.get_context("spawn")
    mine, theirs = spawn.Pipe()
    worker = spawn.Process(target=worker_main, args=(cfg, theirs), daemon=True)
    worker.start()
    said = []
    try:
        while not said or said[-1][0] not in ("ready", "fatal"):
            assert mine.poll(120), said
            said.append(mine.recv())
        mine.send(("stop",))
    finally:
        worker.join(30)
        if worker.is_alive():
            worker.kill()
    steps = len(names) + 2
    assert [m[2:] for m in said[:-1]] == [
        ("starting torch", 1, steps),
        *((f"preparing {name}", number, steps) for number, name in enumerate(names, start=2)),
        ("measuring plain-op peaks", steps, steps),
    ]
    assert said[-1][0] == "ready" and all(m[0] == "preparing" and m[1] == "cpu:0" for m in said[:-1])


def test_the_live_table_shows_a_starting_units_step_and_wait() -> None:
    out = StringIO()
    progress = Progress(Console(file=out, width=120, no_color=True))
    progress(RunStarted("quick", 1, "cli", 60.0, "j.jsonl", ("cpu:0", "cpu:1"), 1e12))
    progress(UnitPreparing("cpu:0", "preparing gemm_int8", 3, 7))
    rows = {row[0]: row[1] for row in _rows(progress)}
    assert rows["cpu:0"].startswith("preparing gemm_int8 3/7, ") and rows["cpu:0"].endswith(" s")
    assert rows["cpu:1"].startswith("starting, ")


def _rows(progress: Progress) -> list[list[str]]:
    """The live table's cells, row by row."""
    table = progress._table()
    columns = [list(column.cells) for column in table.columns]
    return [[str(c) for c in row] for row in zip(*columns, strict=True)]


def test_a_worker_stopped_before_it_was_ready_is_said_to_have_been_in_its_last_step() -> None:
    assert _step_note(UnitState(CPU0, step=("preparing embbag_int8", 4, 7))) == (
        " (it was preparing embbag_int8, step 4 of 7)"
    )
    assert _step_note(UnitState(CPU0)) == ""  # no step said yet: nothing to add
    assert _step_note(UnitState(CPU0, ready=True, step=("measuring plain-op peaks", 7, 7))) == ""


def test_configuring_torch_makes_it_deterministic_without_importing_inductor() -> None:
    """The workers' configure_torch (sdcscan.torch_setup), in a fresh interpreter: deterministic algorithms are on, and
    torch._inductor (1.1 s of every start-up when `use_deterministic_algorithms` imports it) is not."""
    code = (
        "import sys; from sdcscan.units import Unit; from sdcscan.torch_setup import configure_torch\n"
        "torch = configure_torch(Unit(id='cpu:0', kind='cpu', index=0, model='t'), 1)\n"
        "print(torch.are_deterministic_algorithms_enabled(), 'torch._inductor' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "False"], done.stderr[-2000:]
