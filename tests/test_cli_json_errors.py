"""Off a terminal, for machines (issue 45): with --json an error is a JSON document on stdout as well,
and messages are never wrapped into several lines."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from click.testing import CliRunner

from sdcscan.cli import cli
from tests.helpers.cli import child_env, sdcscan_cmd
from tests.helpers.reports import make_report


def _sdcscan(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed command line, as a pipeline runs it (the error handling lives in its `main`)."""
    return subprocess.run(sdcscan_cmd(*args), env=child_env(), capture_output=True, text=True, timeout=60)


def test_a_library_error_with_json_is_json_on_stdout_too(tmp_path: Path) -> None:
    missing = tmp_path / "none"
    r = _sdcscan("compare", str(missing), "--json")
    assert r.returncode == 2
    assert json.loads(r.stdout) == {
        "error": f"no usable report to compare: {missing}: no such file or directory",
        "exit_code": 2,
    }
    assert r.stderr.strip().splitlines()[-1].startswith("Error: no usable report to compare")
    plain = _sdcscan("compare", str(missing))
    assert plain.returncode == 2 and plain.stdout == ""  # without --json stdout stays empty


def test_a_refused_option_with_json_is_json_on_stdout_too() -> None:
    r = _sdcscan("status", "--json", "--history", "/")
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 2 and doc["error"].startswith("Invalid value for '--history'")


def test_a_long_finding_is_one_line_in_a_pipe(tmp_path: Path) -> None:
    report = make_report(fail_unit="cpu:1")
    long_message = "cpu:1 computed wrong results: " + "word " * 80
    report["findings"][0]["message"] = long_message.strip()
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    r = CliRunner().invoke(cli, ["report", str(path)])
    assert f"- {long_message.strip()}" in r.stderr.splitlines(), r.stderr
