"""Files other programs read: one atomic writer and one bounded JSON reader for every sdcscan file.

Writing: reports, goldens, calibration tables, JUnit XML and Prometheus textfiles all go through
`write_text_atomic` (or `write_json_atomic`, which serializes and calls the same code): a temporary
file in the target's directory, write, flush, fsync, chmod, then `os.replace` over the target. A
reader (node_exporter, a CI agent, `sdcscan compare`) sees the old file or the new one, never half a
file, and a crash or full disk leaves the old file and no temporary file behind.

File mode: every file is written 0644 (`FILE_MODE`), whatever the umask. node_exporter and CI
agents usually run as another user than the root cron job or systemd unit that runs sdcscan, and
`mkstemp`'s 0600 would hide the results from them. Nothing sdcscan writes holds a secret (host
names, device models, digests, verdicts); whoever must keep them private should restrict the
directory, which is where access control belongs for files that are replaced by rename.

Reading: `read_json` is the one reader of JSON files a person names (reports, goldens, calibration
tables); journal lines go through its parser `parse_json`. Every refusal is a `JSONFileError` (a
`ReportError`) with one line: missing or unreadable, a directory, too large, not UTF-8, not JSON, or
nested too deeply. Size is bounded by `max_bytes` (checked while reading, so a growing file or a
pipe cannot exceed it either); depth is bounded by the interpreter's recursion limit (about 1000
levels, far beyond the 6 levels of a report), whose RecursionError becomes "nested too deeply".
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from sdcscan.errors import ReportError

FILE_MODE = 0o644  # see the module docstring: readable by node_exporter and CI agents
MAX_JSON_BYTES = 1 << 30  # default bound of read_json; callers pass a tighter one where they can


class JSONFileError(ReportError):
    """A JSON file could not be read; `reason` is the message without the file's name.

    `compare` lists skipped files as `path: reason` in a table, so it needs the reason alone.
    """

    def __init__(self, label: str, reason: str) -> None:
        super().__init__(f"{label}: {reason}" if label else reason)
        self.label = label
        self.reason = reason

    def __reduce__(self) -> tuple[type[JSONFileError], tuple[str, str]]:
        return (type(self), (self.label, self.reason))  # picklable, e.g. from a worker process


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically, mode FILE_MODE.

    Raises:
        ReportError: the directory is missing or unwritable, or the disk is full.
    """
    _write_atomic(Path(path), lambda f: f.write(text))


def write_json_atomic(path: str | os.PathLike[str], data: Any, *, indent: int | None = None) -> None:
    """Write `data` as one JSON document and a newline to `path` atomically, mode FILE_MODE.

    Args:
        path: the target file; its directory must exist.
        data: JSON-serializable; NaN and infinities are refused (they are not JSON).
        indent: None writes compactly, without spaces after separators (a burn-in report holds
            millions of per-case values); a number pretty-prints for files people edit.

    Raises:
        ReportError: the file could not be written, or `data` holds NaN or an infinity.
    """
    separators = (",", ":") if indent is None else None

    def dump(f: IO[str]) -> None:
        # json.dump streams chunks: a large report is never held twice in memory as a string.
        json.dump(data, f, indent=indent, separators=separators, allow_nan=False)
        f.write("\n")

    _write_atomic(Path(path), dump)


def _write_atomic(target: Path, write: Callable[[IO[str]], object]) -> None:
    """The one atomic write: temp file beside the target, write, flush, fsync, chmod, rename."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as err:
        raise ReportError(f"cannot write {target}: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before the rename makes it visible
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, target)
    except (OSError, ValueError) as err:  # ValueError: json refuses NaN
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ReportError(f"cannot write {target}: {getattr(err, 'strerror', None) or err}") from None


def read_json(path: str | os.PathLike[str], *, what: str = "report", max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Read and parse one JSON file of at most `max_bytes`.

    Args:
        path: the file (a pipe such as `<(zcat r.json.gz)` works too).
        what: what the file should be, for messages: "report", "golden", "calibration table".
        max_bytes: refuse larger files without parsing them.

    Returns:
        The parsed document (any JSON value; the caller checks its structure).

    Raises:
        JSONFileError: one line `path: reason`, for a missing or unreadable file, a directory, a
            file over `max_bytes`, text that is not UTF-8, not JSON, or nested too deeply.
    """
    return parse_json(read_json_bytes(path, what=what, max_bytes=max_bytes), what=what, label=str(path))


def read_json_bytes(
    path: str | os.PathLike[str], *, what: str = "report", max_bytes: int = MAX_JSON_BYTES
) -> bytes:
    """The raw bytes of a JSON file, bounded (for callers that also hash them); `read_json` parses them.

    Raises:
        JSONFileError: missing or unreadable, a directory, or larger than `max_bytes`.
    """
    label = str(path)
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISREG(st.st_mode) and st.st_size > max_bytes:
                raise _too_large(label, st.st_size, what, max_bytes)
            raw = f.read(max_bytes + 1)  # also bounds pipes and files that grow while we read
    except IsADirectoryError:
        raise JSONFileError(label, f"is a directory, not a {what} file") from None
    except OSError as err:
        raise JSONFileError(label, f"cannot read {what}: {err.strerror or err}") from None
    if len(raw) > max_bytes:
        raise _too_large(label, None, what, max_bytes)
    return raw


def _too_large(label: str, size: int | None, what: str, max_bytes: int) -> JSONFileError:
    amount = f"{size} bytes" if size is not None else f"more than {max_bytes} bytes"
    return JSONFileError(label, f"{amount} is too large for a {what} (the limit is {max_bytes} bytes)")


def parse_json(raw: bytes | str, *, what: str = "report", label: str = "") -> Any:
    """Parse one JSON document; errors name `label` (a path) when given.

    Raises:
        JSONFileError: not UTF-8, not JSON (empty and truncated documents included), or nested too deeply.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        return json.loads(text)
    except UnicodeDecodeError:
        raise JSONFileError(label, "not UTF-8 JSON text") from None
    except json.JSONDecodeError:
        raise JSONFileError(label, "truncated or not JSON") from None
    except RecursionError:
        raise JSONFileError(label, f"nested too deeply to be a {what}") from None
