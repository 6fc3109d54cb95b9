"""A run without --out keeps its report in the state directory, and `sdcscan report` opens the newest
(issue 45: the first run left nothing to open)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sdcscan.cli import cli
from sdcscan.outputs.history import runs
from sdcscan.outputs.publish import KEPT_REPORTS, Outputs, publish
from tests.helpers.reports import make_report


def test_a_report_without_out_is_kept_beside_the_history_and_noted(tmp_path: Path) -> None:
    db = tmp_path / "state" / "history.sqlite3"
    noted: list[str] = []
    notes = publish(make_report(run_id="20261129T000000Z-aaaa"), Outputs(history=db, on_note=noted.append))
    kept = tmp_path / "state" / "reports" / "20261129T000000Z-aaaa.json"
    assert json.loads(kept.read_text())["run"]["id"] == "20261129T000000Z-aaaa"
    assert notes == noted == [f"report: {kept} (no --out was given; sdcscan report {kept})"]
    assert [r["report_path"] for r in runs(db)] == [str(kept)]


def test_only_the_newest_reports_are_kept(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite3"
    ids = [f"20261129T{i:06d}Z-abcd" for i in range(KEPT_REPORTS + 3)]
    for run_id in ids:
        publish(make_report(run_id=run_id), Outputs(history=db))
    assert sorted(p.stem for p in (tmp_path / "reports").iterdir()) == ids[3:]


def test_a_report_given_out_an_export_or_a_run_without_history_keeps_no_copy(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite3"
    publish(make_report(run_id="r1"), Outputs(report=tmp_path / "r.json", history=db))
    publish(make_report(run_id="r2"), Outputs(history=db, keep_report=False))
    publish(make_report(run_id="r3"), Outputs(history=db, record_history=False))  # --no-history
    assert not (tmp_path / "reports").exists()


def test_a_copy_that_cannot_be_kept_is_a_note_never_a_failure(tmp_path: Path) -> None:
    (tmp_path / "reports").write_text("a file where the folder belongs")
    notes = publish(make_report(run_id="r1"), Outputs(history=tmp_path / "h.sqlite3"))
    (note,) = notes
    assert note.startswith("the report was not kept (") and note.endswith("give --out FILE to keep one")
    assert [r["report_path"] for r in runs(tmp_path / "h.sqlite3")] == [None]


def test_sdcscan_report_without_a_path_opens_the_newest_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    r = CliRunner().invoke(cli, ["report"])
    assert r.exit_code == 2 and "no run has kept a report in" in r.stderr, r.stderr
    db = tmp_path / "sdcscan" / "history.sqlite3"
    publish(make_report(run_id="20261128T000000Z-aaaa", fail_unit=None), Outputs(history=db))
    publish(make_report(run_id="20261129T000000Z-bbbb", fail_unit="cpu:1"), Outputs(history=db))
    r = CliRunner().invoke(cli, ["report", "--json"])
    assert r.exit_code == 1 and json.loads(r.stdout)["run"]["id"] == "20261129T000000Z-bbbb", r.stderr
