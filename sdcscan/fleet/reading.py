"""Read many reports for `compare` and `golden record`, tolerantly, keeping only a compact extract of each.

Bad inputs (missing, truncated, not JSON, another schema, not a report) are listed as skipped with the
reason and never stop the comparison. Each file's raw JSON is dropped as soon as it is extracted, so
memory grows with the number of distinct digests, not with the bytes read.
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from sdcscan.errors import ReportError, UsageError
from sdcscan.files import JSONFileError, parse_json, read_bounded
from sdcscan.fleet.model import Extractor, HostReport, Skipped
from sdcscan.report import MAX_REPORT_BYTES, printable

GLOB_CHARS = frozenset("*?[")


def expand_paths(args: Iterable[str]) -> tuple[list[str], list[Skipped]]:
    """Turn files, directories (searched recursively for *.json) and globs into a sorted list of files.

    Returns:
        (files, skipped): each file once (by resolved path); arguments that match nothing are skipped.
    """
    files: dict[str, str] = {}  # resolved -> spelling shown to the user
    skipped: list[Skipped] = []
    for arg in args:
        if os.path.isdir(arg):
            found = [str(p) for p in Path(arg).rglob("*.json") if p.is_file()]
            if not found:
                skipped.append(Skipped(arg, "directory holds no *.json file"))
        elif os.path.isfile(arg):
            found = [arg]
        elif GLOB_CHARS & set(arg):
            found = []
            for match in glob.glob(arg, recursive=True):
                if os.path.isdir(match):
                    found += [str(p) for p in Path(match).rglob("*.json") if p.is_file()]
                elif os.path.isfile(match):
                    found.append(match)
            if not found:
                skipped.append(Skipped(arg, "pattern matches no file"))
        else:
            skipped.append(Skipped(arg, "no such file or directory"))
            found = []
        for f in found:
            resolved = os.path.realpath(f)
            files[resolved] = min(files.get(resolved, f), f)
    return sorted(files.values()), skipped


def read_report(path: str, extractor: Extractor) -> HostReport:
    """Read, parse and extract one report file.

    Raises:
        ReportError: the file is not a usable report; the message is the reason, without the path.
    """
    try:
        raw = read_bounded(path, what="report", max_bytes=MAX_REPORT_BYTES)
        data = parse_json(raw, what="report")
    except JSONFileError as err:
        raise ReportError(err.reason) from None
    if isinstance(data, dict) and "golden_version" in data:
        raise ReportError("a golden file, not a report")
    sha = hashlib.sha256(raw).hexdigest()
    del raw  # the bytes are not needed any more; the parsed dict goes when we return
    try:
        return extractor.extract(data, source=path, sha256=sha)
    except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as err:
        # validate_report checks every field the extract reads, so this is a bug in that check; one bad
        # file must still not stop the comparison of a fleet. Its content is not echoed.
        raise ReportError(f"malformed report (unexpected {type(err).__name__})") from None


def read_reports(args: Iterable[str]) -> tuple[list[HostReport], list[Skipped]]:
    """Read every report named by `args` (files, directories, globs).

    Returns:
        (usable reports, skipped inputs with reasons); duplicates are left for `summarize` to resolve.

    Raises:
        UsageError: nothing usable was found (exit 2), with the first reasons.
    """
    files, skipped = expand_paths(args)
    extractor = Extractor()
    reports: list[HostReport] = []
    for path in files:
        try:
            reports.append(read_report(path, extractor))
        except ReportError as err:
            skipped.append(Skipped(path, _strip_label(str(err))))
    if not reports:
        first = "; ".join(printable(f"{s.path}: {s.reason}") for s in skipped[:3])
        more = f" (and {len(skipped) - 3} more)" if len(skipped) > 3 else ""
        raise UsageError(f"no usable report to compare: {first or 'no input'}{more}")
    return reports, skipped


def _strip_label(message: str) -> str:
    """`report: missing key 'run'` -> `missing key 'run'` (the path is shown next to it already)."""
    return message[len("report: ") :] if message.startswith("report: ") else message


def read_hosts(path: str) -> tuple[str, ...]:
    """One hostname per line; blank lines and `#` comments are ignored.

    Raises:
        UsageError: the file cannot be read or lists no host.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"--hosts {path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    hosts = tuple(sorted({s for line in text.splitlines() if (s := line.split("#", 1)[0].strip())}))
    if not hosts:
        raise UsageError(f"--hosts {path}: lists no host (one hostname per line)")
    return hosts
