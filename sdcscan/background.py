"""Background ("Ripple") mode: screen beside production work, in the idle gaps of each core and GPU.

Meta's Ripple co-locates short tests with production work so that the whole fleet is covered in days
without taking machines out of service. Three things make sdcscan a good neighbour here:

- Priority (`lower_priority`): workers run under `SCHED_IDLE`, which the kernel schedules only when
  nothing else wants the CPU and preempts as soon as something does (nice 19 where it is refused),
  in the idle I/O class, and first in line for the OOM killer.
- Per-core pacing (`CoreIdleGate`): before each case a worker looks at how much of its core other
  processes used since it last looked, and waits while that is above `CORE_BUSY_MAX`, so cases run
  in idle gaps and a saturated core is left alone. SMT siblings are not watched: a worker cannot
  tell production on its sibling hyperthread from another sdcscan worker there.
- Per-GPU pacing (`GpuIdleGate`): a GPU with another process on it is left alone until it is free.

Starvation is not a hang: a case the kernel held back under `SCHED_IDLE` shows as run delay in
`/proc/PID/schedstat`, which the runner subtracts before its watchdog judges (`run_delay_s`).
Torch-free, and nothing here ever raises for a host that refuses a setting: it reports what it got.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

NOT_SCREENED = "not screened"  # how the reason of a unit the host's own work kept from running begins
# Share of a core other processes may use before a worker waits. High on purpose: SCHED_IDLE already
# yields the core the moment other work wakes, so cases may fill the gaps of a busy core; only a
# nearly saturated one is left alone, where a case would sit starved. (/proc/stat tick noise < 0.1.)
CORE_BUSY_MAX = 0.75
SAMPLE_MIN_S = 0.25  # /proc/stat counts in 10 ms ticks: shorter windows would be mostly noise
YIELD_S = 0.25  # how long a worker waits before it looks again at a busy core or GPU
OOM_SCORE_ADJ = 1000  # first to go when memory runs out: production work is worth more than a screen
IOPRIO_CLASS_IDLE = 3  # linux/ioprio.h: I/O only when no one else wants the disk
_IOPRIO_CLASS_SHIFT = 13
_IOPRIO_WHO_PROCESS = 1
# ioprio_set has no wrapper in Python or glibc; its number per architecture (unistd tables).
_SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "ppc64le": 273, "s390x": 282, "riscv64": 30}
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # /proc/stat: user nice system [idle iowait] irq softirq steal


def lower_priority(*, idle_scheduler: bool) -> dict[str, Any]:
    """Make the calling thread, and every thread and process it starts from now on, unobtrusive.

    Linux keeps scheduling policy and nice value per thread, so call this before any thread starts.

    Args:
        idle_scheduler: ask for SCHED_IDLE (workers); False asks for nice 19 only (the run's parent,
            which must still answer signals and watch the workers on a saturated host).
    Returns:
        What the host granted: {"cpu": "SCHED_IDLE" | "nice 19" | None, "io": "idle" | None,
        "oom_score_adj": int | None}.
    """
    granted: dict[str, Any] = {"cpu": None, "io": None, "oom_score_adj": None}
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


def core_busy_s(cpu: int, *, stat_path: str = "/proc/stat") -> float | None:
    """Seconds logical CPU `cpu` has spent busy since boot (any process, any priority), or None."""
    prefix = f"cpu{cpu} "
    try:
        with open(stat_path) as f:
            for line in f:
                if line.startswith(prefix):
                    ticks = [int(v) for v in line.split()[1:9]]
                    return sum(ticks[i] for i in _BUSY_FIELDS if i < len(ticks)) / _ticks_per_s()
    except (OSError, ValueError):
        return None
    return None


def _ticks_per_s() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100.0


@dataclass
class _Sample:
    wall: float
    core_s: float
    own_s: float


class CoreIdleGate:
    """Before each case: is this worker's core free of other work? If not, wait until it is.

    The share of the core that other processes used is the core's busy time (/proc/stat) less this
    process's own CPU time, over the time since the last look. A worker is pinned to its core with
    one thread, so its own time is all on that core.
    """

    def __init__(
        self,
        cpu: int,
        *,
        busy_max: float = CORE_BUSY_MAX,
        read_core_s: Callable[[], float | None] | None = None,
        own_cpu_s: Callable[[], float] = time.process_time,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.busy_max = busy_max
        self._read_core_s = read_core_s or (lambda: core_busy_s(cpu))
        self._own_cpu_s, self._clock, self._sleep = own_cpu_s, clock, sleep
        self._last = self._sample()
        self.waited_s = 0.0  # total time this gate held its worker back
        self.waits = 0  # how many times it found the core busy

    def _sample(self) -> _Sample | None:
        core = self._read_core_s()
        return None if core is None else _Sample(self._clock(), core, self._own_cpu_s())

    def others_share(self) -> float | None:
        """The share of the core other processes used since the last look, once SAMPLE_MIN_S has passed.

        Returns None when too little time has passed to say (the last answer stands) or the core's
        counters cannot be read (pacing is then off: the kernel's SCHED_IDLE still yields the core).
        """
        if self._last is None:
            return None
        if self._clock() - self._last.wall < SAMPLE_MIN_S:
            return None
        now = self._sample()
        if now is None:
            return None
        wall = now.wall - self._last.wall
        others = (now.core_s - self._last.core_s) - (now.own_s - self._last.own_s)
        self._last = now
        return max(0.0, others / wall) if wall > 0 else None

    def wait_until_idle(self, deadline: float, stop: Callable[[], bool]) -> bool:
        """Wait while the core is busy with other work.

        Returns:
            True when the core is idle (start the case), False when `deadline` came or `stop()` said
            so first.
        """
        share = self.others_share()
        if share is None or share <= self.busy_max:
            return True
        self.waits += 1
        idle, waited = _wait_while_busy(self._busy, deadline, stop, self._clock, self._sleep)
        self.waited_s += waited
        return idle

    def _busy(self) -> bool:
        share = self.others_share()
        return share is None or share > self.busy_max  # None: too soon to tell, so look again later


class GpuIdleGate:
    """Before each case on a GPU: is another process using it? If so, wait until it is gone.

    NVML lists the processes holding a context on the device; any but this one means a job started
    there, and the screen steps aside within one case. Utilisation is not used: it counts our own
    kernels too. `nvml` is the pynvml module, injectable for tests.
    """

    def __init__(
        self,
        handle: Any,
        nvml: Any,
        *,
        own_pid: int | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._handle, self._nvml = handle, nvml
        self._own = os.getpid() if own_pid is None else own_pid
        self._clock, self._sleep = clock, sleep
        self.waited_s = 0.0
        self.waits = 0

    def others(self) -> list[int]:
        """Pids of the other processes on this GPU ([] when NVML cannot say: pacing then is off)."""
        pids: set[int] = set()
        for query in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            with contextlib.suppress(Exception):  # NVML raises its own error types; any means "unknown"
                pids.update(int(p.pid) for p in getattr(self._nvml, query)(self._handle))
        pids.discard(self._own)
        return sorted(pids)

    def wait_until_idle(self, deadline: float, stop: Callable[[], bool]) -> bool:
        """As CoreIdleGate.wait_until_idle, for a GPU."""
        if not self.others():
            return True
        self.waits += 1
        idle, waited = _wait_while_busy(lambda: bool(self.others()), deadline, stop, self._clock, self._sleep)
        self.waited_s += waited
        return idle


def _wait_while_busy(
    busy: Callable[[], bool],
    deadline: float,
    stop: Callable[[], bool],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> tuple[bool, float]:
    """Sleep YIELD_S at a time until `busy()` is False (True), or `stop()` or the deadline come (False).

    Returns:
        (idle, seconds waited).
    """
    started = clock()
    while True:
        if stop() or clock() + YIELD_S > deadline:
            return False, clock() - started
        sleep(YIELD_S)
        if not busy():
            return True, clock() - started


def gpu_gate(pci_bus_id: str) -> GpuIdleGate | None:
    """The gate of the GPU at `pci_bus_id` ("0000:3b:00.0", as torch reports it for the unit's device:
    NVML and CUDA number GPUs differently under CUDA_VISIBLE_DEVICES); None without NVML, and the GPU
    is then screened without pacing."""
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]

        pynvml.nvmlInit()
        return GpuIdleGate(pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode()), pynvml)
    except Exception:  # no NVML module or driver, an unknown bus id: NVML's errors have no common base
        return None


# --- Host pacing: whether to start at all (OpenDCDiag's service mode paces itself in the same spirit).

MAX_UNSCREENED_S = 24 * 3600.0  # a host unscreened this long is screened whatever its load
LOAD_QUIET = 0.25  # load per CPU under which a just-screened host counts as quiet enough
LOAD_ANY = 1.0  # ... the bar rises linearly to this as the time since the last screen nears the maximum
HOST_CHECK_S = 10.0  # how often a waiting run looks at the load again


def load_threshold(unscreened_s: float | None, max_unscreened_s: float = MAX_UNSCREENED_S) -> float:
    """The load per CPU under which a host may be screened now; infinity once it is due (or never was).

    The longer a host has gone unscreened, the busier it may be: a busy host still gets screened, in
    the quieter part of its day, and never goes longer than `max_unscreened_s` without.
    """
    if unscreened_s is None or unscreened_s >= max_unscreened_s:
        return float("inf")
    rise = max(0.0, unscreened_s) / max_unscreened_s
    return LOAD_QUIET + (LOAD_ANY - LOAD_QUIET) * rise


def load_per_cpu(*, loadavg_path: str = "/proc/loadavg", cpus: int | None = None) -> float | None:
    """The host's one-minute load average per logical CPU, or None where it cannot be read."""
    try:
        with open(loadavg_path) as f:
            load = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return load / (cpus or os.cpu_count() or 1)


@dataclass(frozen=True)
class Pacing:
    """What the host gate decided: the report's `run.background.pacing`."""

    screen: bool  # False: the host stayed busy until the budget ended
    forced: bool  # due (or never screened): the load was not asked
    unscreened_s: float | None  # since the last judged run; None: never screened
    load_per_cpu: float | None  # the last load looked at
    threshold: float | None  # the bar it was held against (None when forced)
    waited_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "screen": self.screen,
            "forced": self.forced,
            "unscreened_s": None if self.unscreened_s is None else round(self.unscreened_s, 1),
            "load_per_cpu": None if self.load_per_cpu is None else round(self.load_per_cpu, 3),
            "threshold": None if self.threshold is None else round(self.threshold, 3),
            "waited_s": round(self.waited_s, 1),
        }


def wait_for_quiet_host(
    *,
    unscreened_s: float | None,
    deadline: float,
    max_unscreened_s: float = MAX_UNSCREENED_S,
    read_load: Callable[[], float | None] | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> Pacing:
    """Wait until the host is quiet enough for a screen, or due for one, or the budget is over.

    A load that cannot be read does not hold a screen back. Signals end the wait like any sleep.
    """
    read_load = read_load or load_per_cpu
    started = clock()
    load = None
    while True:
        waited = clock() - started
        since = None if unscreened_s is None else unscreened_s + waited
        threshold = load_threshold(since, max_unscreened_s)
        if threshold == float("inf"):
            return Pacing(True, True, unscreened_s, load, None, waited)
        load = read_load()
        if load is None or load <= threshold:
            return Pacing(True, False, unscreened_s, load, threshold, waited)
        if clock() + HOST_CHECK_S > deadline:
            return Pacing(False, False, unscreened_s, load, threshold, waited)
        sleep(HOST_CHECK_S)
