"""gemm_fp's calibration in one place: the e_max thresholds of the V-ABFT check, where they come from
and how a unit is kept from calibrating away its own faults.

- `table`: the calibration file's format and its checks (torch-free); `sdcscan/data/calibration.json`
  is the table shipped with the package.
- `measure`: measuring e_max on a device (`sdcscan calibrate`), the per-device cache, and resolving
  which value a unit uses (a file, the cache, the shipped table, or a fresh measurement).
- `peers`: a run's check that units of one cohort hold the same e_max (torch-free).

The fleet's check of the same thing across hosts is a rule of `compare` (`fleet/calibration.py`).
"""
