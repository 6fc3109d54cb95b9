"""A history another process holds locked (issue 33, item 3): every wait is bounded, the verdict stands.

Before: a history held with `BEGIN EXCLUSIVE` from an `sqlite3` shell made a run wait 30 s twice (the
journal-mode pragma, then the write), then exit 3 whatever its verdict; a SIGTERM during that wait was
acted on only when SQLite returned, and as 3, not 143. Now the writer waits at most HISTORY_WAIT_S, in
short slices that notice a signal; the run exits with its verdict and a note that the history was not
updated, and a signal ends the wait at once with 130/143. Readers (`status`, `history`) are bounded too.

Every lock here is a real one: a second SQLite connection in this process, as a shell would hold it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from sdcscan import interrupts
from sdcscan.cli import cli
from sdcscan.outputs import history_db
from sdcscan.outputs.history import HISTORY_WAIT_S, HistoryBusyError, check_health, record_run, runs, status
from sdcscan.outputs.publish import Outputs, publish
from tests.helpers.cli import CPUS, child_env, sdcscan_cmd
from tests.helpers.reports import make_report

SHORT_WAIT_S = 0.5  # the in-process tests shorten the wait; the end-to-end ones keep the real one


@contextlib.contextmanager
def held(db: Path, how: str = "EXCLUSIVE") -> Iterator[sqlite3.Connection]:
    """`db` locked by another connection, as `sqlite3 db 'BEGIN EXCLUSIVE'` leaves it, for the block.

    `how`: EXCLUSIVE (no one may read or write), or SHARED (an open read transaction: others may read,
    and a writer may begin, but not commit).
    """
    conn = sqlite3.connect(db, isolation_level=None)
    if how == "EXCLUSIVE":
        conn.execute("BEGIN EXCLUSIVE")
    else:
        conn.execute("BEGIN")
        conn.execute("SELECT count(*) FROM runs").fetchone()
    try:
        yield conn
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def a_history(tmp_path: Path) -> Path:
    """A healthy history with one earlier run, so the run under test has a file to be locked out of."""
    db = tmp_path / "h.sqlite3"
    record_run(db, make_report(run_id="earlier", fail_unit=None), None)
    return db


@pytest.fixture
def short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history_db, "HISTORY_WAIT_S", SHORT_WAIT_S)


def test_the_bound_is_a_few_seconds() -> None:
    assert 1.0 <= HISTORY_WAIT_S <= 10.0


# The library: writers and readers give up after the bounded wait, with one error that says why.


@pytest.mark.parametrize("how", ["EXCLUSIVE", "SHARED"])
def test_record_run_gives_up_after_the_bounded_wait_and_writes_nothing(tmp_path, short_wait, how) -> None:
    """EXCLUSIVE: the write cannot begin; SHARED (a reader left in a transaction): it cannot commit."""
    db = a_history(tmp_path)
    with held(db, how):
        began = time.monotonic()
        with pytest.raises(HistoryBusyError, match=rf"^history {db} is locked by another process \(waited "):
            record_run(db, make_report(run_id="locked-out"), None)
        assert time.monotonic() - began < SHORT_WAIT_S + 1.0
    assert [r["run_id"] for r in runs(db)] == ["earlier"]  # the rolled-back write left nothing


def test_a_lock_released_within_the_wait_is_waited_for(tmp_path) -> None:
    """The bounded wait still serialises with a writer that holds the file briefly."""
    db = a_history(tmp_path)
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN EXCLUSIVE")
    threading.Timer(0.5, lambda: (conn.execute("ROLLBACK"), conn.close())).start()
    record_run(db, make_report(run_id="after"), None)
    assert [r["run_id"] for r in runs(db)] == ["after", "earlier"]


def test_readers_are_bounded_and_exit_3_not_2(tmp_path, short_wait) -> None:
    """`status` and `history` on a locked file: HistoryBusyError (exit 3: nothing wrong with the file)."""
    db = a_history(tmp_path)
    with held(db):
        for read in (runs, status):
            began = time.monotonic()
            with pytest.raises(HistoryBusyError, match="is locked by another process") as err:
                read(db)
            assert err.value.exit_code == 3
            assert time.monotonic() - began < SHORT_WAIT_S + 1.0


def test_the_check_before_a_run_lets_a_locked_history_pass(tmp_path, short_wait) -> None:
    """A lock says nothing bad about the file; the run goes on and the write says if it stays locked."""
    db = a_history(tmp_path)
    with held(db):
        check_health(db)


def test_cli_status_on_a_locked_history_is_one_line_and_exit_3(tmp_path, short_wait) -> None:
    db = a_history(tmp_path)
    with held(db):
        result = CliRunner().invoke(cli, ["status", "--history", str(db)])
    assert result.exit_code == 3, result.output
    assert f"Error: history {db} is locked by another process" in result.stderr


# publish: the history is a record, not the judgement.


def test_publish_writes_every_other_output_and_notes_the_history(tmp_path, short_wait) -> None:
    db = a_history(tmp_path)
    noted: list[str] = []
    outputs = Outputs(
        report=tmp_path / "r.json",
        junit=tmp_path / "j.xml",
        prom=tmp_path / "m.prom",
        history=db,
        on_note=noted.append,
    )
    with held(db):
        notes = publish(make_report(run_id="locked-out"), outputs)
    assert notes == noted and len(notes) == 1
    assert notes[0].startswith(f"the history was not updated: history {db} is locked by another process")
    assert all((tmp_path / name).stat().st_size for name in ("r.json", "j.xml", "m.prom"))
    assert [r["run_id"] for r in runs(db)] == ["earlier"]


def test_a_signal_ends_the_wait_at_once(tmp_path, monkeypatch) -> None:
    """As in a run writing its outputs: signals only recorded (`hold`), so the wait must look for one."""
    monkeypatch.setattr(history_db, "HISTORY_WAIT_S", 30.0)
    db = a_history(tmp_path)
    with held(db), interrupts.installed():
        interrupts.hold()
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        began = time.monotonic()
        notes = publish(make_report(run_id="locked-out"), Outputs(history=db))
        took = time.monotonic() - began
        interrupts.install()  # a fresh state: no SIGTERM left received for the next test
    assert took < 1.5, took
    (waited,) = [n for n in notes if "stopped waiting after" in n]  # beside the note of the kept report
    assert "SIGTERM received" in waited


# The command in this process, with the run itself replaced (as in test_signals.py): fast.


def _judged(report: dict[str, object]):
    def run_and_judge(opts, setup, emit):
        interrupts.hold()  # as the runner does when it begins to stop
        return report

    return run_and_judge


@pytest.mark.parametrize(("fail_unit", "code", "word"), [(None, 0, "pass"), ("cpu:1", 1, "fail")])
def test_run_exits_with_its_verdict_and_says_the_history_was_not_updated(
    tmp_path, monkeypatch, short_wait, fail_unit, code, word
) -> None:
    from sdcscan import scan as library

    db = a_history(tmp_path)
    monkeypatch.setattr(library, "run_and_judge", _judged(make_report(run_id="now", fail_unit=fail_unit)))
    monkeypatch.setattr(library, "warm_up_workers", lambda: None)
    with held(db):
        result = CliRunner().invoke(
            cli, ["run", "--units", f"cpu:{CPUS[0]}", "-o", str(tmp_path / "r.json"), "--history", str(db)]
        )
    assert result.exit_code == code, result.output
    assert f"note: the history was not updated: history {db} is locked by another process" in result.stderr
    assert result.stderr.rstrip().endswith(f"exit: {word}")
    assert json.loads((tmp_path / "r.json").read_text())["run"]["id"] == "now"


# End to end: a real run in a child process, the history locked from another connection mid-run.

BUDGET_S = 8  # long enough for a loaded two-core machine to start a worker (5.2 s seen) and pass a case
STOP_S = 10.0  # after the budget: the run's own shutdown of a passing unit, and the interpreter's exit
OLD_WAIT_S = 60.0  # what the lock used to cost: two 30 s busy timeouts


def _start(tmp_path: Path, db: Path) -> tuple[subprocess.Popen[str], float]:
    env = {**child_env(), "XDG_STATE_HOME": str(tmp_path / "state")}
    args = [
        "run",
        "--budget",
        f"{BUDGET_S}s",
        "--units",
        f"cpu:{CPUS[0]}",
        "-o",
        "r.json",
        "--history",
        str(db),
    ]
    proc = subprocess.Popen(
        sdcscan_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    )
    return proc, time.monotonic()


def _wait_for(condition, proc: subprocess.Popen[str], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"never saw {what}; exit {proc.returncode}: {err}")
        time.sleep(0.02)


def _finish(proc: subprocess.Popen[str], timeout: float) -> str:
    """The child's stderr once it exits; killed, and the test failed, if it runs past `timeout`."""
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"still running {timeout:.0f} s later (the old 60 s wait?): {err}") from None
    return err


@pytest.mark.slow
def test_a_run_locked_out_of_its_history_mid_run_exits_0_in_bounded_time(tmp_path) -> None:
    db = a_history(tmp_path)
    proc, started = _start(tmp_path, db)
    _wait_for(lambda: any(tmp_path.glob("r.*.journal.jsonl")), proc, 120, "the run's journal")  # past checks
    with held(db):
        bound = BUDGET_S + STOP_S + HISTORY_WAIT_S - (time.monotonic() - started)
        err = _finish(proc, timeout=max(bound, 1.0) + 60)  # ample: the assertions below are the test
        took = time.monotonic() - started
        assert proc.returncode == 0, err
    assert took < BUDGET_S + STOP_S + HISTORY_WAIT_S + 5 < OLD_WAIT_S, (took, err)
    assert f"note: the history was not updated: history {db} is locked by another process" in err
    assert err.rstrip().endswith("exit: pass"), err
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "pass"
    assert [r["run_id"] for r in runs(db)] == ["earlier"]


@pytest.mark.slow
def test_sigterm_while_waiting_for_a_locked_history_is_143_at_once(tmp_path) -> None:
    db = a_history(tmp_path)
    proc, _ = _start(tmp_path, db)
    _wait_for(lambda: any(tmp_path.glob("r.*.journal.jsonl")), proc, 120, "the run's journal")
    with held(db):
        # The report file is written first, then the history: from here the run is in the wait.
        _wait_for((tmp_path / "r.json").exists, proc, BUDGET_S + STOP_S + 60, "the report file")
        time.sleep(0.5)
        assert proc.poll() is None, "the run ended without waiting for the locked history"
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        err = _finish(proc, timeout=30)
        took = time.monotonic() - sent
    assert proc.returncode == 143, err
    assert took < 3.0, (took, err)
    assert "stopped waiting after" in err and "SIGTERM received" in err
    assert err.rstrip().endswith("exit: interrupted"), err
