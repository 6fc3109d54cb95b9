"""`embbag_int8`: rowwise-quantized EmbeddingBag with per-bag checksums.

spec.py is its catalogue entry and constants (torch-free), workload.py its torch code, selftest_spec.py
its self-test's declarations (torch-free).
Nothing is imported here: the parent process imports spec.py alone.
"""
