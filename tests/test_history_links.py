"""Issue 33: a history path that is a symbolic link sdcscan must not open through is refused (exit 2).

Before: `--history /tmp/h.sqlite3`, a dangling link to a file that did not exist, passed the check
before the run (nothing there to check), and at the end the run, as root, created the link's target,
wherever it pointed. A link whose target does not exist, and a link another user planted in a sticky
world-writable directory, are now refused before any work, naming the file; a link to an existing
history (an operator's shared one) still works.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sdcscan.errors import UsageError
from sdcscan.files import link_problem
from sdcscan.outputs.history import check_health, record_run, runs
from tests.helpers.cli import CPUS, child_env, sdcscan_cmd
from tests.helpers.reports import make_report


def _sticky_shared_dir(tmp_path: Path) -> Path:
    """A directory like /tmp: world-writable with the sticky bit."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


def test_a_run_given_a_dangling_history_link_in_tmp_exits_2_and_creates_nothing(tmp_path: Path) -> None:
    """The adversary's case, end to end: no work starts and the link's target is never created."""
    shared = _sticky_shared_dir(tmp_path)
    victim = tmp_path / "victim"
    link = shared / "h.sqlite3"
    link.symlink_to(victim)
    env = {**child_env(), "XDG_STATE_HOME": str(tmp_path / "state")}
    args = ["run", "--budget", "3s", "--units", f"cpu:{CPUS[0]}", "--history", str(link)]
    done = subprocess.run(sdcscan_cmd(*args), env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"history {link} is a symbolic link to {victim}, which does not exist" in done.stderr
    assert "journal:" not in done.stderr  # refused before the run started
    assert not victim.exists()


def test_a_dangling_link_is_refused_anywhere_and_never_written_through(tmp_path: Path) -> None:
    """Checked before a run (exit 2) and again when the history is written (never created)."""
    victim = tmp_path / "victim.sqlite3"
    link = tmp_path / "h.sqlite3"
    link.symlink_to(victim)
    with pytest.raises(UsageError, match="which does not exist"):
        check_health(link)
    with pytest.raises(Exception, match="which does not exist"):
        record_run(link, make_report(), None)
    assert not victim.exists()


def test_a_link_to_an_existing_history_is_followed(tmp_path: Path) -> None:
    """An operator's link to a shared history keeps working."""
    real = tmp_path / "shared.sqlite3"
    record_run(real, make_report(), None)
    link = _sticky_shared_dir(tmp_path) / "h.sqlite3"
    link.symlink_to(real)
    assert link_problem(link) is None
    check_health(link)
    record_run(link, make_report(run_id="second"), None)
    assert len(runs(real)) == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a link to another user needs root")
def test_a_link_another_user_planted_in_a_sticky_shared_directory_is_refused(tmp_path: Path) -> None:
    """Even to an existing file: anyone may plant links in /tmp, so root does not follow theirs there."""
    real = tmp_path / "shared.sqlite3"
    record_run(real, make_report(), None)
    link = _sticky_shared_dir(tmp_path) / "h.sqlite3"
    link.symlink_to(real)
    os.lchown(link, 12345, 12345)
    problem = link_problem(link)
    assert problem is not None and "owned by another user (uid 12345)" in problem
    with pytest.raises(UsageError, match="world-writable directory"):
        check_health(link)
