"""Background mode's priority: SCHED_IDLE (nice 19 where refused), the idle I/O class, first in line for
the OOM killer; and a worker's run delay, so that starvation under SCHED_IDLE is not taken for a hang.

Torch-free, and nothing here ever raises for a host that refuses a setting: it reports what it got.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform

OOM_SCORE_ADJ = 1000  # first to go when memory runs out: production work is worth more than a screen
IOPRIO_CLASS_IDLE = 3  # linux/ioprio.h: I/O only when no one else wants the disk
_IOPRIO_CLASS_SHIFT = 13
_IOPRIO_WHO_PROCESS = 1
# ioprio_set has no wrapper in Python or glibc; its number per architecture (unistd tables).
_SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "ppc64le": 273, "s390x": 282, "riscv64": 30}


def lower_priority(*, idle_scheduler: bool) -> dict[str, object]:
    """Make the calling thread, and every thread and process it starts from now on, unobtrusive.

    Linux keeps scheduling policy and nice value per thread, so call this before any thread starts.

    Args:
        idle_scheduler: ask for SCHED_IDLE (workers); False asks for nice 19 only (the run's parent,
            which must still answer signals and watch the workers on a saturated host).
    Returns:
        What the host granted: {"cpu": "SCHED_IDLE" | "nice 19" | None, "io": "idle" | None,
        "oom_score_adj": int | None}.
    """
    granted: dict[str, object] = {"cpu": None, "io": None, "oom_score_adj": None}
    if idle_scheduler and hasattr(os, "SCHED_IDLE"):
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            granted["cpu"] = "SCHED_IDLE"
    if granted["cpu"] is None:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, 19)
            granted["cpu"] = "nice 19"
    if _set_idle_io():
        granted["io"] = "idle"
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write(str(OOM_SCORE_ADJ))
        granted["oom_score_adj"] = OOM_SCORE_ADJ
    return granted


def _set_idle_io() -> bool:
    number = _SYS_IOPRIO_SET.get(platform.machine())
    if number is None:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = IOPRIO_CLASS_IDLE << _IOPRIO_CLASS_SHIFT
        return int(libc.syscall(number, _IOPRIO_WHO_PROCESS, 0, value)) == 0
    except (OSError, AttributeError):
        return False


def run_delay_s(pid: int, *, proc: str = "/proc") -> float | None:
    """Seconds process `pid`'s main thread has spent runnable but waiting for a CPU (schedstat's
    second field), or None where the kernel does not say (no CONFIG_SCHED_INFO, the process is gone)."""
    try:
        with open(f"{proc}/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None
