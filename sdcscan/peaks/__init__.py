"""Plain-op peak rates: how fast this unit runs the plain operation behind each workload, so a report
can state each workload's efficiency (achieved rate / peak).

- `plain_ops`: which plain ops each workload runs at its own shapes, and how their rates combine (torch-free).
- `rates`: timing them on a device, the per-machine cache, and the peaks of a unit (`unit_peaks`) and of
  a host (`host_peaks`, for `sdcscan info --peaks`).
"""
