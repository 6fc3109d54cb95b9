"""Background ("Ripple") mode: screen beside production work, in the idle gaps of each core and GPU.

Meta's Ripple co-locates short tests with production work so that the whole fleet is covered in days
without taking machines out of service. Three things make sdcscan a good neighbour here:

- Priority (`priority`): workers run under `SCHED_IDLE`, which the kernel schedules only when
  nothing else wants the CPU and preempts as soon as something does (nice 19 where it is refused),
  in the idle I/O class, and first in line for the OOM killer.
- Per-core pacing (`idle_gates.CoreIdleGate`): before each case a worker looks at how much of its core other
  processes used since it last looked, and waits while that is above `CORE_BUSY_MAX`, so cases run
  in idle gaps and a saturated core is left alone. SMT siblings are not watched: a worker cannot
  tell production on its sibling hyperthread from another sdcscan worker there.
- Per-GPU pacing (`idle_gates.GpuIdleGate`): a GPU with another process on it is left alone until it is free.

Starvation is not a hang: a case the kernel held back under `SCHED_IDLE` shows as run delay in
`/proc/PID/schedstat`, which the runner subtracts before its watchdog judges (`priority.run_delay_s`).
A run first waits for the host to be quiet enough, or due for a screen (`host_pacing`).
Torch-free, and nothing here ever raises for a host that refuses a setting: it reports what it got.
"""
