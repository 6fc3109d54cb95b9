"""export, history, status, clear as a user runs them, and the output options of `run`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from junitparser import JUnitXml
from prometheus_client.parser import text_string_to_metric_families

from sdcscan.cli.ops import COMMANDS, clear_cmd, export_cmd, history_cmd, output_options, status_cmd
from sdcscan.files import write_json_atomic
from sdcscan.outputs.publish import Outputs, publish
from tests.helpers.reports import make_report


def _invoke(cmd: click.Command, *args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(cmd, list(args), env=env)


def _one_line_error(result: Any, code: int) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


def test_export_writes_junit_and_prom_from_a_report(tmp_path: Path) -> None:
    """`sdcscan export REPORT --junit --prom` writes files the consumer libraries parse."""
    report = tmp_path / "report.json"
    write_json_atomic(report, make_report(fail_unit="cpu:1"))
    junit, prom = tmp_path / "r.xml", tmp_path / "r.prom"
    result = _invoke(export_cmd, str(report), "--junit", str(junit), "--prom", str(prom))
    assert result.exit_code == 0, result.stderr
    assert {s.name for s in JUnitXml.fromfile(str(junit))} == {"cpu:0", "cpu:1"}
    names = {f.name for f in text_string_to_metric_families(prom.read_text())}
    assert "sdcscan_unit_verdict" in names
    assert "Wrote" in result.stderr and result.stdout == ""


def test_export_errors_are_one_line(tmp_path: Path) -> None:
    """No output asked: exit 2; a report that is not one: exit 3; both one `Error:` line."""
    report = tmp_path / "report.json"
    write_json_atomic(report, make_report())
    _one_line_error(_invoke(export_cmd, str(report)), 2)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    _one_line_error(_invoke(export_cmd, str(bad), "--junit", str(tmp_path / "x.xml")), 3)


def test_failed_unit_flagged_until_cleared_then_history_lists_both_runs(tmp_path: Path) -> None:
    """Acceptance: cpu:1 fails -> status exits 1 naming it; clear -> exit 0; history lists both runs."""
    db = str(tmp_path / "h.sqlite3")
    publish(make_report(fail_unit="cpu:1", run_id="r1"), Outputs(report=tmp_path / "r1.json", history=db))
    status = _invoke(status_cmd, "--history", db)
    assert status.exit_code == 1
    assert "flagged: cpu:1" in status.stderr
    status_json = _invoke(status_cmd, "--json", "--history", db)
    assert status_json.exit_code == 1
    assert [f["unit"] for f in json.loads(status_json.stdout)["flagged"]] == ["cpu:1"]
    publish(make_report(fail_unit=None, run_id="r2"), Outputs(history=db))
    assert _invoke(status_cmd, "--history", db).exit_code == 1  # sticky: a later pass does not clear it
    cleared = _invoke(clear_cmd, "cpu:1", "--reason", "replaced", "--history", db)
    assert cleared.exit_code == 0, cleared.stderr
    assert "Cleared cpu:1" in cleared.stderr and "replaced" in cleared.stderr
    assert _invoke(status_cmd, "--history", db).exit_code == 0
    listed = _invoke(history_cmd, "--json", "--history", db)
    assert [r["run_id"] for r in json.loads(listed.stdout)] == ["r2", "r1"]
    human = _invoke(history_cmd, "--history", db)
    assert human.exit_code == 0 and "r1" in human.stderr and "(cpu:1)" in human.stderr


def test_history_path_from_environment(tmp_path: Path) -> None:
    """SDCSCAN_HISTORY sets the database for every command, like --history."""
    db = str(tmp_path / "env.sqlite3")
    publish(make_report(run_id="r1"), Outputs(history=db))
    result = _invoke(history_cmd, "--json", "--unit", "cpu:1", env={"SDCSCAN_HISTORY": db})
    assert [u["unit"] for u in json.loads(result.stdout)[0]["units"]] == ["cpu:1"]


def test_clear_and_history_usage_errors(tmp_path: Path) -> None:
    """Missing reason, a malformed unit id, or clearing an unflagged unit: exit 2, one line."""
    db = str(tmp_path / "h.sqlite3")
    _one_line_error(_invoke(clear_cmd, "cpu:1", "--history", db), 2)
    _one_line_error(_invoke(clear_cmd, "core1", "--reason", "x", "--history", db), 2)
    _one_line_error(_invoke(clear_cmd, "cpu:1", "--reason", "x", "--history", db), 2)
    _one_line_error(_invoke(history_cmd, "--unit", "gpu0", "--history", db), 2)


def test_empty_history_and_status_exit_0(tmp_path: Path) -> None:
    """A host with no recorded runs: history says so, status exits 0."""
    db = str(tmp_path / "h.sqlite3")
    assert "No runs recorded" in _invoke(history_cmd, "--history", db).stderr
    assert json.loads(_invoke(history_cmd, "--json", "--history", db).stdout) == []
    assert _invoke(status_cmd, "--history", db).exit_code == 0


def test_output_options_decorate_run(tmp_path: Path) -> None:
    """`@output_options` adds --junit, --prom, --history and --no-history with those parameter names."""
    seen: dict[str, Any] = {}

    @click.command()
    @output_options
    def run(**kwargs: Any) -> None:
        seen.update(kwargs)

    args = ["--junit", "a.xml", "--prom", "b.prom", "--history", "h.db", "--no-history"]
    assert _invoke(run, *args).exit_code == 0
    assert seen == {"junit": "a.xml", "prom": "b.prom", "history": "h.db", "no_history": True}


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c.name)
def test_every_command_has_an_example(cmd: click.Command) -> None:
    """Each command's help carries an Example: block, kept verbatim by \\b."""
    assert re.search(r"\x08\s*\n\s*Example:\n", cmd.help or "")


def test_history_status_and_export_print_text_from_reports_and_paths_as_typed(tmp_path: Path) -> None:
    """A host name and a reason with rich markup and an ANSI escape (stored in the history from a report),
    and an output path with brackets: printed literally, never as markup (MarkupError) nor raw escapes."""
    db = str(tmp_path / "h.sqlite3")
    doc = make_report(fail_unit="cpu:1", run_id="r[/x]1", hostname="node[/x]\x1b[2J")
    doc["units"][1]["reason"] = "[bold]wrong[/] \x1b]0;title\x07"
    publish(doc, Outputs(history=db))
    for cmd in (status_cmd, history_cmd):
        result = CliRunner().invoke(cmd, ["--history", db], env={"COLUMNS": "300"})
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert "node[/x]\\x1b[2J" in result.stderr and "\x1b" not in result.stderr, result.stderr
    status = CliRunner().invoke(status_cmd, ["--history", db], env={"COLUMNS": "300"})
    assert "[bold]wrong[/] \\x1b]0;title\\x07" in status.stderr, status.stderr
    report = tmp_path / "report.json"
    write_json_atomic(report, make_report())
    junit = tmp_path / "out[x]" / "a[/x].xml"
    junit.parent.mkdir(parents=True)  # `a[/x].xml` is the file `x].xml` in the directory `a[`
    result = _invoke(export_cmd, str(report), "--junit", str(junit))
    assert result.exit_code == 0 and f"Wrote {junit}" in result.stderr, result.stderr
