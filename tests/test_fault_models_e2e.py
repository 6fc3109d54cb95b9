"""`--inject UNIT:KIND` with fault models of how hardware fails, end to end: the struck unit fails, its
peer passes, and the report records what each struck case changed."""

from __future__ import annotations

import json

import pytest

from sdcscan.journal import read_journal
from tests.helpers.cli import CPUS, TWO, needs_two_cpus

pytestmark = pytest.mark.slow  # each test starts `sdcscan run` in a subprocess for a 12 s budget

# Small cases, so that workers are ready within seconds on a loaded two-core machine (the burnin
# profile's pools and 1 M-row tables took 10-30 s to prepare there). Every case of the struck unit is
# struck, so its first case fails it; the budget is for its peer to finish one on a loaded host.
PROFILE = """\
version: 1
description: fault-model drill at small sizes
budget: 12s
workloads:
  - name: gemm_int8
    params: {ops_per_case: 1.0e+8, shapes: [[64, 512, 256]]}
  - name: embbag_int8
    params: {rows: 65536, dim: 64, bags: 256, pooling: [20, 60]}
"""


@needs_two_cpus
@pytest.mark.parametrize(("workload", "kind"), [("gemm_int8", "tile8"), ("embbag_int8", "wrong_rows")])
def test_a_hardware_fault_model_fails_the_struck_unit_and_only_it(
    run_cli, tmp_path, workload: str, kind: str
) -> None:
    """A tile of gemm_int8's output, or a wrong row fetched for four bags of embbag_int8 (at its fetch
    site, not its output): the struck unit fails, its peer passes, exit 1; the journal says what struck."""
    bad, good = f"cpu:{CPUS[-1]}", f"cpu:{CPUS[0]}"
    out, profile = tmp_path / "r.json", tmp_path / "drill.yaml"
    profile.write_text(PROFILE)
    args = ["run", "-p", str(profile), "-w", workload, "--units", TWO, "--json", "-o", str(out)]
    proc = run_cli(*args, "--inject", f"{bad}:{kind}")
    assert proc.stdout, proc.stderr
    report = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    assert {u["id"]: u["verdict"] for u in report["units"]} == {bad: "fail", good: "pass"}
    (journal,) = tmp_path.glob("r.*.journal.jsonl")
    struck = [r for r in read_journal(journal) if r.get("type") == "case" and r.get("injected")]
    assert {r["unit"] for r in struck} == {bad}
    assert struck and all(r["injected"]["kind"] == kind for r in struck)
    assert {r["injected"]["site"] for r in struck} == {"fetch" if kind == "wrong_rows" else "output"}
    assert "exit: fail" in proc.stderr
