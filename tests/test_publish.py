"""Publishing a judged report (report file, JUnit, Prometheus, history) and the host's run lock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdcscan.errors import ReportError
from sdcscan.outputs.history import RunActiveError, runs
from sdcscan.outputs.publish import Outputs, publish, run_lock
from tests.helpers.reports import make_report


def test_publish_tries_every_output_and_names_each_failure(tmp_path: Path) -> None:
    """An unwritable JUnit path is reported, and the history is recorded anyway."""
    db = tmp_path / "h.sqlite3"
    with pytest.raises(ReportError, match=r"cannot write .*nope"):
        publish(make_report(run_id="r1"), Outputs(junit=tmp_path / "nope/x.xml", history=db))
    assert [r["run_id"] for r in runs(db)] == ["r1"]


def test_no_history_records_nothing(tmp_path: Path) -> None:
    """--no-history leaves no database behind."""
    db = tmp_path / "h.sqlite3"
    publish(make_report(), Outputs(history=db, record_history=False))
    assert not db.exists()


def test_publish_writes_the_report_first_and_says_where_the_journal_is(tmp_path: Path) -> None:
    """The report file is written (0644); when it cannot be, the error names the journal to rebuild from."""
    report = make_report(run_id="r1")
    publish(report, Outputs(report=tmp_path / "r.json", record_history=False))
    assert json.loads((tmp_path / "r.json").read_text())["run"]["id"] == "r1"
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644
    report["run"]["journal"] = "r.journal.jsonl"
    with pytest.raises(ReportError, match=r"sdcscan report --from-journal r\.journal\.jsonl"):
        publish(report, Outputs(report=tmp_path / "gone" / "r.json", junit=tmp_path / "j.xml"))
    assert not (tmp_path / "j.xml").exists()  # nothing after a lost report: the run's own file comes first


def test_run_lock_refuses_a_second_run_and_tolerates_readonly_state(tmp_path: Path) -> None:
    """A second locked run is refused; with --no-history an unusable state dir only yields a note."""
    db = str(tmp_path / "state" / "h.sqlite3")
    second = Outputs(history=db, record_history=False)
    with run_lock(Outputs(history=db)) as note, pytest.raises(RunActiveError), run_lock(second):
        assert note is None
    blocker = tmp_path / "file"
    blocker.write_text("")
    with run_lock(Outputs(history=str(blocker / "sub" / "h.sqlite3"), record_history=False)) as note:
        assert note and "without the run lock" in note
