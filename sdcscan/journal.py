"""The journal: an append-only JSON-lines file of every outcome as it arrives.

If the parent is killed outright, the journal still holds every finished case, and
`sdcscan report --from-journal` can rebuild a report from it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from sdcscan.errors import ReportError, RunError
from sdcscan.files import parse_json


class Journal:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._f = None
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._f = open(path, "w", encoding="utf-8")  # noqa: SIM115 - one journal per run, kept open
            except OSError as err:
                raise RunError(f"cannot open journal {path}: {err.strerror or err}") from None

    def write(self, record: dict[str, Any]) -> None:
        """Append one record and flush it to the kernel: it survives a SIGKILL of this process."""
        if self._f is None:
            return
        try:
            self._f.write(json.dumps({**record, "t": round(time.time(), 3)}, allow_nan=True) + "\n")
            self._f.flush()
        except OSError:
            # A full disk must not kill the run: the results are still in memory for the report.
            f, self._f = self._f, None
            with contextlib.suppress(OSError):  # close flushes the same unwritable buffer again
                f.close()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def read_journal(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Records of a journal, read line by line (a burn-in's journal can be large).

    A line that is not a JSON object is skipped: a torn last line (the writer was killed
    mid-write), or a line nested too deeply for the shared parser.

    Raises:
        OSError: the file cannot be opened or read.
    """
    records = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                rec = parse_json(line, what="journal record")
            except ReportError:
                continue
            if isinstance(rec, dict):
                records.append(rec)
    return records
