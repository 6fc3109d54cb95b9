"""Atomic text-file writes for outputs other programs poll (JUnit XML, Prometheus textfiles).

A reader (node_exporter, a CI agent) must never see half a file: write a temporary file in the
same directory, fsync it, then rename it over the target.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from sdcscan.errors import ReportError


def write_text_atomic(path: str | os.PathLike[str], text: str, *, mode: int = 0o644) -> None:
    """Write `text` to `path` via a temporary file in the same directory and an atomic rename.

    Args:
        path: the target file; its directory must exist.
        text: the content, written as UTF-8.
        mode: permission bits of the result. mkstemp creates 0600 files, which node_exporter
            (often running as another user) could not read, so the default is 0644.

    Raises:
        ReportError: the directory is missing or unwritable, or the disk is full.
    """
    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as err:
        raise ReportError(f"cannot write {target}: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ReportError(f"cannot write {target}: {err.strerror or err}") from None
