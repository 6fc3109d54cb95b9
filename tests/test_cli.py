"""Command-line surface: fast help, listings, guard tests for help text and README rows."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from sdcscan.cli import cli
from sdcscan.workloads import SPECS
from tests.helpers.cli import ROOT, child_env


def test_importing_the_cli_does_not_import_torch():
    """`sdcscan --help` must answer at once: torch is imported only by commands that compute."""
    code = "import sys, sdcscan.cli; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), check=True
    )
    assert out.stdout.strip() == "False"


def test_help_lists_exit_codes():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "130" in result.output and "invalid" in result.output


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_every_command_has_help_with_an_example(name):
    """Guard: each command documents itself with an Example block."""
    command = cli.commands[name]
    assert command.help and "Example:" in command.help, name


def test_every_workload_has_a_readme_row():
    readme = (ROOT / "README.md").read_text()
    for name in SPECS:
        assert f"| `{name}` |" in readme, f"README lacks a row for workload {name}"


def test_profiles_and_workloads_list_as_json():
    runner = CliRunner()
    profiles = json.loads(runner.invoke(cli, ["profiles", "--json"]).stdout)
    assert {p["name"] for p in profiles} >= {"quick", "burnin", "qualify", "ripple"}
    workloads = json.loads(runner.invoke(cli, ["workloads", "--json"]).stdout)
    by_name = {w["name"]: w for w in workloads}
    assert set(by_name) == set(SPECS)
    assert "consensus" in by_name["train"]["evidence"]


def test_info_shows_units_and_cohorts():
    data = json.loads(CliRunner().invoke(cli, ["info", "--json"]).stdout)
    cpus = [u for u in data["units"] if u["kind"] == "cpu"]
    assert cpus and len({u["cohort"] for u in cpus}) == 1  # one model, one stack: one cohort
    assert data["host"]["hostname"]
