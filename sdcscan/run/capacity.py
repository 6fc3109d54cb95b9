"""What the host can hold, checked before a run starts: open files, memory for a case, threads, disk space,
a CPU quota.

A run that cannot fit is refused before any work (exit 2) with one line naming the limit or the
parameter, what the run needs and what the host has. Found later, the same shortfall cost the whole
start-up and ended in exit 3 (a case of 256 GB, a fork server out of file descriptors), or filled the
disk that holds the journal, the run's durable record.

The estimates lean the way that is safe. Memory is a bound from below (the tensors a case cannot do
without), so a case that fits is never refused; disk space is a bound from above (every unit running
its shortest cases for the whole budget), so a run that starts has room for its journal and report.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdcscan.errors import ProfileError, UsageError
from sdcscan.profile import Profile, WorkloadEntry
from sdcscan.run.rerun_schedule import retest_window
from sdcscan.units import Unit, cpu_units
from sdcscan.workloads import SPECS, WorkloadSpec
from sdcscan.workloads.params import shown

# Open files: measured peaks of a run were 11 + 2 per unit in the parent and 11 + 4 while the fork
# server passes a worker its descriptors; the base adds the history, the kernel-log tool's pipes and
# an output being written.
FDS_BASE = 24
FDS_PER_UNIT = 4
# Disk: a case takes 0.05 to 2 s (DESIGN.md), so every unit runs at most budget / MIN_CASE_S cases; a
# passing case's journal line is about 440 bytes, its columns in the report about 80.
MIN_CASE_S = 0.05
JOURNAL_BYTES_PER_CASE = 512
REPORT_BYTES_PER_CASE = 128
BYTES_PER_UNIT = 4096  # a unit's own record in the journal and in each output (peaks, notes, telemetry)
FIXED_BYTES = 64 * 1024  # the run's record: host inventory, argv, findings


def check_host_fits(profile: Profile, units: Sequence[Unit]) -> None:
    """Refuse, before any work, a profile whose threads or case sizes this host cannot hold.

    Raises:
        ProfileError: `threads_per_unit` exceeds the logical CPUs this run may use, or the CPU units'
            cases of a workload need more memory than is available (exit 2, naming the parameter,
            what a case needs and what the host has).
    """
    cpus = len(cpu_units())
    if profile.threads_per_unit > cpus:
        raise ProfileError(
            f"{profile.path}: threads_per_unit: {profile.threads_per_unit} is more than the {cpus} logical "
            f"CPU(s) this run may use; at most {cpus} here"
        )
    on_cpus = sum(u.kind == "cpu" for u in units)
    available = memory_available()
    if not on_cpus or available is None:
        return
    for index, entry in enumerate(profile.workloads):
        problem = _memory_problem(entry, on_cpus, available)
        if problem:
            raise ProfileError(f"{profile.path}: workloads[{index}].params.{problem}")


def _memory_problem(entry: WorkloadEntry, units: int, available: int) -> str | None:
    """`KEY (WORKLOAD): why` when `units` CPU units running this workload's cases at once need more
    than `available` bytes; None when they fit (or the workload has no estimate)."""
    spec = SPECS[entry.name]
    if spec.memory is None:
        return None
    params = {**spec.defaults, **entry.params_for("cpu")}
    per_case = spec.memory(params)
    if per_case * units <= available:
        return None
    key = _largest_part(spec, params)
    most = _largest_fitting(spec, params, key, available // units)
    bound = f"; at most {most} here" if most is not None else f"; make {key} smaller"
    at_once = (
        f", {_size(per_case * units)} for the {units} CPU units that run it at once" if units > 1 else ""
    )
    return (
        f"{key} ({entry.name}): {shown(params[key])} needs at least {_size(per_case)} of memory per case"
        f"{at_once}, more than the {_size(available)} this host has available{bound}"
    )


def _largest_part(spec: WorkloadSpec, params: Mapping[str, Any]) -> str:
    """The parameter whose default alone would shrink the case the most: the one to name."""
    assert spec.memory is not None
    sizes = {key: spec.memory({**params, key: spec.defaults[key]}) for key in params if key in spec.defaults}
    return min(sizes, key=lambda key: sizes[key])


def _largest_fitting(spec: WorkloadSpec, params: Mapping[str, Any], key: str, room: int) -> int | None:
    """The largest integer value of `key` whose case fits `room` bytes (a case grows with it), or None
    when `key` is no integer or even 1 does not fit."""
    assert spec.memory is not None
    value = params[key]
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    low, high = 0, value  # memory(low) fits, memory(high) does not (low 0: nothing checked yet)
    while high - low > 1:
        mid = (low + high) // 2
        if spec.memory({**params, key: mid}) <= room:
            low = mid
        else:
            high = mid
    return low or None


def memory_available() -> int | None:
    """Bytes a new allocation can have: MemAvailable, within what this process's cgroup still allows;
    None where neither is known (not Linux)."""
    found = [b for b in (_meminfo_available(), _cgroup_room()) if b is not None]
    return min(found) if found else None


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room() -> int | None:
    """memory.max less memory.current of this process's cgroup (v2), where it has a limit."""
    try:
        rel = Path("/proc/self/cgroup").read_text().strip().splitlines()[0].split(":", 2)[2]
        group = Path("/sys/fs/cgroup") / rel.lstrip("/")
        limit = (group / "memory.max").read_text().strip()
        used = int((group / "memory.current").read_text())
    except (OSError, ValueError, IndexError):
        return None
    return None if limit == "max" else max(0, int(limit) - used)


def reserve_open_files(units: int) -> None:
    """Make room for the run's open files: raise the soft limit (ulimit -n) toward the hard one when a
    run of `units` units needs more, or refuse the run before it starts any process.

    Raises:
        UsageError: the hard limit is below what the run needs (exit 2, naming the limit to raise).
    """
    need = FDS_BASE + FDS_PER_UNIT * units
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard == resource.RLIM_INFINITY or hard >= need:
        target = 2 * need if hard == resource.RLIM_INFINITY else min(hard, 2 * need)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return
        except (ValueError, OSError):
            pass  # refused (a sandbox): the run cannot have them, as below
    raise UsageError(
        f"open files: a run of {units} unit(s) needs up to {need} file descriptors, and this process may "
        f"open {soft} (ulimit -n; hard limit {hard}): raise the limit to {need} or more, or select fewer "
        "units with --units"
    )


# Tasks (processes and threads: Linux counts both against `ulimit -u` and a cgroup's pids.max): measured
# during a quick run of 2 units, 8 in all, a worker 2 (threads_per_unit + 1), the parent 2, the fork
# server and its resource tracker 1 each; the base adds the kernel-log tool and a margin.
TASKS_BASE = 8
TASKS_PER_UNIT_BEYOND_THREADS = 2
CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")


def check_tasks(
    units: int, threads: int, *, cgroup_root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP
) -> None:
    """Refuse a run whose processes and threads a process limit would stop (`ulimit -u`, or the pids.max
    of a cgroup this process is in: a container's, systemd's TasksMax). Found later, a worker's fork
    failed inside the fork server (its traceback on stderr) and the unit ended `invalid` for a reason
    that named no limit.

    Raises:
        UsageError: the room left under a limit is below what the run needs (exit 2, naming the limit).
    """
    need = TASKS_BASE + units * (threads + TASKS_PER_UNIT_BEYOND_THREADS)
    for room, limit in (_nproc_room(), _pids_room(cgroup_root, self_cgroup)):
        if room is not None and room < need:
            raise UsageError(
                f"processes: a run of {units} unit(s) needs about {need} processes and threads, and {limit} "
                f"leaves room for {room} more: raise it, or select fewer units with --units"
            )


def _nproc_room() -> tuple[int | None, str]:
    """Tasks this user may still start under RLIMIT_NPROC (None: no limit applies, as to root)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft == resource.RLIM_INFINITY or os.geteuid() == 0:  # root is not held to it
        return None, ""
    uid, used = os.getuid(), 0
    for pid in (name for name in _listdir("/proc") if name.isdigit()):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            used += int(fields.get("Threads", "1"))
    return soft - used, f"the process limit (ulimit -u {soft}, {used} in use by this user)"


def _pids_room(root: Path, self_cgroup: Path) -> tuple[int | None, str]:
    """Tasks still allowed by the tightest pids.max of this process's cgroups (as `self_cgroup` lists
    them, v1 and v2) and their ancestors under `root`."""
    best: tuple[int | None, str] = (None, "")
    for here in _cgroup_dirs(root, self_cgroup, "pids"):
        room = _room_in(here)
        if room is not None and (best[0] is None or room[0] < best[0]):
            best = room
    return best


def _cgroup_dirs(root: Path, self_cgroup: Path, controller: str) -> Iterator[Path]:
    """The directories of this process's cgroups (as `self_cgroup` lists them) that `controller` may
    limit, and their ancestors under `root`: the v2 unified tree (at the root, or under "unified" on a
    hybrid host) and the v1 hierarchy of `controller` (`cpu` may be mounted as `cpu,cpuacct`)."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            bases = [root, root / "unified"]
        elif controller in controllers.split(","):
            bases = [root / controller, root / controllers]
        else:
            continue
        for base in bases:
            here = base / path.lstrip("/")
            while True:
                yield here
                if here == base or base not in here.parents:
                    break
                here = here.parent


def cpu_quota(
    *, cgroup_root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP
) -> tuple[float, str] | None:
    """The CPUs this process may use by the tightest CPU quota of its cgroups (a container's, systemd's
    CPUQuota, a Slurm job's), and where it is set; None when no quota applies.

    v2: `cpu.max` ("QUOTA PERIOD", or "max"); v1: `cpu.cfs_quota_us` (-1: none) over `cpu.cfs_period_us`.
    """
    best: tuple[float, str] | None = None
    for here in _cgroup_dirs(cgroup_root, self_cgroup, "cpu"):
        found = _quota_in(here)
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    return best


def _quota_in(cgroup: Path) -> tuple[float, str] | None:
    try:
        words = (cgroup / "cpu.max").read_text().split()
        if len(words) == 2 and words[0].isdigit() and words[1].isdigit() and int(words[1]) > 0:
            return int(words[0]) / int(words[1]), f"{cgroup}/cpu.max = {' '.join(words)}"
        return None  # "max": no quota
    except OSError:
        pass
    try:
        quota = int((cgroup / "cpu.cfs_quota_us").read_text())
        period = int((cgroup / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    if quota <= 0 or period <= 0:  # -1: no quota
        return None
    return quota / period, f"{cgroup}/cpu.cfs_quota_us = {quota} per {period} µs period"


MIN_CPU_PER_UNIT = 0.5  # below this share of a CPU a unit's cases run past the watchdog's allowance


def check_cpu_quota(units: int, *, cgroup_root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> None:
    """Refuse a run a CPU quota would starve: each unit is a worker computing flat out on its own CPU, and
    under a quota of a fraction of one CPU its start-up and cases take many times longer, until the
    watchdog stops them (issue 45: under a 10% quota every unit ended `invalid`, "worker did not start").

    Raises:
        UsageError: the quota gives less than MIN_CPU_PER_UNIT of a CPU per unit (exit 2, naming it).
    """
    quota = cpu_quota(cgroup_root=cgroup_root, self_cgroup=self_cgroup)
    if quota is None or quota[0] >= MIN_CPU_PER_UNIT * units:
        return
    cpus, where = quota
    fits = int(cpus / MIN_CPU_PER_UNIT)
    remedy = (
        f"raise the quota, or select at most {fits} unit(s) with --units"
        if fits
        else f"raise the quota to at least {MIN_CPU_PER_UNIT:g} CPUs per unit screened"
    )
    raise UsageError(
        f"CPU quota: this process may use {cpus:.2f} CPUs ({where}), and a run of {units} unit(s) needs at "
        f"least {MIN_CPU_PER_UNIT * units:g} (each unit computes on a CPU of its own): {remedy}"
    )


def _room_in(cgroup: Path) -> tuple[int, str] | None:
    try:
        limit = (cgroup / "pids.max").read_text().strip()
        current = int((cgroup / "pids.current").read_text())
    except (OSError, ValueError):
        return None
    if not limit.isdigit():  # "max"
        return None
    return int(limit) - current, f"the cgroup's task limit ({cgroup}/pids.max = {limit}, {current} in use)"


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


@dataclass(frozen=True)
class DiskClaim:
    """Bytes a run may write under `path` (a file, or the directory of the journal), and what they are."""

    what: str
    path: Path
    bytes: int


def run_claims(
    units: int,
    budget_s: float,
    journal_dir: Path,
    outputs: Sequence[tuple[str, str | os.PathLike[str] | None]],
    cases_per_unit: int | None = None,
) -> list[DiskClaim]:
    """What a run of `units` units for `budget_s` may write: its journal and each output given
    (`(option, path)`; the report at `--out`, the small JUnit and Prometheus files at theirs).

    A unit runs at most budget / MIN_CASE_S cases, or with `--cases` (`cases_per_unit`) that many and
    the re-runs of its failing ones: at most the re-run window's worth of the shortest cases. A run of
    20 cases a unit with a day's budget claims kilobytes, not the gigabytes of a day of cases."""
    per_unit = int(budget_s / MIN_CASE_S + 1)
    if cases_per_unit is not None:
        per_unit = min(per_unit, cases_per_unit + int(retest_window(budget_s) / MIN_CASE_S))
    cases = units * per_unit
    claims = [
        DiskClaim(
            f"the journal of up to {cases} cases",
            journal_dir,
            FIXED_BYTES + units * BYTES_PER_UNIT + cases * JOURNAL_BYTES_PER_CASE,
        )
    ]
    for option, path in outputs:
        if path is None:
            continue
        size = FIXED_BYTES + units * BYTES_PER_UNIT
        if option == "--out":
            size += cases * REPORT_BYTES_PER_CASE
        claims.append(DiskClaim(f"{option} {os.fspath(path)}", Path(path), size))
    return claims


def check_disk_space(claims: Sequence[DiskClaim]) -> None:
    """Refuse, before any work, a run whose files do not fit the free space of their filesystems.

    Claims on one filesystem add up. Free space is what an unprivileged writer may use (f_bavail).

    Raises:
        UsageError: one line naming the filesystem, what is free and what the run may need there.
    """
    by_fs: dict[int, list[DiskClaim]] = {}
    for claim in claims:
        existing = _existing_ancestor(claim.path)
        by_fs.setdefault(os.stat(existing).st_dev, []).append(claim)
    for group in by_fs.values():
        where = _existing_ancestor(group[0].path)
        vfs = os.statvfs(where)
        free = vfs.f_bavail * vfs.f_frsize
        need = sum(c.bytes for c in group)
        if need > free:
            what = " and ".join(c.what for c in group)
            raise UsageError(
                f"not enough free space on {_mount_point(where)}: {_size(free)} free, and this run may "
                f"write {_size(need)} there ({what}); free some space or write elsewhere (--out, "
                "XDG_STATE_HOME for the state directory)"
            )


def _existing_ancestor(path: Path) -> Path:
    """`path` itself if it exists, else its nearest existing parent (where it will be created)."""
    current = path.absolute()
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def _mount_point(path: Path) -> Path:
    """The mount point of the filesystem holding `path`: the last parent on the same device."""
    current = path if path.is_dir() else path.parent
    device = os.stat(current).st_dev
    while current != current.parent and os.stat(current.parent).st_dev == device:
        current = current.parent
    return current


def _size(n: int) -> str:
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
