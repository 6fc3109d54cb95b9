"""Which files `compare` reads: arguments (files, directories, globs) -> candidate files, and the inputs
not read, each with the reason.

A directory is searched recursively for files named `*.json` or `*.json.gz` in any case (`R.JSON`,
`r.Json.GZ`); a file named on the command line is read whatever its name. Symbolic links to directories
are followed, and each real directory is walked once: a link back to an enclosing directory is a loop,
listed and not followed; a second route to a directory already walked is listed as such. The same file
reached twice under different names is read once.

Every input that is not read is listed in `skipped`, never silently dropped: dangling symbolic links,
link loops, FIFOs, devices and sockets (refused without opening them), unreadable files and directories,
and duplicates. Files in a directory whose names are not report names are counted in one line per
directory argument.
"""

from __future__ import annotations

import errno
import glob
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sdcscan.fleet.model import Skipped
from sdcscan.outcomes import printable

GLOB_CHARS = frozenset("*?[")
REPORT_SUFFIXES = (".json", ".json.gz")  # compared with the lower-cased name

FileId = tuple[int, int]  # (st_dev, st_ino): one real file or directory, whatever its name


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
