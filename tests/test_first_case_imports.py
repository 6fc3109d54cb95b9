"""A unit's first case of each workload imports nothing: its time is the case's, not a lazy import's.

An import inside a case (train's first optimizer imported torch._dynamo, 0.9 s) lands in that case's
time, so the unit's rate, the doctor's speed table and the worker's expected case length all read
slower than the unit is. The worker's own engine prepares the doctor profile (every local workload)
in a fresh interpreter, runs each workload's first case and lists what each case imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from sdcscan.profile import load_profile

PROBE = textwrap.dedent(
    """
    import json, sys
    from sdcscan.profile import load_profile
    from sdcscan.run.worker import WorkerConfig, _Engine
    from sdcscan.units import cpu_units

    class Conn:  # the parent's end of the pipe: nothing to read, messages dropped
        def send(self, msg): pass
        def poll(self): return False

    profile = load_profile(sys.argv[1])
    engine = _Engine(WorkerConfig(unit=cpu_units()[0], profile=profile, seed=7, threads=1), Conn())
    imported = {}
    for index in range(100):
        workload = engine.plan.workload_of(index)
        if workload not in imported:
            before = set(sys.modules)
            engine.run_case(index, 0)
            imported[workload] = sorted(set(sys.modules) - before)
    print(json.dumps(imported))
    """
)


def test_no_workload_imports_a_module_in_its_first_case() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "doctor"], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = json.loads(done.stdout.splitlines()[-1])
    assert set(imported) == {w.name for w in load_profile("doctor").workloads}  # every workload ran
    assert {w: names for w, names in imported.items() if names} == {}
