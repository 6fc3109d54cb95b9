"""A device-free cost model of each workload's cases: what a GPU case would launch, move and wait for.

A workload's `prepare` and `run` execute at a profile's `cuda_params` on torch's meta device (shapes and
dtypes, no data) under a dispatch mode that counts, per phase, the kernels, the bytes each reads and
writes, the FLOPs of its matrix products, the host waits (a read of a device value, a blocking copy) and
the host's own tensor work; a small table of rates turns the counts into predicted phase times. Tests
hold every built-in profile to budgets (tests/test_costmodel_budgets.py); `scripts/gpu_model.py` prints
the table; a lent GPU confirms it (`scripts/gpu_check.sh`).

- `counting`: the dispatch mode and its tallies.
- `device_rates`: the rates of the device classes the model predicts for.
- `cases`: one workload's prepare and cases on the meta device, counted.
"""
