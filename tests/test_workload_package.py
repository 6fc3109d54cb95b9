"""A workload is its package (issue 46): the four files of tests/fixtures/toy_golden, dropped into a copy
of sdcscan/workloads/ with nothing else edited, make a workload that the catalogue lists, a run plans,
checks and judges, the self-test sweeps, the proof bounds and the peaks measure."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import ROOT, child_env, needs_two_cpus

pytestmark = pytest.mark.slow
FIXTURE = Path(__file__).parent / "fixtures" / "toy_golden"
PROFILE = """\
version: 1
description: the fixture workload alone
budget: 8s
workloads:
  - name: toy_golden
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of sdcscan with the built-in profiles where an installed copy has them, plus the fixture."""
    root = tmp_path_factory.mktemp("tree")
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "sdcscan", root / "sdcscan", ignore=skip)
    shutil.copytree(ROOT / "profiles", root / "sdcscan" / "profiles", ignore=skip)
    shutil.copytree(FIXTURE, root / "sdcscan" / "workloads" / "toy_golden", ignore=skip)
    return root


def _sdcscan(tree: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = child_env()
    env["PYTHONPATH"] = str(tree)  # the copy, not this checkout
    env["XDG_STATE_HOME"] = str(cwd / "state")
    return subprocess.run(
        [sys.executable, "-m", "sdcscan", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=180,
    )


def test_the_catalogue_finds_the_package_by_its_spec(tree: Path, tmp_path: Path) -> None:
    code = "import sdcscan.workloads as w; print(w.__file__); print([n for n, s in w.SPECS.items() if s.coverage])"
    env = {**child_env(), "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    where, covered = done.stdout.splitlines()
    assert where.startswith(str(tree)) and "toy_golden" in covered, done.stderr
    listed = _sdcscan(tree, tmp_path, "workloads", "--json")
    assert listed.returncode == 0 and "toy_golden" in {w["name"] for w in json.loads(listed.stdout)}


def test_the_self_test_sweeps_it_and_its_negative_control_stays_silent(tree: Path, tmp_path: Path) -> None:
    done = _sdcscan(tree, tmp_path, "selftest", "-w", "toy_golden", "--trials", "3", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {(r["site"], r["bit"]): r for r in json.loads(done.stdout)["rows"]}
    assert all(rows[("output", bit)]["detected"] == 3 for bit in (0, 23, 30))
    assert rows[("operand", 3)]["detected"] == 0 and rows[("clean", None)]["false_positives"] == 0


@needs_two_cpus
def test_a_run_plans_it_fails_the_struck_unit_and_bounds_and_measures_the_other(
    tree: Path, tmp_path: Path
) -> None:
    (tmp_path / "toy.yaml").write_text(PROFILE)
    done = _sdcscan(
        tree, tmp_path, "run", "-p", "toy.yaml", "--units", "cpu:0,cpu:1", "--inject", "cpu:1:bitflip@0.5",
        "-o", "r.json", "--no-history",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    units = {u["id"]: u for u in json.loads((tmp_path / "r.json").read_text())["units"]}
    assert units["cpu:1"]["verdict"] == "fail" and units["cpu:0"]["verdict"] == "pass"
    checked = units["cpu:0"]["checked"]["toy_golden"]
    assert checked["checked_ops"] > 0 and checked["sdc_rate_bound"] is not None
    speed = units["cpu:0"]["throughput"]["toy_golden"]
    assert speed["peak_ops_per_s"] and speed["efficiency"]
