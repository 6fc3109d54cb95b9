"""Read many reports for `compare` and `golden record`, tolerantly, keeping only a compact extract of each.

Which files are read, and which are listed as not read, is `fleet.inputs`; how one file becomes an
extract is `fleet.report_file`. One bad file never stops the comparison: it is listed with the reason.
Each file's raw JSON is dropped as soon as it is extracted, so memory grows with the number of distinct
digests, not with the bytes read.

Many files are read by a pool of processes (`read_reports(workers=...)`); each file is read exactly as
it would be alone, and the results come back in file order, so the outcome does not depend on the
number of workers.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from sdcscan.errors import ReportError, UsageError
from sdcscan.files import JSONFileError, read_bounded
from sdcscan.fleet.inputs import expand_paths, looks_like_report
from sdcscan.fleet.model import Extractor, HostReport, Interner, Skipped
from sdcscan.fleet.report_file import read_report
from sdcscan.outcomes import printable

__all__ = ["expand_paths", "looks_like_report", "read_hosts", "read_report", "read_reports"]

POOL_MIN_FILES = 64  # fewer files are read faster in this process than by starting workers
CHUNK_FILES = 256  # most files one worker task reads: small enough to spread, large enough to amortise
MAX_HOSTS_BYTES = 64 << 20  # an inventory of a million hosts is about 20 MB
PARENT_POLL_S = 0.5  # how soon a reading worker notices that compare was killed


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
    for item in _read_all(files, worker_count(workers, len(files), files_per_worker=POOL_MIN_FILES // 2)):
        if isinstance(item, Skipped):
            skipped.append(item)
        else:
            reports.append(item)
    if not reports:
        raise UsageError(f"no usable report to compare: {first_reasons(skipped) or 'no input'}")
    return reports, skipped


def first_reasons(skipped: Sequence[Skipped]) -> str:
    """The first three skipped inputs with their reasons, and how many more, for a one-line error."""
    first = "; ".join(printable(f"{s.path}: {s.reason}") for s in skipped[:3])
    return first + (f" (and {len(skipped) - 3} more)" if len(skipped) > 3 else "")


def worker_count(asked: int | None, files: int, *, files_per_worker: int) -> int:
    """How many processes read `files` files: as asked, else one per CPU when there are many files,
    with at least `files_per_worker` files each."""
    if asked is not None:
        return max(1, min(asked, files))
    if files < POOL_MIN_FILES:
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, files // files_per_worker or 1))


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

    Read as every file sdcscan reads (`files.read_bounded`): it must be a regular file, so a FIFO
    (which would wait for a writer forever, `--hosts <(query)` included), a device such as
    `/dev/zero` or a socket is refused without reading, and at most MAX_HOSTS_BYTES are read.

    Raises:
        UsageError: the file cannot be read, is not a regular file, is too large, is not UTF-8 or
            lists no host.
    """
    shown_path = printable(path)
    try:
        raw = read_bounded(path, what="host list", max_bytes=MAX_HOSTS_BYTES)
    except JSONFileError as err:
        raise UsageError(f"--hosts {shown_path}: {printable(err.reason)}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"--hosts {shown_path}: not UTF-8 text (one hostname per line)") from None
    hosts = tuple(sorted({s for line in text.splitlines() if (s := line.split("#", 1)[0].strip())}))
    if not hosts:
        raise UsageError(f"--hosts {shown_path}: lists no host (one hostname per line)")
    return hosts
