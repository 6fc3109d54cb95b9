"""Hardware Sentinel: per-core evidence from the kernel's own logs, no test run (`sdcscan sentinel`).

Programs that crash far more often on one core than on its peers point at that core (Meta's
"Hardware Sentinel"). `events` parses the kernel's messages about segfaults, traps, machine checks
and NVIDIA Xid errors; `sources` reads them for a time window from the journal, /dev/kmsg or dmesg,
plus rasdaemon's database; `outliers` tallies them per unit and names the cores that stand out;
`command` is `sdcscan sentinel` as a library call, which records each scan in the history and writes
Prometheus metrics (through `outputs`, the layer below). Torch-free: the rest imports nothing from
sdcscan but `errors`, `timefmt`, `files`, `outcomes` (the shared words: how units sort) and its own
modules, so `sdcscan run` reads the kernel log through it without the history.
"""
