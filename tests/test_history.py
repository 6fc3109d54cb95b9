"""History: every run recorded newest first, sticky failures until cleared, one run at a time."""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdcscan.errors import RunError, UsageError
from sdcscan.files import FILE_MODE
from sdcscan.outputs.history import (
    RunActiveError,
    check_health,
    clear,
    default_history_path,
    flagged,
    record_run,
    run_lock,
    runs,
    status,
)
from tests.helpers.cli import child_env
from tests.helpers.reports import make_report


def _record(db: Path, n: int, *, fail_unit: str | None) -> None:
    report = make_report(fail_unit=fail_unit, run_id=f"run-{n}", ended_at=f"2025-01-0{n}T00:01:00Z")
    record_run(db, report, f"reports/run-{n}.json")


def test_failure_is_sticky_until_cleared_with_a_reason(tmp_path: Path) -> None:
    """A unit that failed stays flagged through later passing runs until cleared; the clear is recorded."""
    db = tmp_path / "h.sqlite3"
    _record(db, 1, fail_unit="cpu:1")
    _record(db, 2, fail_unit=None)
    assert [f["unit"] for f in flagged(db)] == ["cpu:1"]
    assert flagged(db)[0]["run_id"] == "run-1"
    cleared = clear(db, "cpu:1", "replaced")
    assert [(c["unit"], c["clear_reason"]) for c in cleared] == [("cpu:1", "replaced")]
    assert cleared[0]["cleared_at"] and cleared[0]["cleared_by"]
    assert flagged(db) == []
    assert status(db)["cleared"][0]["clear_reason"] == "replaced"


def test_repeat_failures_count_on_one_flag_and_fail_again_after_clear(tmp_path: Path) -> None:
    """Failing again while flagged counts on the open flag; failing after a clear opens a new flag."""
    db = tmp_path / "h.sqlite3"
    _record(db, 1, fail_unit="cpu:1")
    _record(db, 2, fail_unit="cpu:1")
    assert [(f["failures"], f["last_run_id"]) for f in flagged(db)] == [(2, "run-2")]
    clear(db, "cpu:1", "reseated")
    _record(db, 3, fail_unit="cpu:1")
    assert [f["run_id"] for f in flagged(db)] == ["run-3"]


def test_history_is_newest_first_and_filters_by_unit(tmp_path: Path) -> None:
    """runs() lists newest first with per-unit verdicts; --unit keeps only that unit's rows."""
    db = tmp_path / "h.sqlite3"
    for n in (1, 2, 3):
        _record(db, n, fail_unit="cpu:1" if n == 2 else None)
    listed = runs(db)
    assert [r["run_id"] for r in listed] == ["run-3", "run-2", "run-1"]
    assert listed[1]["verdict"] == "fail"
    assert listed[1]["report_path"] == "reports/run-2.json"
    assert {u["unit"]: u["verdict"] for u in listed[1]["units"]} == {"cpu:0": "pass", "cpu:1": "fail"}
    only = runs(db, unit="cpu:1", limit=2)
    assert [r["run_id"] for r in only] == ["run-3", "run-2"]
    assert all([u["unit"] for u in r["units"]] == ["cpu:1"] for r in only)


def test_recording_the_same_run_twice_changes_nothing(tmp_path: Path) -> None:
    """record_run is idempotent on the run id."""
    db = tmp_path / "h.sqlite3"
    _record(db, 1, fail_unit="cpu:1")
    _record(db, 1, fail_unit="cpu:1")
    assert len(runs(db)) == 1
    assert flagged(db)[0]["failures"] == 1


def test_clear_needs_a_reason_and_a_flagged_unit(tmp_path: Path) -> None:
    """Clearing without a reason, or a unit that is not flagged, is a usage error naming what is flagged."""
    db = tmp_path / "h.sqlite3"
    _record(db, 1, fail_unit="cpu:1")
    with pytest.raises(UsageError, match="needs a reason"):
        clear(db, "cpu:1", "  ")
    with pytest.raises(UsageError, match=r"cpu:0 is not flagged \(flagged units: cpu:1\)"):
        clear(db, "cpu:0", "x")


def test_no_database_yet_means_nothing_recorded(tmp_path: Path) -> None:
    """Reading a history that does not exist yet is empty, not an error, and creates nothing."""
    db = tmp_path / "none.sqlite3"
    assert runs(db) == [] and flagged(db) == [] and status(db)["last_run"] is None
    assert not db.exists()


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    """A foreign file at the history path gives a one-line RunError when a run records into it."""
    db = tmp_path / "h.sqlite3"
    db.write_text("this is not sqlite " * 100)
    with pytest.raises(RunError, match="is it an sdcscan history database"):
        _record(db, 1, fail_unit=None)


def test_database_uses_a_rollback_journal_and_converts_an_old_wal_one(tmp_path: Path) -> None:
    """A WAL database needs its readers to write `-shm`; a rollback journal lets read-only users read."""
    db = tmp_path / "h.sqlite3"
    _record(db, 1, fail_unit=None)
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")  # as an older sdcscan left it
    conn.close()
    _record(db, 2, fail_unit=None)
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert [r["run_id"] for r in runs(db)] == ["run-2", "run-1"]


def test_second_run_lock_is_refused_naming_the_other_process(tmp_path: Path) -> None:
    """While another process holds the lock a run is refused at once, naming its pid."""
    state = tmp_path / "state"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(state)],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with (
            pytest.raises(
                RunActiveError,
                match=rf"another sdcscan run is active \(pid {holder.pid} '-c [^']*', since \d{{4}}-",
            ),
            run_lock(state),
        ):
            pass  # pragma: no cover
    finally:
        holder.communicate("done\n", timeout=10)
    with run_lock(state), pytest.raises(RunActiveError), run_lock(state):  # nor twice in one process
        pass  # pragma: no cover


_HOLD_LOCK = """
import sys
from sdcscan.outputs.history import run_lock
with run_lock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_default_path_follows_xdg_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$XDG_STATE_HOME/sdcscan/history.sqlite3, else ~/.local/state/sdcscan/."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_history_path() == tmp_path / "sdcscan" / "history.sqlite3"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_history_path() == tmp_path / "home/.local/state/sdcscan/history.sqlite3"


# Issue 15: the history's health is checked before a run, readers never write, the lock cannot be held
# hostage, and a full state disk is one RunError.


def _damaged_db(path: Path) -> None:
    """A history whose header is fine but whose table pages are garbage: only quick_check notices."""
    for n in range(1, 4):
        _record(path, n, fail_unit="cpu:1")
    data = bytearray(path.read_bytes())
    page = 4096
    for start in range(page, len(data), page):  # every page but the first (the header and the schema)
        data[start + 8 : start + 200] = b"\xff" * 192
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("empty", "is an empty file (0 bytes), not an sdcscan history: if it held one, its runs and sticky "
         "flags are gone; to start a new history there, delete the file first (sdcscan creates it)"),
        ("text", "file is not a database"),
        ("foreign", "is an SQLite database but not an sdcscan history"),
        ("newer", "has version 3; this sdcscan reads version 2"),
        ("damaged", "is damaged (SQLite quick_check: "),
        ("directory", "is not a regular file"),
    ],
)  # fmt: skip
def test_check_health_refuses_a_bad_history_naming_it(tmp_path: Path, kind: str, reason: str) -> None:
    """Before a run: exit 2 naming the file, instead of a pass report and exit 3 after the whole budget."""
    db = tmp_path / "h.sqlite3"
    if kind == "empty":
        db.write_bytes(b"")
    elif kind == "text":
        db.write_text("this is not sqlite " * 100)
    elif kind == "directory":
        db.mkdir()
    elif kind == "damaged":
        _damaged_db(db)
    else:
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE other (x)")
        if kind == "newer":
            _record(tmp_path / "ours.sqlite3", 1, fail_unit=None)
            conn.close()
            db.unlink()
            (tmp_path / "ours.sqlite3").rename(db)
            conn = sqlite3.connect(db)
            conn.execute("PRAGMA user_version=3")
        conn.commit()
        conn.close()
    with pytest.raises(UsageError) as err:
        check_health(db)
    assert str(db) in str(err.value) and reason in str(err.value) and "\n" not in str(err.value)


def test_check_health_accepts_a_good_or_missing_history_and_creates_nothing(tmp_path: Path) -> None:
    """A missing database is the first run's; a good one passes. Neither is written by the check."""
    db = tmp_path / "state" / "h.sqlite3"
    check_health(db)
    assert not (tmp_path / "state").exists()
    _record(db, 1, fail_unit="cpu:1")
    before = (db.read_bytes(), db.stat().st_mtime_ns)
    check_health(db)
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before


def test_an_emptied_history_is_refused_everywhere_and_never_recreated(tmp_path: Path) -> None:
    """Emptying the file used to drop every sticky flag in silence: `status` said nothing was flagged."""
    db = tmp_path / "h.sqlite3"
    _record(db, 1, fail_unit="cpu:1")
    db.write_bytes(b"")
    for read in (status, flagged, runs, lambda p: clear(p, "cpu:1", "x")):
        with pytest.raises(UsageError, match="is an empty file"):
            read(db)
    with pytest.raises(RunError, match=r"is an empty file \(0 bytes\)"):
        _record(db, 2, fail_unit=None)
    assert db.stat().st_size == 0


def test_readers_never_write_and_read_a_read_only_file(tmp_path: Path) -> None:
    """status, history and flagged open the database with mode=ro: same bytes, same mtime, no side files."""
    db = tmp_path / "h.sqlite3"
    _record(db, 1, fail_unit="cpu:1")
    db.chmod(0o444)
    before = (db.read_bytes(), db.stat().st_mtime_ns, sorted(os.listdir(tmp_path)))
    assert status(db)["flagged"][0]["unit"] == "cpu:1"
    assert [r["run_id"] for r in runs(db)] == ["run-1"] and len(flagged(db)) == 1
    check_health(db)
    assert (db.read_bytes(), db.stat().st_mtime_ns, sorted(os.listdir(tmp_path))) == before


@pytest.mark.usefixtures("private_umask")
def test_a_new_history_is_0644_in_a_0700_state_directory_with_no_debris(tmp_path: Path) -> None:
    """The database has the one file mode; the state directory sdcscan creates is private."""
    db = tmp_path / "state" / "h.sqlite3"
    _record(db, 1, fail_unit=None)
    assert stat.S_IMODE(db.stat().st_mode) == FILE_MODE
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
    assert os.listdir(db.parent) == ["h.sqlite3"]


@pytest.fixture
def private_umask() -> Iterator[None]:
    old = os.umask(0o077)
    yield
    os.umask(old)


def _enospc(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["mkdir", "mkstemp", "link"])
def test_a_full_state_disk_while_creating_the_history_is_one_run_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """ENOSPC anywhere in creating the history: RunError (exit 3) naming the file, no traceback, no debris."""
    target = {"mkdir": (os, "mkdir"), "mkstemp": (tempfile, "mkstemp"), "link": (os, "link")}[where]
    monkeypatch.setattr(*target, _enospc)
    db = tmp_path / "state" / "h.sqlite3"
    with pytest.raises(RunError, match=rf"^cannot create history {db}: No space left on device$"):
        _record(db, 1, fail_unit=None)
    assert not db.exists() and not [p for p in tmp_path.rglob("*") if p.is_file()]


@pytest.mark.parametrize("where", ["mkdir", "open", "pwrite"])
def test_a_full_state_disk_while_taking_the_lock_is_one_run_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """ENOSPC creating the directory or the lock file, or writing the holder: RunError, and the lock is free."""
    monkeypatch.setattr(os, where, _enospc)
    state = tmp_path / "state"
    with pytest.raises(RunError, match=r"the run lock .*: No space left on device$"), run_lock(state):
        pass  # pragma: no cover
    monkeypatch.undo()
    with run_lock(state):  # nothing left held
        pass


def test_the_lock_file_is_0600_and_holds_pid_time_and_command(tmp_path: Path) -> None:
    """Nobody else can open it (flock works on read-only descriptors); its text names the holder."""
    with run_lock(tmp_path) as path:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        pid, since, command = path.read_text().strip().split(" ", 2)
        assert pid == str(os.getpid()) and since.endswith("Z") and command
    assert path.read_text() == ""


@pytest.mark.parametrize("kind", ["symlink", "dangling symlink", "other owner", "directory"])
def test_a_lock_file_someone_else_could_hold_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A symlinked run.lock is never followed or truncated; another user's or an open one is refused."""
    lock = tmp_path / "run.lock"
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    if kind == "symlink":
        lock.symlink_to(victim)
    elif kind == "dangling symlink":
        lock.symlink_to(tmp_path / "nothing")
    elif kind == "directory":
        lock.mkdir()
    else:
        lock.write_text("")
        lock.chmod(0o600)
        if kind == "other owner":  # pretend this process runs as another user than the file's owner
            monkeypatch.setattr(os, "geteuid", lambda: lock.stat().st_uid + 1)
    why = {
        "symlink": "it is a symbolic link, never followed",
        "dangling symlink": "it is a symbolic link, never followed",
        "other owner": "it belongs to uid",
        "directory": "Is a directory",
    }[kind]
    with pytest.raises(RunError, match=rf"the run lock {lock}: .*{why}"), run_lock(tmp_path):
        pass  # pragma: no cover
    assert victim.read_text() == "precious\n" and not (tmp_path / "nothing").exists()


def test_our_own_lock_left_0644_by_an_older_sdcscan_is_tightened_not_refused(tmp_path: Path) -> None:
    """Every host that ran the old version has a 0644 run.lock: an upgrade must not stop them screening."""
    lock = tmp_path / "run.lock"
    lock.write_text("")
    lock.chmod(0o644)
    with run_lock(tmp_path) as path:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def _nobody_runs(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run Python `code` as the unprivileged user 65534 (nobody), with this checkout importable."""
    env = child_env()
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, cwd="/")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A 0755 directory another user can reach (pytest's tmp_path is private to root), removed after."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to act as another user")
    if _nobody_runs("import sdcscan").returncode != 0:
        pytest.skip("the unprivileged user cannot import this checkout")
    path = Path(tempfile.mkdtemp(prefix="sdcscan-shared-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_another_user_reads_roots_history_but_cannot_open_its_lock(shared_dir: Path) -> None:
    """Non-root `status`/`history` on root's 0644 history works (it failed: readonly database), and that
    user cannot open run.lock to hold it hostage (finding 6: `flock -n run.lock sleep infinity`)."""
    db = shared_dir / "history.sqlite3"
    _record(db, 1, fail_unit="cpu:1")
    with run_lock(shared_dir) as lock:
        pass
    read = _nobody_runs(
        "import sys; from sdcscan.outputs.history import status, runs;"
        "s = status(sys.argv[1]); print(s['flagged'][0]['unit'], len(runs(sys.argv[1])))",
        str(db),
    )
    assert read.returncode == 0 and read.stdout.split() == ["cpu:1", "1"], read.stderr
    hostage = _nobody_runs("import os, sys; os.open(sys.argv[1], os.O_RDONLY)", str(lock))
    assert hostage.returncode != 0 and "PermissionError" in hostage.stderr
