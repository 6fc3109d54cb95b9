"""`collective`: collectives on exact data, checked bit for bit on every rank.

spec.py is its catalogue entry and constants (torch-free), workload.py its torch code.
Nothing is imported here: the parent process imports spec.py alone.
"""
