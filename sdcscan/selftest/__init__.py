"""`sdcscan selftest`'s library side: prove that each ABFT check fires on injected faults and stays silent
otherwise.

- `sweep`: the sweep over every workload that implements the `SelftestWorkload` protocol
  (sdcscan/workloads/base.py), per variant, fault site and bit, against its detection floors.

What a workload sweeps (its variants, bits and floors) is the workload's own, declared beside it
(e.g. sdcscan/workloads/gemm_fp/selftest_spec.py). `sdcscan/render/selftest.py` draws the result.
"""
