"""export, history, status, clear as a user runs them, and the output options of `run`."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from junitparser import JUnitXml
from prometheus_client.parser import text_string_to_metric_families

from sdcscan.cli.ops import COMMANDS, clear_cmd, export_cmd, history_cmd, output_options, status_cmd
from sdcscan.files import write_json_atomic
from sdcscan.outputs.history import record_sentinel_scan
from sdcscan.outputs.publish import Outputs, publish
from sdcscan.timefmt import iso_utc
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
    assert {s.name for s in JUnitXml.fromfile(str(junit))} == {"node-a/cpu:0", "node-a/cpu:1"}  # HOST/UNIT
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


def test_status_shows_24h_coverage_and_the_last_kernel_log_scan(tmp_path: Path) -> None:
    """status: per unit the cases and seconds screened in the last 24 h, and the last sentinel scan's
    window, events and outlier cores; --json carries both. Outlier cores alone do not make it exit 1."""
    db = str(tmp_path / "h.sqlite3")
    empty = _invoke(status_cmd, "--history", db)
    assert (
        "No unit screened in the last 24 h" in empty.stderr and "No kernel-log scan recorded" in empty.stderr
    )
    ended = iso_utc(time.time() - 600)
    publish(make_report(fail_unit=None, run_id="r1", ended_at=ended), Outputs(history=db))
    section = {"since": "2026-03-10T10:00:00Z", "until": "2026-03-10T11:00:00Z", "sources": ["journal"],
               "host_counts": {"segfault": 7}, "outliers": [{"unit": "cpu:7", "programs": 5}]}  # fmt: skip
    record_sentinel_scan(db, section, "node-a")
    human = _invoke(status_cmd, "--history", db, env={"COLUMNS": "200"})
    assert human.exit_code == 0, human.stderr
    assert re.search(r"cpu:1\s*│\s*1\s*│\s*8\s*│\s*2\.0 s", human.stderr), human.stderr
    assert (
        "2026-03-10T10:00:00Z to 2026-03-10T11:00:00Z: 7 kernel event(s), outlier cores: cpu:7"
        in human.stderr
    )
    state = json.loads(_invoke(status_cmd, "--json", "--history", db).stdout)
    assert state["coverage_24h"]["cpu:0"] == {"cases": 8, "seconds": 2.0, "runs": 1}
    assert state["last_sentinel"]["outliers"] == ["cpu:7"] and state["last_sentinel"]["events"] == 7
    assert state["ok"] is True


def test_status_sums_coverage_up_on_a_many_core_host(tmp_path: Path) -> None:
    """Beyond 32 units status prints one line with the totals and the least screened units, not 128 rows."""
    db = str(tmp_path / "h.sqlite3")
    report = make_report(fail_unit=None, run_id="r1", ended_at=iso_utc(time.time() - 600))
    template = report["units"][0]
    report["units"] = [{**template, "id": f"cpu:{i}"} for i in range(40)]
    report["units"][17]["throughput"] = {}
    publish(report, Outputs(history=db))
    human = _invoke(status_cmd, "--history", db, env={"COLUMNS": "200"})
    assert (
        "Screened in the last 24 h: 40 units, 320 cases, 1m 18s in all; least screened: cpu:17 (0.0 s)"
        in (human.stderr)
    ), human.stderr
