"""The one atomic writer and the one bounded JSON reader: modes, atomicity, and one clear line per bad file."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from sdcscan import files
from sdcscan.errors import ReportError
from sdcscan.files import (
    FILE_MODE,
    JSONFileError,
    parse_json,
    read_bounded,
    read_json,
    write_json_atomic,
    write_text_atomic,
)


@pytest.fixture
def private_umask() -> Any:
    """A umask of 077, as a hardened root cron job has: the written mode must not depend on it."""
    old = os.umask(0o077)
    yield
    os.umask(old)


@pytest.mark.usefixtures("private_umask")
@pytest.mark.parametrize("writer", ["text", "json"])
def test_every_file_is_written_0644_whatever_the_umask(tmp_path: Path, writer: str) -> None:
    """Reports and text outputs alike end up 0644, so node_exporter and CI agents can read them."""
    path = tmp_path / "out"
    if writer == "text":
        write_text_atomic(path, "x\n")
    else:
        write_json_atomic(path, {"a": 1})
    assert FILE_MODE == 0o644
    assert os.stat(path).st_mode & 0o777 == 0o644


def test_json_is_compact_by_default_and_indented_on_request(tmp_path: Path) -> None:
    """Compact for large reports, indented for files people edit; one document and a newline either way."""
    path = tmp_path / "r.json"
    write_json_atomic(path, {"a": [1, 2]})
    assert path.read_text() == '{"a":[1,2]}\n'
    write_json_atomic(path, {"a": [1, 2]}, indent=2)
    assert path.read_text() == json.dumps({"a": [1, 2]}, indent=2) + "\n"


def test_a_write_replaces_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    """The new content replaces the old; the directory holds only the target afterwards."""
    path = tmp_path / "sdcscan.prom"
    path.write_text("old\n")
    write_text_atomic(path, "new\n")
    assert path.read_text() == "new\n" and os.listdir(tmp_path) == ["sdcscan.prom"]


def test_the_data_is_fsynced_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fsync runs on the temporary file while the target still holds the old content."""
    path = tmp_path / "r.json"
    path.write_text("old")
    seen: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        seen.append(path.read_text())  # the rename has not happened yet
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    write_json_atomic(path, {"a": 1})
    assert seen == ["old"] and json.loads(path.read_text()) == {"a": 1}


@pytest.mark.parametrize("failure", ["fsync", "rename", "nan"])
def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """A full disk, a failed rename or unserializable data: ReportError, old file intact, no debris."""

    def enospc(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    path = tmp_path / "r.json"
    path.write_text("old")
    data: Any = {"a": 1}
    if failure == "fsync":
        monkeypatch.setattr(os, "fsync", enospc)
    elif failure == "rename":
        monkeypatch.setattr(os, "replace", enospc)
    else:
        data = {"a": float("nan")}  # not JSON: json refuses it rather than write `NaN`
    with pytest.raises(ReportError, match=r"^cannot write .*r\.json: "):
        write_json_atomic(path, data)
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["r.json"]


def test_a_missing_directory_is_one_clear_error(tmp_path: Path) -> None:
    """The directory must exist: ReportError naming the target, not a traceback."""
    with pytest.raises(ReportError, match=r"cannot write .*nope"):
        write_text_atomic(tmp_path / "nope" / "x.xml", "<x/>")


def test_a_good_file_reads(tmp_path: Path) -> None:
    """A JSON file within the limits reads back as the document written, bytes and parsed alike."""
    path = tmp_path / "r.json"
    write_json_atomic(path, {"a": [1, {"b": "ü"}]})
    assert read_json(path) == {"a": [1, {"b": "ü"}]}
    assert read_bounded(path, max_bytes=path.stat().st_size) == path.read_bytes()


def _bad_file(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "bad.json"
    content = {
        "too-large": b"[" + b"1," * 100 + b"1]",
        "binary": b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe",
        "truncated": b'{"a": [1, 2',
        "empty": b"",
        "deep": b"[" * 100000 + b"]" * 100000,
    }.get(kind)
    if kind == "directory":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    return path  # "missing": never created


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("missing", "cannot read golden: No such file or directory"),
        ("directory", "is a directory, not a regular file (a golden is read from a file)"),
        ("too-large", "203 bytes is too large for a golden (the limit is 100 bytes)"),
        ("binary", "not UTF-8 JSON text"),
        ("truncated", "truncated or not JSON"),
        ("empty", "truncated or not JSON"),
        ("deep", "nested too deeply to be a golden"),
    ],
)
def test_each_bad_file_is_one_line_naming_the_file_and_the_reason(
    tmp_path: Path, kind: str, reason: str
) -> None:
    """Missing, a directory, too large, not UTF-8, not JSON, too deep: a JSONFileError (a ReportError)."""
    path = _bad_file(tmp_path, kind)
    limit = 100 if kind == "too-large" else 1 << 20  # the deep file (200 kB) must pass the size check
    with pytest.raises(JSONFileError) as err:
        read_json(path, what="golden", max_bytes=limit)
    assert isinstance(err.value, ReportError)
    assert str(err.value) == f"{path}: {reason}" and err.value.reason == reason
    assert "\n" not in str(err.value)


def test_a_file_larger_than_its_stat_size_is_still_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose size stat does not tell (procfs, a file that grows while read) is refused once it
    passes the limit while reading."""
    path = tmp_path / "r.json"
    path.write_bytes(b"[" + b"0," * 100 + b"0]")
    real_fstat = os.fstat

    def fstat_saying_empty(fd: int) -> os.stat_result:
        st = list(real_fstat(fd))
        st[6] = 0  # st_size
        return os.stat_result(st)

    monkeypatch.setattr(os, "fstat", fstat_saying_empty)
    with pytest.raises(JSONFileError, match="more than 50 bytes is too large for a report"):
        read_json(path, max_bytes=50)


def _special_file(tmp_path: Path, kind: str, stack: contextlib.ExitStack) -> str:
    """A path to a file that is not a regular one; `stack` closes what it opened."""
    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo")
        return str(tmp_path / "fifo")
    if kind == "pipe":  # what `<(zcat r.json.gz)` or /dev/stdin from a pipe gives
        r, w = os.pipe()
        stack.callback(os.close, r)
        stack.callback(os.close, w)
        os.write(w, b"{}")
        return f"/dev/fd/{r}"
    if kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        stack.callback(sock.close)
        sock.bind(str(tmp_path / "sock"))
        return str(tmp_path / "sock")
    return os.devnull if kind == "null" else "/dev/zero"


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("fifo", "is a FIFO (named pipe), not a regular file"),
        ("pipe", "is a FIFO (named pipe), not a regular file"),
        ("socket", "is a socket, not a regular file"),
        ("zero", "is a character device, not a regular file"),
        ("null", "is a character device, not a regular file"),
    ],
)
def test_anything_but_a_regular_file_is_refused_without_reading(
    tmp_path: Path, kind: str, reason: str
) -> None:
    """A FIFO with no writer would block forever and /dev/zero never ends: both refused at once, one line."""
    if kind in ("zero", "null") and not os.path.exists(f"/dev/{kind}"):
        pytest.skip(f"no /dev/{kind}")
    with contextlib.ExitStack() as stack:
        path = _special_file(tmp_path, kind, stack)
        with pytest.raises(JSONFileError) as err:
            read_json(path, what="golden")
        assert err.value.reason.startswith(reason) and str(err.value).startswith(f"{path}: ")
        with pytest.raises(JSONFileError, match=re.escape(reason)):
            read_bounded(path)


def test_a_symlink_to_a_regular_file_is_read(tmp_path: Path) -> None:
    """Readers follow links (a report kept under a dated name and linked as latest.json)."""
    (tmp_path / "r.json").write_text('{"a": 1}')
    (tmp_path / "latest.json").symlink_to("r.json")
    assert read_json(tmp_path / "latest.json") == {"a": 1}


def test_a_number_too_long_is_one_clear_line(tmp_path: Path) -> None:
    """Python refuses integers of more than 4300 digits with ValueError: a JSONFileError, not a traceback."""
    path = tmp_path / "r.json"
    path.write_text('{"seed": ' + "9" * 5000 + "}")
    with pytest.raises(JSONFileError) as err:
        read_json(path)
    assert err.value.reason == "holds a number too long to be a report (over 4300 digits)"
    assert read_bounded(path) == path.read_bytes()  # the bytes alone are fine
    assert parse_json('{"seed": ' + "9" * 4000 + "}") == {"seed": int("9" * 4000)}  # within the limit


def test_parse_json_without_a_label_gives_the_reason_alone() -> None:
    """Journal lines and in-memory text: the same reasons, with no file name in front."""
    assert parse_json('{"a": 1}') == {"a": 1}
    with pytest.raises(JSONFileError) as err:
        parse_json("{", what="journal record")
    assert str(err.value) == "truncated or not JSON"


def test_the_default_bound_is_a_gibibyte() -> None:
    """The default limit matches the report limit: anything larger is not one of ours."""
    assert files.MAX_JSON_BYTES == 1 << 30


def test_a_read_error_survives_pickling() -> None:
    """A worker process can hand the error to its parent with the reason intact."""
    import pickle

    err = pickle.loads(pickle.dumps(JSONFileError("r.json", "truncated or not JSON")))
    assert (str(err), err.reason) == ("r.json: truncated or not JSON", "truncated or not JSON")
