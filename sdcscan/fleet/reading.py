"""Read many reports for `compare` and `golden record`, tolerantly, keeping only a compact extract of each.

Inputs are files, directories and globs. A directory is searched recursively for files named
`*.json` or `*.json.gz` in any case (`R.JSON`, `r.Json.GZ`); a file named on the command line is read
whatever its name. Symbolic links to directories are followed, and each real directory is walked once:
a link back to an enclosing directory is a loop, listed and not followed; a second route to a directory
already walked is listed as such. The same file reached twice under different names is read once.

Every input that is not read is listed in `skipped` with the reason, never silently dropped: dangling
symbolic links, link loops, FIFOs, devices and sockets (refused without opening them), unreadable
files and directories, files too large, gzip data that is corrupt or decompresses beyond the bound (a
gzip bomb), text that is not JSON, JSON that is not a report or of another schema, and duplicates. Files
in a directory whose names are not report names are counted in one line per directory argument. One
bad file never stops the comparison.

Memory: each file's raw JSON is dropped as soon as it is extracted, so memory grows with the number of
distinct digests, not with the bytes read. The bytes are hashed and decoded, then dropped before
parsing; a report larger than `STREAM_UNITS_ABOVE` is parsed one unit at a time (`_LargeReport`), so
its peak is about twice its size rather than the whole-document object tree (six to eight times).

Many files are read by a pool of processes (`read_reports(workers=...)`); each file is read exactly as
it would be alone, and the results come back in file order, so the outcome does not depend on the
number of workers.
"""

from __future__ import annotations

import dataclasses
import errno
import glob
import hashlib
import json
import multiprocessing
import os
import re
import signal
import stat
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sdcscan.errors import ReportError, UsageError
from sdcscan.files import JSONFileError, parse_json, read_bounded
from sdcscan.fleet.model import Extractor, HostReport, Interner, Skipped, UnitRecord
from sdcscan.report import MAX_REPORT_BYTES, printable

GLOB_CHARS = frozenset("*?[")
REPORT_SUFFIXES = (".json", ".json.gz")  # compared with the lower-cased name
GZIP_MAGIC = b"\x1f\x8b"  # gzip is recognised by its content, whatever the file is called
MAX_DECOMPRESSED_BYTES = MAX_REPORT_BYTES  # a compressed report may not unpack to more than a plain one
STREAM_UNITS_ABOVE = 32 << 20  # characters of JSON text above which a report is parsed unit by unit
POOL_MIN_FILES = 64  # fewer files are read faster in this process than by starting workers
CHUNK_FILES = 256  # most files one worker task reads: small enough to spread, large enough to amortise
MAX_HOSTS_BYTES = 64 << 20  # an inventory of a million hosts is about 20 MB
PARENT_POLL_S = 0.5  # how soon a reading worker notices that compare was killed

FileId = tuple[int, int]  # (st_dev, st_ino): one real file or directory, whatever its name


# ---------------------------------------------------------------------------------------------------
# Which files: arguments -> candidate files, and the inputs not read.


def expand_paths(args: Iterable[str]) -> tuple[list[str], list[Skipped]]:
    """Turn files, directories and globs into a sorted list of files to read.

    Returns:
        (files, skipped): each real file once; every argument or directory entry that will not be read,
        with the reason.
    """
    inputs = _Inputs()
    for arg in sorted(set(args)):  # sorted: the same arguments in any order find the same files
        inputs.add_argument(arg)
    return inputs.result()


def looks_like_report(name: str) -> bool:
    """Whether a file found in a directory is read: `*.json` or `*.json.gz`, in any case."""
    return name.lower().endswith(REPORT_SUFFIXES)


@dataclass
class _Inputs:
    """What the arguments lead to: candidate files by identity, directories walked, inputs not read."""

    spellings: dict[FileId, list[str]] = field(default_factory=dict)
    walked: dict[FileId, str] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)

    def add_argument(self, arg: str) -> None:
        """One command-line argument: a file or directory, else a glob, else nothing."""
        if os.path.lexists(arg):
            self._add_named(arg)
        elif GLOB_CHARS & set(arg):
            matches = sorted(glob.glob(arg, recursive=True))
            if not matches:
                self.skip(arg, "pattern matches no file")
            for match in matches:
                self._add_named(match)
        else:
            self.skip(arg, "no such file or directory")

    def _add_named(self, path: str) -> None:
        """A path the person named (or a glob matched): a directory is walked, anything else is read."""
        st = self._stat(path)
        if st is None:
            return
        if not stat.S_ISDIR(st.st_mode):
            self._candidate(path, st)  # a FIFO or device is refused by the reader, without opening it
            return
        key = _identity(st)
        if key in self.walked:
            if not _same_spelling(path, self.walked[key]):  # `dir` and `dir/` are one input
                self.skip(path, f"same directory as {self.walked[key]} (read once)")
            return
        self.walked[key] = path
        found, ignored = self._walk(path, key)
        if not found:
            self.skip(path, "directory holds no *.json or *.json.gz file" + _ignored_note(ignored, " ("))
        elif ignored:
            self.skip(path, _ignored_note(ignored, ""))

    def _walk(self, top: str, top_key: FileId) -> tuple[int, list[str]]:
        """Walk a directory, following links to directories; return (report files found, names ignored).

        Real sub-directories are walked first and links to directories last, so that a directory reached
        both ways is read under its own name and the link is the one listed as "same directory".
        """
        found = 0
        ignored: list[str] = []
        stack: list[tuple[str, tuple[FileId, ...]]] = [(top, (top_key,))]
        links: list[tuple[str, tuple[FileId, ...], FileId]] = []
        while stack or links:
            if not stack:
                path, ancestors, key = links.pop(0)
                if self._enter(path, ancestors, key):
                    stack.append((path, (*ancestors, key)))
                continue
            directory, ancestors = stack.pop()
            try:
                with os.scandir(directory) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as err:
                self.skip(directory, f"cannot read directory: {err.strerror or err}")
                continue
            subdirs = []
            for entry in entries:
                st = self._stat(entry.path)
                if st is None:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    key = _identity(st)
                    if entry.is_symlink():
                        links.append((entry.path, ancestors, key))
                    elif self._enter(entry.path, ancestors, key):
                        subdirs.append((entry.path, (*ancestors, key)))
                elif looks_like_report(entry.name):
                    self._candidate(entry.path, st)
                    found += 1
                else:
                    ignored.append(entry.path)
            stack.extend(reversed(subdirs))  # depth first, in name order
        return found, ignored

    def _enter(self, path: str, ancestors: tuple[FileId, ...], key: FileId) -> bool:
        """Whether to walk the directory `path` now: not when it encloses itself or was walked already."""
        if key in ancestors:
            self.skip(path, f"symbolic link loop: leads back to {self.walked[key]}")
            return False
        if key in self.walked:
            self.skip(path, f"same directory as {self.walked[key]} (read once)")
            return False
        self.walked[key] = path
        return True

    def _stat(self, path: str) -> os.stat_result | None:
        """`os.stat` (links followed), or None with the input listed as skipped."""
        try:
            return os.stat(path)
        except OSError as err:
            self.skip(path, _stat_problem(path, err))
            return None

    def _candidate(self, path: str, st: os.stat_result) -> None:
        self.spellings.setdefault(_identity(st), []).append(path)

    def skip(self, path: str, reason: str) -> None:
        self.skipped.append(Skipped(path, reason))

    def result(self) -> tuple[list[str], list[Skipped]]:
        """One spelling per real file (a plain path before one through a link); the others are listed."""
        files = []
        for names in self.spellings.values():
            distinct = sorted(set(names))
            if len(distinct) > 1:
                distinct.sort(key=lambda p: (not _is_plain_path(p), p))
                self.skipped += [Skipped(p, f"same file as {distinct[0]} (read once)") for p in distinct[1:]]
            files.append(distinct[0])
        return sorted(files), sorted(self.skipped, key=lambda s: (s.path, s.reason))


def _identity(st: os.stat_result) -> FileId:
    return (st.st_dev, st.st_ino)


def _same_spelling(a: str, b: str) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


def _is_plain_path(path: str) -> bool:
    """Whether no component of `path` is a symbolic link."""
    absolute = os.path.abspath(path)
    return os.path.realpath(absolute) == absolute


def _stat_problem(path: str, err: OSError) -> str:
    """Why a path that exists (at least as a link) cannot be followed."""
    if err.errno == errno.ELOOP:
        return "symbolic link loop (the link leads back to itself)"
    if err.errno in (errno.ENOENT, errno.ENOTDIR) and os.path.islink(path):
        try:
            target = os.readlink(path)
        except OSError:
            return "dangling symbolic link"
        return f"dangling symbolic link (to {printable(target)}, which does not exist)"
    return f"cannot read: {err.strerror or err}"


def _ignored_note(ignored: list[str], prefix: str) -> str:
    """`3 other file(s) not read: ...` for files whose names are not report names, or ''."""
    if not ignored:
        return ""
    note = (
        f"{len(ignored)} other file(s) not read: their names do not end in .json or .json.gz "
        f"(e.g. {printable(Path(ignored[0]).name)})"
    )
    return f"{prefix}{note})" if prefix else note


# ---------------------------------------------------------------------------------------------------
# One file: bytes (gunzipped, bounded) -> text -> extract.


def read_report(path: str, extractor: Extractor) -> HostReport:
    """Read, decompress if gzip, parse and extract one report file.

    Raises:
        ReportError: the file is not a usable report; the message is the reason, without the path.
    """
    try:
        raw = report_bytes(path)
        sha = hashlib.sha256(raw).hexdigest()
        text = _utf8(raw)
        del raw  # the text is all that is needed now: never hold the bytes and the parsed tree together
        if len(text) > STREAM_UNITS_ABOVE:
            return _LargeReport(text, extractor, path, sha).extract()
        data = parse_json(text, what="report")
        del text
    except JSONFileError as err:
        raise ReportError(err.reason) from None
    if isinstance(data, dict) and "golden_version" in data:
        raise ReportError("a golden file, not a report")
    return _extract(extractor, data, path, sha)


def _extract(extractor: Extractor, data: Any, path: str, sha: str) -> HostReport:
    """`Extractor.extract` with its one safety net.

    Raises:
        ReportError: validate_report refused the document, or (a bug in that check) extraction failed.
    """
    try:
        return extractor.extract(data, source=path, sha256=sha)
    except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as err:
        # validate_report checks every field the extract reads, so this is a bug in that check; one bad
        # file must still not stop the comparison of a fleet. Its content is not echoed.
        raise ReportError(f"malformed report (unexpected {type(err).__name__})") from None


def report_bytes(path: str) -> bytes:
    """The bytes of a report file, gunzipped when they are gzip data; both sizes bounded.

    Raises:
        JSONFileError: unreadable, not a regular file, too large, corrupt gzip, or a gzip bomb.
    """
    raw = read_bounded(path, what="report", max_bytes=MAX_REPORT_BYTES)
    return gunzip(raw, MAX_DECOMPRESSED_BYTES) if raw[:2] == GZIP_MAGIC else raw


def gunzip(data: bytes, limit: int) -> bytes:
    """Decompress gzip data (every member, as `gzip` does), refusing more than `limit` bytes of output.

    The output is bounded while it is produced: a small file that unpacks to terabytes (a gzip bomb)
    stops at `limit` + 1 bytes.

    Raises:
        JSONFileError: corrupt or truncated gzip data, or more than `limit` bytes once decompressed.
    """
    out = bytearray()
    rest = data
    while rest:
        unpack = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip header and trailer
        try:
            out += unpack.decompress(rest, limit + 1 - len(out))
        except zlib.error:
            raise JSONFileError("", "corrupt gzip data (not a report)") from None
        if len(out) > limit:
            raise JSONFileError(
                "", f"decompresses to more than {limit} bytes, the limit for a report (a gzip bomb?)"
            )
        if not unpack.eof:
            raise JSONFileError("", "truncated gzip data")
        rest = unpack.unused_data
        if rest[:2] != GZIP_MAGIC:
            if rest.strip(b"\0"):  # gzip tolerates zero padding after the last member, nothing else
                raise JSONFileError("", "trailing garbage after the gzip data")
            break
    return bytes(out)


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise JSONFileError("", "not UTF-8 JSON text") from None


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_UNIT_PATH = re.compile(r"^report: units\[0\]")


class _LargeReport:
    """A large report parsed one unit at a time: the object tree of one unit exists at a time, not all.

    The top-level object is walked key by key with the C decoder (`raw_decode`); the elements of
    `units` are only measured on this pass (their spans kept, their trees dropped). The other fields
    are validated and extracted with `units: []`. Then each unit is decoded again and extracted inside
    that top-level object, whose per-unit records (`findings`, `mismatches`, anything with a `unit`)
    are narrowed to this unit and host-level ones: the unit's extract sees what it would see in the
    whole document. Unit errors name `units[k]` as for the whole document. Anything that is not a plain
    object of keys goes to the whole-document parser, whose error messages are the rule.
    """

    def __init__(self, text: str, extractor: Extractor, source: str, sha: str) -> None:
        self.text, self.extractor, self.source, self.sha = text, extractor, source, sha
        self.spans: list[tuple[int, int, Any]] = []  # (start, end, the unit's id) of each element of units

    def extract(self) -> HostReport:
        """Raises: ReportError or JSONFileError, as `read_report`."""
        try:
            top = self._top_level()
        except (ValueError, IndexError, RecursionError):  # not plain JSON of the expected shape
            top = None
        if top is None:
            return self._whole()
        if "golden_version" in top:
            raise ReportError("a golden file, not a report")
        base = _extract(self.extractor, top, self.source, self.sha)  # everything but the units
        records = _UnitRecords(top)
        units = [self._unit(k, records) for k in range(len(self.spans))]
        if len({u.unit for u in units}) != len(units):
            raise ReportError("report: a unit id appears twice")  # Extractor's words for the whole document
        return dataclasses.replace(base, units=tuple(sorted(units, key=lambda u: u.unit)))

    def _whole(self) -> HostReport:
        data = parse_json(self.text, what="report")
        if isinstance(data, dict) and "golden_version" in data:
            raise ReportError("a golden file, not a report")
        return _extract(self.extractor, data, self.source, self.sha)

    def _unit(self, k: int, records: _UnitRecords) -> UnitRecord:
        """Decode, validate and extract unit number `k` in its report's context; errors name `units[k]`."""
        start, _, uid = self.spans[k]
        unit, _ = _DECODER.raw_decode(self.text, start)
        doc = records.for_unit(uid)
        doc["units"] = [unit]
        try:
            return _extract(self.extractor, doc, self.source, self.sha).units[0]
        except ReportError as err:
            raise ReportError(_UNIT_PATH.sub(f"report: units[{k}]", str(err))) from None

    def _top_level(self) -> dict[str, Any] | None:
        """The top-level object with `units: []` (their spans noted), or None to fall back."""
        text = self.text
        pos = self._skip(0)
        if text[pos] != "{":
            return None
        top: dict[str, Any] = {}
        pos = self._skip(pos + 1)
        while text[pos] == '"':
            key, pos = _DECODER.raw_decode(text, pos)  # a JSON string: text[pos] is '"'
            pos = self._skip(pos)
            if text[pos] != ":":
                return None
            pos = self._skip(pos + 1)
            if key == "units" and text[pos] == "[":
                if "units" in top:
                    return None  # the key twice: the whole-document parser says what that means
                top["units"] = []
                pos = self._measure_units(pos + 1)
            else:
                top[key], pos = _DECODER.raw_decode(text, pos)
            pos = self._skip(pos)
            if text[pos] == ",":
                pos = self._skip(pos + 1)
            elif text[pos] == "}":
                return top if self._skip(pos + 1) == len(text) else None
            else:
                return None
        return None

    def _measure_units(self, pos: int) -> int:
        """Note the span and id of each element of the array at `pos`; return the index after `]`."""
        pos = self._skip(pos)
        if self.text[pos] == "]":
            return pos + 1
        while True:
            unit, end = _DECODER.raw_decode(self.text, pos)
            self.spans.append((pos, end, unit.get("id") if isinstance(unit, dict) else None))
            del unit
            pos = self._skip(end)
            if self.text[pos] == "]":
                return pos + 1
            if self.text[pos] != ",":
                raise ValueError("not a JSON array")
            pos = self._skip(pos + 1)

    def _skip(self, pos: int) -> int:
        match = _WHITESPACE.match(self.text, pos)
        assert match is not None  # the pattern matches the empty string
        return match.end()


class _UnitRecords:
    """The top-level object of a report, with its lists of per-unit records grouped by unit once.

    A list is per-unit when its elements are objects with a `unit` key (`findings`, `mismatches`);
    elements whose `unit` is not a string (null: a host-level finding) belong to every unit.
    """

    def __init__(self, top: dict[str, Any]) -> None:
        self.top = top
        self.grouped: dict[str, tuple[list[Any], dict[str, list[tuple[int, Any]]]]] = {}
        for key, value in top.items():
            if isinstance(value, list) and any(isinstance(e, dict) and "unit" in e for e in value):
                common: list[Any] = []
                by_unit: dict[str, list[tuple[int, Any]]] = {}
                for i, e in enumerate(value):
                    owner = e.get("unit") if isinstance(e, dict) else None
                    if isinstance(owner, str):
                        by_unit.setdefault(owner, []).append((i, e))
                    else:
                        common.append((i, e))
                self.grouped[key] = (common, by_unit)

    def for_unit(self, uid: Any) -> dict[str, Any]:
        """A copy of the top-level object whose per-unit lists hold only the records of `uid`, in order."""
        doc = dict(self.top)
        for key, (common, by_unit) in self.grouped.items():
            mine = by_unit.get(uid, []) if isinstance(uid, str) else []
            doc[key] = [e for _, e in sorted([*common, *mine], key=lambda p: p[0])]
        return doc


# ---------------------------------------------------------------------------------------------------
# Many files: in this process or in a pool, in file order.


def read_reports(
    args: Iterable[str], *, workers: int | None = None
) -> tuple[list[HostReport], list[Skipped]]:
    """Read every report named by `args` (files, directories, globs).

    Args:
        args: what the person named.
        workers: processes to read with; None picks one per available CPU when there are at least
            POOL_MIN_FILES files; 1 reads in this process.

    Returns:
        (usable reports in file order, skipped inputs with reasons); duplicates are left for
        `summarize` to resolve.

    Raises:
        UsageError: nothing usable was found (exit 2), with the first reasons.
        ReportError: a worker process died (out of memory, killed): exit 3.
    """
    files, skipped = expand_paths(args)
    reports: list[HostReport] = []
    for item in _read_all(files, _worker_count(workers, len(files))):
        if isinstance(item, Skipped):
            skipped.append(item)
        else:
            reports.append(item)
    if not reports:
        first = "; ".join(printable(f"{s.path}: {s.reason}") for s in skipped[:3])
        more = f" (and {len(skipped) - 3} more)" if len(skipped) > 3 else ""
        raise UsageError(f"no usable report to compare: {first or 'no input'}{more}")
    return reports, skipped


def _worker_count(asked: int | None, files: int) -> int:
    """How many processes read `files` files: as asked, else one per CPU when there are many files."""
    if asked is not None:
        return max(1, min(asked, files))
    if files < POOL_MIN_FILES:
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, files // (POOL_MIN_FILES // 2)))


def _read_all(files: list[str], workers: int) -> Iterator[HostReport | Skipped]:
    """Each file's extract or its reason for being skipped, in the order of `files`."""
    if workers <= 1:
        yield from read_chunk(files)
        return
    size = max(1, min(CHUNK_FILES, -(-len(files) // (workers * 4))))  # a few tasks per worker
    chunks = [files[i : i + size] for i in range(0, len(files), size)]
    methods = multiprocessing.get_all_start_methods()
    # fork: the workers start at once with sdcscan already imported; the command runs no threads.
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_worker_setup)
    shared = Interner()  # each chunk comes back with its own copies; one copy per value is kept here
    try:
        for batch in pool.map(read_chunk, chunks):  # map yields in the order of `chunks`
            for item in batch:
                yield item if isinstance(item, Skipped) else _adopt(item, shared)
    except BrokenProcessPool:
        raise ReportError("a process reading reports died (out of memory? try --jobs 1)") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _worker_setup() -> None:
    """Make a reading worker quiet on Ctrl-C and mortal with its parent.

    Ctrl-C goes to the whole process group: the parent handles it (and shuts the pool down), workers
    must not print tracebacks. A parent killed outright (SIGTERM, SIGKILL) cannot shut the pool down, and
    an idle worker would wait for work forever: a watchdog thread ends the worker when its parent is gone.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)  # no cleanup to do: the worker holds nothing but the files it reads


def read_chunk(paths: list[str]) -> list[HostReport | Skipped]:
    """Read `paths` in order with one Extractor (in a worker, or in this process)."""
    extractor = Extractor()
    out: list[HostReport | Skipped] = []
    for path in paths:
        try:
            out.append(read_report(path, extractor))
        except ReportError as err:
            out.append(Skipped(path, _strip_label(str(err))))
    return out


def _adopt(report: HostReport, intern: Interner) -> HostReport:
    """`report` with its strings and tuples replaced by the fleet's shared copies (see model.Interner)."""
    units = tuple(
        dataclasses.replace(
            u,
            unit=intern(u.unit),
            cohort=intern(u.cohort),
            indices=intern(u.indices),
            digests=_shared(u.digests, intern),
            workloads=_shared(u.workloads, intern),
        )
        for u in report.units
    )
    return dataclasses.replace(report, host=intern(report.host), plan=intern(report.plan), units=units)


def _shared(seq: tuple[Any, ...], intern: Interner) -> tuple[Any, ...]:
    if seq in intern:
        return intern(seq)
    return intern(tuple(intern(x) for x in seq))


def _strip_label(message: str) -> str:
    """`report: missing key 'run'` -> `missing key 'run'` (the path is shown next to it already)."""
    return message[len("report: ") :] if message.startswith("report: ") else message


# ---------------------------------------------------------------------------------------------------
# The inventory.


def read_hosts(path: str) -> tuple[str, ...]:
    """One hostname per line; blank lines and `#` comments are ignored.

    A FIFO is read (`--hosts <(inventory-query)`), but never more than MAX_HOSTS_BYTES (`/dev/zero`).

    Raises:
        UsageError: the file cannot be read, is too large, is not UTF-8 or lists no host.
    """
    shown_path = printable(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_HOSTS_BYTES + 1)
    except OSError as err:
        raise UsageError(f"--hosts {shown_path}: cannot read: {err.strerror or err}") from None
    if len(raw) > MAX_HOSTS_BYTES:
        raise UsageError(f"--hosts {shown_path}: larger than {MAX_HOSTS_BYTES} bytes; not a list of hosts")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"--hosts {shown_path}: not UTF-8 text (one hostname per line)") from None
    hosts = tuple(sorted({s for line in text.splitlines() if (s := line.split("#", 1)[0].strip())}))
    if not hosts:
        raise UsageError(f"--hosts {shown_path}: lists no host (one hostname per line)")
    return hosts
