"""The journal: an append-only JSON-lines file of every outcome as it arrives.

If the parent is killed outright, the journal still holds every finished case, and
`sdcscan report --from-journal` can rebuild a report from it.

Each run writes its own journal, created new (O_CREAT|O_EXCL|O_NOFOLLOW, mode FILE_MODE): an
existing file is never truncated or appended to, and a symlink planted at its name is never
followed, so another user's `ln -s /victim ...journal.jsonl` cannot make a root run write
`/victim`. The name carries the run id (`sdcscan.scan.journal_path`), so two runs never meet there.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

from sdcscan.errors import ReportError, RunError
from sdcscan.files import FILE_MODE, make_state_dir, open_regular, parse_json

# Longest journal line read back: a run record lists every unit and the host inventory (tens of kB on
# a large host), a case record its mismatches. A longer line is not one of ours and is skipped.
MAX_RECORD_BYTES = 16 << 20
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_APPEND | os.O_CLOEXEC


class Journal:
    """The run's journal file, or nothing when `path` is None. Writes go straight to the kernel."""

    def __init__(self, path: Path | None) -> None:
        """Create the journal file at `path` (and its directory, 0700, when missing).

        Raises:
            RunError: the file exists already, is a symlink, or cannot be created.
        """
        self.path = path
        self._fd: int | None = None if path is None else _create(path)
        self.failed: str | None = None  # why writing stopped (a full disk, a removed directory): what
        # the journal holds then is not every finished case, and no message may say it is

    def write(self, record: Mapping[str, object]) -> None:
        """Append one record with one unbuffered write: it survives a SIGKILL of this process."""
        if self._fd is None:
            return
        data = (json.dumps({**record, "t": round(time.time(), 3)}, allow_nan=True) + "\n").encode()
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError as err:
            # A full disk must not kill the run: the results are still in memory for the report.
            # A torn last line is skipped by read_journal.
            self.failed = err.strerror or str(err)
            self.close()

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)


def _create(path: Path) -> int:
    """A new journal file's descriptor, mode FILE_MODE whatever the umask.

    Raises:
        RunError: one line naming the file and why.
    """
    try:
        make_state_dir(path.parent)  # only the state directory's journal/ is missing; it is created 0700
        fd = os.open(path, _CREATE_FLAGS, FILE_MODE)
    except FileExistsError:  # also a symlink at that name: O_EXCL never follows one
        raise RunError(
            f"cannot create journal {path}: a file or symlink of that name exists (a journal is never reused)"
        ) from None
    except OSError as err:
        raise RunError(f"cannot create journal {path}: {err.strerror or err}") from None
    try:
        os.fchmod(fd, FILE_MODE)
    except OSError as err:
        os.close(fd)
        raise RunError(f"cannot create journal {path}: {err.strerror or err}") from None
    return fd


def read_journal(path: str | os.PathLike[str]) -> list[dict[str, object]]:
    """Records of a journal, read line by line (a burn-in's journal can be large).

    A line that is not a JSON object is skipped: a torn last line (the writer was killed
    mid-write), a line nested too deeply for the shared parser, or one over MAX_RECORD_BYTES.

    Raises:
        JSONFileError: missing or unreadable, or not a regular file (a FIFO, a device).
        OSError: reading failed part way.
    """
    records = []
    with open_regular(path, what="journal") as f:
        while line := f.readline(MAX_RECORD_BYTES + 1):
            if len(line) > MAX_RECORD_BYTES:
                while line and not line.endswith(b"\n"):  # skip the rest of the overlong line
                    line = f.readline(MAX_RECORD_BYTES)
                continue
            try:
                rec = parse_json(line.decode("utf-8", "replace"), what="journal record")
            except ReportError:
                continue
            if isinstance(rec, dict):
                records.append(rec)
    return records
