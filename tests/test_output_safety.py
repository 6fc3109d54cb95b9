"""Outputs are regular files only, never written through a symlink; each run has its own journal.

Issue 15, findings 1 and 7: `sdcscan run -o /dev/null` as root replaced /dev/null with a regular file,
and another user's symlink at the journal's name made a root run overwrite its target.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sdcscan.errors import ReportError, RunError, UsageError
from sdcscan.files import STATE_DIR_MODE, check_output_target, make_state_dir, write_text_atomic
from sdcscan.journal import Journal, read_journal
from sdcscan.judgement.rebuild import report_from_journal
from sdcscan.outputs.publish import Outputs, publish
from tests.helpers.cli import one_error_line
from tests.helpers.reports import make_report

VICTIM_TEXT = "precious\n"


@pytest.fixture
def private_umask() -> Iterator[None]:
    """A umask of 077, as a hardened root cron job has: modes must not depend on it."""
    old = os.umask(0o077)
    yield
    os.umask(old)


@contextlib.contextmanager
def special_file(tmp_path: Path, kind: str) -> Iterator[Path]:
    """A path of the given kind, which sdcscan must never replace or write through."""
    path = tmp_path / f"target-{kind}"
    with contextlib.ExitStack() as stack:
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
        elif kind == "socket":
            sock = stack.enter_context(socket.socket(socket.AF_UNIX))
            sock.bind(str(path))
        elif kind == "symlink":
            (tmp_path / "victim").write_text(VICTIM_TEXT)
            path.symlink_to(tmp_path / "victim")
        elif kind == "dangling symlink":
            path.symlink_to(tmp_path / "not-yet")
        elif kind == "char device":  # a private /dev/null (same major:minor): harmless if it were replaced
            if os.geteuid() != 0:
                pytest.skip("creating a device node needs root")
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        yield path


def assert_untouched(tmp_path: Path, kind: str, path: Path) -> None:
    """The special file is still what it was, a symlink's target still holds its text, and no debris."""
    mode = os.lstat(path).st_mode
    expected = {
        "fifo": stat.S_ISFIFO,
        "directory": stat.S_ISDIR,
        "socket": stat.S_ISSOCK,
        "symlink": stat.S_ISLNK,
        "dangling symlink": stat.S_ISLNK,
        "char device": stat.S_ISCHR,
    }[kind]
    assert expected(mode), f"{path} is no longer a {kind}"
    if kind == "symlink":
        assert (tmp_path / "victim").read_text() == VICTIM_TEXT
    if kind == "dangling symlink":
        assert not (tmp_path / "not-yet").exists()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


KINDS = ["fifo", "directory", "socket", "symlink", "dangling symlink", "char device"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_writer_never_replaces_or_follows_a_special_file(tmp_path: Path, kind: str) -> None:
    """The one atomic writer refuses a target that is not a regular file, or is a symlink, and leaves it be."""
    with special_file(tmp_path, kind) as path:
        with pytest.raises(ReportError, match=rf"^cannot write {path}: is a"):
            write_text_atomic(path, "report\n")
        assert_untouched(tmp_path, kind, path)


@pytest.mark.parametrize("kind", KINDS)
def test_publish_refuses_a_special_junit_or_prom_path(tmp_path: Path, kind: str) -> None:
    """`export --junit/--prom` and `run` write through publish: the same refusal, nothing replaced."""
    with special_file(tmp_path, kind) as path:
        with pytest.raises(ReportError, match=r"not a regular file|symbolic link"):
            publish(make_report(), Outputs(junit=path, prom=path, record_history=False))
        assert_untouched(tmp_path, kind, path)


@pytest.mark.parametrize("kind", KINDS)
def test_check_output_target_is_exit_2_naming_the_option_and_the_path(tmp_path: Path, kind: str) -> None:
    """Checked before any work: a UsageError (exit 2) `--prom PATH: is a ...`."""
    with special_file(tmp_path, kind) as path:
        with pytest.raises(UsageError, match=rf"^--prom {path}: is a") as err:
            check_output_target(path, option="--prom")
        assert err.value.exit_code == 2


def test_dev_null_is_refused_by_the_check(tmp_path: Path) -> None:
    """The real device is only examined here, never written."""
    with pytest.raises(UsageError, match=rf"^--out {os.devnull}: is a character device, not a regular file"):
        check_output_target(Path(os.devnull), option="--out")


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "--junit: the path is empty"),
        (".", "--junit .: is empty or names a directory"),
        ("missing/x.xml", "--junit {tmp}/missing/x.xml: the directory {tmp}/missing does not exist"),
        ("file/x.xml", "--junit {tmp}/file/x.xml: the directory {tmp}/file does not exist"),
    ],
)
def test_empty_paths_and_missing_directories_are_exit_2(tmp_path: Path, path: str, reason: str) -> None:
    """`-o ""` (a ValueError before) and a missing directory (exit 3 after the run before) are usage errors."""
    (tmp_path / "file").write_text("")
    target = path if path in ("", ".") else str(tmp_path / path)
    with pytest.raises(UsageError) as err:
        check_output_target(target, option="--junit")
    assert str(err.value).startswith(reason.format(tmp=tmp_path))


def test_an_unwritable_directory_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """os.access says no (root is never refused, so it is faked here)."""
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(
        UsageError, match=rf"^--out {tmp_path}/r.json: the directory {tmp_path} is not writable"
    ):
        check_output_target(tmp_path / "r.json", option="--out")


def test_a_new_or_regular_target_is_accepted_and_written(tmp_path: Path) -> None:
    """The refusals stop nothing legitimate: a new file and an existing regular file both pass and write."""
    for target in (tmp_path / "new.json", tmp_path / "old.json"):
        if target.name == "old.json":
            target.write_text("old\n")
        check_output_target(target, option="--out")
        write_text_atomic(target, "new\n")
        assert target.read_text() == "new\n"
    check_output_target("relative.json", option="--out")  # the current directory


def test_run_with_dev_null_as_out_is_exit_2_and_dev_null_stays_a_device(run_cli: Any, tmp_path: Path) -> None:
    """Finding 1, end to end: refused before any work, /dev/null still a character device, no journal in /dev."""
    before = set(os.listdir(os.path.dirname(os.devnull)))
    p = run_cli("run", "--budget", "5s", "--units", "cpu:0", "-o", os.devnull, timeout=60)
    assert p.returncode == 2, p.stderr
    assert f"--out {os.devnull}: is a character device" in one_error_line(p.stderr)
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert set(os.listdir(os.path.dirname(os.devnull))) <= before  # no null.*.journal.jsonl beside it


def test_run_with_a_fifo_output_is_exit_2_before_any_work(run_cli: Any, tmp_path: Path) -> None:
    """A FIFO as --prom (--junit is checked by the same code): exit 2 at once, the FIFO left as it is."""
    os.mkfifo(tmp_path / "out.fifo")
    p = run_cli("run", "--budget", "5s", "--units", "cpu:0", "--prom", str(tmp_path / "out.fifo"), timeout=60)
    assert p.returncode == 2, p.stderr
    assert f"--prom {tmp_path / 'out.fifo'}: is a FIFO" in one_error_line(p.stderr)
    assert stat.S_ISFIFO(os.lstat(tmp_path / "out.fifo").st_mode)


def test_run_with_an_empty_out_is_exit_2(run_cli: Any, tmp_path: Path) -> None:
    """`-o ""` raised ValueError (exit 1) after the run; now one usage line before it."""
    p = run_cli("run", "--budget", "5s", "--units", "cpu:0", "-o", "", timeout=60)
    assert p.returncode == 2, p.stderr
    assert "--out" in one_error_line(p.stderr)


# The journal: created new, never through a symlink, one per run.


def test_the_journal_beside_out_is_named_per_run(tmp_path: Path) -> None:
    """Two runs with the same --out get two journals (finding 9: they clobbered one)."""
    from sdcscan.profile import load_profile
    from sdcscan.scan import ScanOptions, journal_path

    opts = ScanOptions(profile=load_profile("quick"), outputs=Outputs(report=tmp_path / "r.json"))
    first, second = journal_path(opts, "20250101T000000Z-aaaa"), journal_path(opts, "20250101T000000Z-bbbb")
    assert first == tmp_path / "r.20250101T000000Z-aaaa.journal.jsonl"
    assert first != second and first.parent == second.parent == tmp_path


@pytest.mark.parametrize("kind", ["existing", "symlink", "dangling symlink"])
def test_the_journal_never_reuses_a_file_or_follows_a_symlink(tmp_path: Path, kind: str) -> None:
    """Another user's `ln -s /victim ...journal.jsonl` (finding 7): refused, the victim untouched."""
    path = tmp_path / "r.x.journal.jsonl"
    victim = tmp_path / "victim"
    if kind == "existing":
        path.write_text(VICTIM_TEXT)
    elif kind == "symlink":
        victim.write_text(VICTIM_TEXT)
        path.symlink_to(victim)
    else:
        path.symlink_to(victim)
    with pytest.raises(
        RunError, match=rf"cannot create journal {path}: a file or symlink of that name exists"
    ):
        Journal(path)
    if kind == "existing":
        assert path.read_text() == VICTIM_TEXT
    elif kind == "symlink":
        assert victim.read_text() == VICTIM_TEXT and path.is_symlink()
    else:
        assert not victim.exists()


@pytest.mark.usefixtures("private_umask")
def test_the_journal_is_0644_and_its_state_directory_0700(tmp_path: Path) -> None:
    """One file mode for everything sdcscan writes; the journal/ directory it creates is private."""
    path = tmp_path / "state" / "journal" / "run.jsonl"
    journal = Journal(path)
    journal.write({"type": "run"})
    journal.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == STATE_DIR_MODE
    assert stat.S_IMODE(os.stat(path.parent.parent).st_mode) == STATE_DIR_MODE
    assert [r["type"] for r in read_journal(path)] == ["run"]


def test_a_full_disk_silences_the_journal_without_stopping_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC on a write: no exception, later writes are no-ops, what was written before stays readable."""
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    journal.write({"type": "run", "n": 1})

    def enospc(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", enospc)
    journal.write({"type": "case", "n": 2})
    journal.write({"type": "case", "n": 3})
    journal.close()
    monkeypatch.undo()
    assert [r["n"] for r in read_journal(path)] == [1]


def test_a_fifo_or_device_as_journal_is_refused_without_hanging(tmp_path: Path) -> None:
    """`report --from-journal FIFO` hung; /dev/zero ran out of memory. Both are one ReportError now."""
    os.mkfifo(tmp_path / "j.fifo")
    for path in (tmp_path / "j.fifo", Path("/dev/zero")):
        with pytest.raises(ReportError, match=rf"^{path}: is a .*, not a regular file"):
            report_from_journal(path)


def test_overlong_journal_lines_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A line longer than any record is not ours: skipped whole, the records around it kept."""
    import sdcscan.journal

    monkeypatch.setattr(sdcscan.journal, "MAX_RECORD_BYTES", 64)
    path = tmp_path / "j.jsonl"
    path.write_text('{"n": 1}\n' + '{"pad": "' + "x" * 300 + '"}\n{"n": 2}\n')
    assert read_journal(path) == [{"n": 1}, {"n": 2}]


def test_make_state_dir_creates_0700_and_leaves_existing_directories_alone(tmp_path: Path) -> None:
    """Missing levels are created private whatever the umask; a directory the operator made keeps its mode."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    old = os.umask(0o022)
    try:
        make_state_dir(shared / "a" / "b")
        make_state_dir(shared)
    finally:
        os.umask(old)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    assert stat.S_IMODE((shared / "a").stat().st_mode) == STATE_DIR_MODE
    assert stat.S_IMODE((shared / "a" / "b").stat().st_mode) == STATE_DIR_MODE
