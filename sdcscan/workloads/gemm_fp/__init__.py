"""`gemm_fp`: fp matmuls checked per row with V-ABFT thresholds.

spec.py is its catalogue entry and constants (torch-free), workload.py its torch code, selftest_spec.py its self-test's declarations.
Nothing is imported here: the parent process imports spec.py alone.
"""
