"""`embbag_int8`: rowwise-quantized EmbeddingBag with per-bag checksums.

spec.py is its catalogue entry and constants (torch-free), workload.py its torch code.
Nothing is imported here: the parent process imports spec.py alone.
"""
