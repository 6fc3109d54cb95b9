"""Every file sdcscan reads must be a regular file: `compare --hosts` refuses a FIFO (which would wait for
a writer forever), a device or a directory at once, with exit 2 and one line, as the report readers do."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from sdcscan.errors import UsageError
from sdcscan.fleet.reading import read_hosts
from tests.helpers.cli import child_env, one_error_line, sdcscan_cmd

REPORT = Path(__file__).parent / "data" / "report_v1.json"


def test_compare_refuses_a_fifo_as_the_host_list_at_once(tmp_path: Path) -> None:
    """`compare r.json --hosts FIFO` with nobody writing to the FIFO: exit 2 in a moment, one Error line
    naming the FIFO (it used to wait forever)."""
    fifo = tmp_path / "hosts.fifo"
    os.mkfifo(fifo)
    env = {**child_env(), "XDG_STATE_HOME": str(tmp_path / "state")}
    started = time.monotonic()
    r = subprocess.run(
        sdcscan_cmd("compare", str(REPORT), "--hosts", str(fifo)),
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    line = one_error_line(r.stderr)
    assert (
        line
        == f"Error: --hosts {fifo}: is a FIFO (named pipe), not a regular file (a host list is read from a file)"
    )
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("path", "kind"),
    [("/dev/null", "a character device"), (".", "a directory")],
    ids=["device", "directory"],
)
def test_a_host_list_that_is_not_a_regular_file_is_a_usage_error(
    tmp_path: Path, path: str, kind: str
) -> None:
    """A device or a directory is refused by the same rule, without reading it."""
    target = tmp_path if path == "." else Path(path)
    with pytest.raises(UsageError, match=f"^--hosts {target}: is {kind}, not a regular file"):
        read_hosts(str(target))
