"""`matmul_golden`: integer-valued matmuls compared bit-exactly with an int64 reference.

spec.py is its catalogue entry and constants (torch-free), workload.py its torch code.
Nothing is imported here: the parent process imports spec.py alone.
"""
