"""Files other programs read: one atomic writer and one bounded JSON reader for every sdcscan file.

Writing: reports, goldens, calibration tables, JUnit XML and Prometheus textfiles all go through
`write_text_atomic` (or `write_json_atomic`, which serializes and calls the same code): a temporary
file in the target's directory (created by `mkstemp`, i.e. O_CREAT|O_EXCL|O_NOFOLLOW: never an
existing file, never through a planted symlink), write, flush, fsync, chmod, then `os.replace` over
the target. A reader (node_exporter, a CI agent, `sdcscan compare`) sees the old file or the new one,
never half a file, and a crash or full disk leaves the old file and no temporary file behind.

Targets are regular files only: a rename over `/dev/null` would replace the device node with a
regular file and break the host, and a rename over a symlink or FIFO is never what was meant. The
writer refuses an existing target that is not a regular file, or is a symlink (`ReportError`);
commands call `check_output_target` first to refuse it, an empty path or a missing directory with
exit 2 before any work (`UsageError`).

File mode: every file sdcscan writes - reports, JUnit, Prometheus, goldens, calibration tables,
the journal and the history database - is 0644 (`FILE_MODE`), whatever the umask. node_exporter
and CI agents usually run as another user than the root cron job or systemd unit that runs sdcscan,
and `mkstemp`'s 0600 would hide the results from them. Nothing sdcscan writes holds a secret (host
names, device models, digests, verdicts); whoever must keep them private should restrict the
directory, which is where access control belongs for files that are replaced by rename. The state
directory sdcscan creates itself (`make_state_dir`) is 0700; only the run lock is 0600 (see
`sdcscan.outputs.history.run_lock`).

Reading: `read_json` is the one reader of JSON files a person names (reports, goldens, calibration
tables); journals are opened by the same `open_regular` and their lines go through its parser
`parse_json`. Every refusal is a `JSONFileError` (a `ReportError`) with one line: missing or
unreadable, a directory or anything else that is not a regular file (a FIFO would block forever,
`/dev/zero` never ends, so pipes, devices and sockets are refused without reading), too large, not
UTF-8, not JSON, a number too long, or nested too deeply. Size is bounded by `max_bytes` (checked
while reading, so a file that grows while it is read cannot exceed it either); depth is bounded by
the interpreter's recursion limit (about 1000 levels, far beyond the 6 levels of a report), whose
RecursionError becomes "nested too deeply"; integers by Python's limit on integer digits (4300).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, BinaryIO

from sdcscan.errors import ReportError, UsageError

FILE_MODE = 0o644  # see the module docstring: readable by node_exporter and CI agents
STATE_DIR_MODE = 0o700  # a state directory sdcscan creates: only its user reaches the lock and the history
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
        ReportError: the target is not a regular file or is a symlink, the directory is missing or
            unwritable, or the disk is full.
    """
    _write_atomic(Path(path), lambda f: f.write(text))


def write_json_atomic(path: str | os.PathLike[str], data: object, *, indent: int | None = None) -> None:
    """Write `data` as one JSON document and a newline to `path` atomically, mode FILE_MODE.

    Args:
        path: the target file; its directory must exist.
        data: JSON-serializable; NaN and infinities are refused (they are not JSON).
        indent: None writes compactly, without spaces after separators (a burn-in report holds
            millions of per-case values); a number pretty-prints for files people edit.

    Raises:
        ReportError: the file could not be written (see `write_text_atomic`), or `data` holds NaN
            or an infinity.
    """
    separators = (",", ":") if indent is None else None

    def dump(f: IO[str]) -> None:
        # json.dump streams chunks: a large report is never held twice in memory as a string.
        json.dump(data, f, indent=indent, separators=separators, allow_nan=False)
        f.write("\n")

    _write_atomic(Path(path), dump)


def _write_atomic(target: Path, write: Callable[[IO[str]], object]) -> None:
    """The one atomic write: temp file beside the target, write, flush, fsync, chmod, rename.

    Raises:
        ReportError: the target must not be replaced (see `replace_problem`), or writing failed.
    """
    problem = replace_problem(target)
    if problem:  # checked again here: not every caller ran check_output_target, and a rename is final
        raise ReportError(f"cannot write {target}: {problem}")
    try:
        # mkstemp opens O_CREAT|O_EXCL|O_NOFOLLOW: a name planted in the directory is never reused.
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as err:
        raise ReportError(f"cannot write {target}: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before the rename makes it visible
            os.fchmod(f.fileno(), FILE_MODE)
        os.replace(tmp, target)
    except (OSError, ValueError) as err:  # ValueError: json refuses NaN
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ReportError(f"cannot write {target}: {getattr(err, 'strerror', None) or err}") from None


def replace_problem(path: str | os.PathLike[str]) -> str | None:
    """Why an existing `path` must not be replaced by a written file, or None (absent, or a regular file).

    A symlink is refused rather than replaced: whoever pointed it somewhere meant that file, and
    writing through it is how another user's link turns a root run against a victim file.
    """
    try:
        st = os.lstat(path)
    except OSError:
        return None  # absent, or a directory in the way: creating the temporary file says why
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link; sdcscan writes only regular files, give the path they point to"
    if not stat.S_ISREG(st.st_mode):
        return f"is {_file_kind(st.st_mode)}, not a regular file; sdcscan writes only regular files"
    return None


def link_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a file sdcscan opens in place (and creates when missing) must not be opened through the
    symbolic link `path` is, or None (not a link, or a link sdcscan may follow).

    A link to an existing file is followed: an operator may link a shared history. Two are refused,
    since opening them creates or writes a file wherever they point, with the run's rights (root):
    a link whose target does not exist (opening it creates the target), and a link another user
    owns in a sticky, world-writable directory such as /tmp (anyone may plant one there; the kernel's
    fs.protected_symlinks refuses it too, where it is on).
    """
    try:
        st = os.lstat(path)
    except OSError:
        return None  # absent: opening it creates a regular file, not one through a link
    if not stat.S_ISLNK(st.st_mode):
        return None
    target = _link_target(path)
    if not os.path.exists(path):
        return (
            f"is a symbolic link to {target}, which does not exist; sdcscan does not create a file "
            "through a link: give the path the file should have"
        )
    directory = os.path.dirname(os.path.abspath(path))
    if _shared_sticky(directory) and st.st_uid != os.geteuid():
        return (
            f"is a symbolic link to {target} owned by another user (uid {st.st_uid}) in the "
            f"world-writable directory {directory}; give the path of the file itself"
        )
    return None


def _link_target(path: str | os.PathLike[str]) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "an unreadable target"


def _shared_sticky(directory: str) -> bool:
    """Whether anyone may create names in `directory` that only they can remove (/tmp, /var/tmp)."""
    try:
        mode = os.stat(directory).st_mode
    except OSError:
        return False
    return bool(mode & stat.S_ISVTX and mode & stat.S_IWOTH)


def check_output_target(path: str | os.PathLike[str], *, option: str) -> None:
    """Refuse, before any work, an output path that sdcscan must not or cannot write.

    Args:
        path: the target as the person gave it.
        option: how they gave it, for the message: "--out", "--junit", "--prom".

    Raises:
        UsageError: one line `OPTION PATH: why`, for an empty path or one that names a directory, an
            existing target that is not a regular file or is a symlink (a device such as /dev/null, a
            FIFO, a socket), or a directory that is missing or not writable.
    """
    if str(path) == "":
        raise UsageError(f"{option}: the path is empty; give a file path")
    target = Path(path)
    if target.name in ("", ".", ".."):  # Path("") is "."
        raise UsageError(f"{option} {target}: is empty or names a directory; give a file path")
    problem = replace_problem(target)
    if problem:
        raise UsageError(f"{option} {target}: {problem}")
    directory = target.parent
    if not os.path.isdir(directory):
        raise UsageError(f"{option} {target}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {target}: the directory {directory} is not writable")


def default_state_dir() -> Path:
    """`$XDG_STATE_HOME/sdcscan`, else `~/.local/state/sdcscan` (the XDG base-directory default).

    sdcscan creates it, and any missing parent, 0700 (`make_state_dir`).
    """
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "sdcscan"


def calibration_cache_dir() -> Path:
    """Where gemm_fp's self-calibrations are cached, one file per fingerprint and shape."""
    return default_state_dir() / "calibration"


def make_state_dir(path: str | os.PathLike[str]) -> None:
    """Create the directory `path`, and its missing parents, for sdcscan's own state, mode 0700.

    Only the directories this call creates get STATE_DIR_MODE (whatever the umask); an existing
    directory, such as one an operator made for a shared history, is left as it is.

    Raises:
        OSError: a directory could not be created (read-only or full filesystem, permissions).
    """
    missing: list[Path] = []
    current = Path(path)
    while not os.path.isdir(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, STATE_DIR_MODE)
        except FileExistsError:
            continue  # another process made it first: theirs, not ours to chmod
        os.chmod(directory, STATE_DIR_MODE)


def read_json(
    path: str | os.PathLike[str], *, what: str = "report", max_bytes: int = MAX_JSON_BYTES
) -> object:
    """Read and parse one JSON file of at most `max_bytes`.

    Args:
        path: the file; a regular file (or a symlink to one), never a pipe, device or socket.
        what: what the file should be, for messages: "report", "golden", "calibration table".
        max_bytes: refuse larger files without parsing them.

    Returns:
        The parsed document (any JSON value; the caller checks its structure).

    Raises:
        JSONFileError: one line `path: reason`, for a missing or unreadable file, a directory or
            anything else that is not a regular file, a file over `max_bytes`, text that is not
            UTF-8, not JSON, holds a number too long, or is nested too deeply.
    """
    return parse_json(read_bounded(path, what=what, max_bytes=max_bytes), what=what, label=str(path))


def read_bounded(
    path: str | os.PathLike[str], *, what: str = "report", max_bytes: int = MAX_JSON_BYTES
) -> bytes:
    """The raw bytes of a file a person names, bounded: the one reader of reports, goldens, calibration
    tables and profiles (`read_json` parses JSON; callers that also hash the bytes use this directly).

    Raises:
        JSONFileError: missing or unreadable, not a regular file, or larger than `max_bytes`.
    """
    label = str(path)
    with open_regular(path, what=what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise _too_large(label, size, what, max_bytes)
        try:
            raw = f.read(max_bytes + 1)  # also bounds a file that grows while we read it
        except OSError as err:
            raise JSONFileError(label, f"cannot read {what}: {err.strerror or err}") from None
    if len(raw) > max_bytes:
        raise _too_large(label, None, what, max_bytes)
    return raw


def open_regular(path: str | os.PathLike[str], *, what: str) -> BinaryIO:
    """Open `path` for reading in binary mode if it is a regular file (symlinks to one are followed).

    Anything else is refused without reading it: a FIFO blocks until someone writes, `/dev/zero`
    never ends, opening a terminal could make it the controlling one. The type is checked before
    opening, and again on the open descriptor in case the path was swapped in between; O_NONBLOCK
    keeps that open from hanging on a FIFO (it changes nothing for a regular file).

    Raises:
        JSONFileError: missing or unreadable, a directory, or another kind of file.
    """
    label = str(path)
    try:
        _refuse_irregular(label, os.stat(path).st_mode, what)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as err:
        raise JSONFileError(label, f"cannot read {what}: {err.strerror or err}") from None
    try:
        _refuse_irregular(label, os.fstat(fd).st_mode, what)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _refuse_irregular(label: str, mode: int, what: str) -> None:
    if stat.S_ISDIR(mode):
        raise JSONFileError(label, f"is a directory, not a regular file (a {what} is read from a file)")
    if not stat.S_ISREG(mode):
        raise JSONFileError(
            label, f"is {_file_kind(mode)}, not a regular file (a {what} is read from a file)"
        )


def _file_kind(mode: int) -> str:
    """What kind of file `mode` is, in words, for messages."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISREG, "a regular file"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


def _too_large(label: str, size: int | None, what: str, max_bytes: int) -> JSONFileError:
    amount = f"{size} bytes" if size is not None else f"more than {max_bytes} bytes"
    return JSONFileError(label, f"{amount} is too large for a {what} (the limit is {max_bytes} bytes)")


def parse_json(raw: bytes | str, *, what: str = "report", label: str = "") -> object:
    """Parse one JSON document; errors name `label` (a path) when given.

    Raises:
        JSONFileError: not UTF-8, not JSON (empty and truncated documents included), a number too
            long (Python refuses integers of more than `sys.get_int_max_str_digits()` digits), or
            nested too deeply.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        return json.loads(text)
    except UnicodeDecodeError:
        raise JSONFileError(label, "not UTF-8 JSON text") from None
    except json.JSONDecodeError:
        raise JSONFileError(label, "truncated or not JSON") from None
    except ValueError:  # after its subclasses above: only the integer-digits limit is left
        limit = sys.get_int_max_str_digits()
        raise JSONFileError(label, f"holds a number too long to be a {what} (over {limit} digits)") from None
    except RecursionError:
        raise JSONFileError(label, f"nested too deeply to be a {what}") from None
