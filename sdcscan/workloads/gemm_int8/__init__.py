"""`gemm_int8`: u8×s8→s32 GEMMs with exact ABFT checksums.

spec.py is its catalogue entry and constants (torch-free), workload.py its torch code, selftest_spec.py
its self-test's declarations (torch-free).
Nothing is imported here: the parent process imports spec.py alone.
"""
