"""Hardware Sentinel: per-core evidence from the kernel's own logs, no test run (`sdcscan sentinel`).

Programs that crash far more often on one core than on its peers point at that core (Meta's
"Hardware Sentinel"). `kernel_events` parses the kernel's messages about segfaults, traps, machine
checks and NVIDIA Xid errors; `kernel_log` reads them for a time window from the journal, /dev/kmsg
or dmesg, plus rasdaemon's database, running those tools as untrusted programs (`tool`: bounded in
time and bytes, each in its own process group, killed whole); `outliers` tallies them per unit and
names the cores that stand out; `window` judges one window; `command` is `sdcscan sentinel` as a
library call, which records each scan in the history and writes Prometheus metrics (through
`outputs`, the layer below). Torch-free: the rest imports nothing from sdcscan but `errors`,
`timefmt`, `files`, `interrupts` (how SIGINT/SIGTERM stop a tool being read), `outcomes` (the
shared words: how units sort) and its own modules, so `sdcscan run` reads the kernel log through it
without the history.
"""
