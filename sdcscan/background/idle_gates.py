"""Background mode's per-core and per-GPU pacing: before each case a worker waits while other processes
keep its core busy (`CoreIdleGate`) or another process holds its GPU (`GpuIdleGate`), so cases run in
the idle gaps. SMT siblings are not watched: a worker cannot tell production on its sibling hyperthread
from another sdcscan worker there. Torch-free; a gate that cannot read the host lets cases run.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

# Share of a core other processes may use before a worker waits. High on purpose: SCHED_IDLE already
# yields the core the moment other work wakes, so cases may fill the gaps of a busy core; only a
# nearly saturated one is left alone, where a case would sit starved. (/proc/stat tick noise < 0.1.)
CORE_BUSY_MAX = 0.75
SAMPLE_MIN_S = 0.25  # /proc/stat counts in 10 ms ticks: shorter windows would be mostly noise
YIELD_S = 0.25  # how long a worker waits before it looks again at a busy core or GPU
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # /proc/stat: user nice system [idle iowait] irq softirq steal


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
        handle: object,  # the GPU's NVML handle: opaque, only passed back to NVML
        nvml: ModuleType,  # pynvml (untyped)
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
