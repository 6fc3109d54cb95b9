"""Publishing a judged report (report file, JUnit, Prometheus, history) and the host's run lock."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest

from sdcscan.errors import ReportError, RunError, UsageError
from sdcscan.outputs.history import RunActiveError, runs
from sdcscan.outputs.publish import Outputs, ReportOnlyPrinted, check_targets, publish, run_lock
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


def test_publish_writes_the_report_first_and_says_where_the_results_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report file is written (0644). When it cannot be, the report goes to the state directory;
    failing that, the error names the journal only while it holds every case, else the printed copy."""
    report = make_report(run_id="r1")
    publish(report, Outputs(report=tmp_path / "r.json", record_history=False))
    assert json.loads((tmp_path / "r.json").read_text())["run"]["id"] == "r1"
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644
    gone = Outputs(report=tmp_path / "gone" / "r.json", junit=tmp_path / "j.xml")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    fallback = tmp_path / "state" / "sdcscan" / "fallback-reports" / "r1.json"
    with pytest.raises(ReportError, match=f"the report was written to {fallback} instead"):
        publish(report, gone)
    assert json.loads(fallback.read_text()) == report
    assert not (tmp_path / "j.xml").exists()  # nothing after a lost report: the run's own file comes first
    (tmp_path / "no-state").write_text("")  # a file where the state directory would be: unwritable
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "no-state"))
    journal = tmp_path / "r.journal.jsonl"
    journal.write_text("{}\n")
    report["run"]["journal"] = str(journal)
    with pytest.raises(ReportError, match=f"sdcscan report --from-journal {journal}"):
        publish(report, gone)
    journal.unlink()  # removed during the run: naming it would send the user to nothing
    with pytest.raises(ReportOnlyPrinted, match=r"the report this command prints on stdout is the only copy"):
        publish(report, gone)


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


@pytest.mark.parametrize("option", ["--out", "--junit", "--prom"])
def test_check_targets_refuses_a_device_or_fifo_naming_the_option(tmp_path: Path, option: str) -> None:
    """Every output path is checked before the run: exit 2, `OPTION PATH: why`."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    field = {"--out": "report", "--junit": "junit", "--prom": "prom"}[option]
    for path, why in ((fifo, "is a FIFO"), (Path(os.devnull), "is a character device")):
        outputs = Outputs(**{field: path}, record_history=False)
        with pytest.raises(UsageError, match=rf"^{option} {path}: {why}"):
            check_targets(outputs)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_check_targets_checks_the_history_only_when_recording(tmp_path: Path) -> None:
    """A damaged history is exit 2 before the run when the run is to be recorded, ignored with --no-history."""
    db = tmp_path / "h.sqlite3"
    db.write_bytes(b"")
    good = Outputs(report=tmp_path / "r.json", junit=tmp_path / "j.xml", prom=tmp_path / "m.prom", history=db)
    with pytest.raises(UsageError, match=rf"history {db} is an empty file"):
        check_targets(good)
    check_targets(dataclasses.replace(good, record_history=False))
    db.unlink()
    check_targets(good)  # no database yet: the first run creates it
    assert not db.exists() and os.listdir(tmp_path) == []


def test_an_unusable_lock_with_no_history_is_only_a_note(tmp_path: Path) -> None:
    """--no-history runs on without the lock when the lock file is refused (a symlink here); never followed."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "run.lock").symlink_to(tmp_path / "victim")
    db = str(state / "h.sqlite3")
    with run_lock(Outputs(history=db, record_history=False)) as note:
        assert note and "without the run lock" in note and "symbolic link" in note
    with pytest.raises(RunError, match="symbolic link"), run_lock(Outputs(history=db)):
        pass  # pragma: no cover
    assert not (tmp_path / "victim").exists()
