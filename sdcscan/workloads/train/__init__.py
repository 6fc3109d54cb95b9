"""`train`: deterministic tiny MLP training.

spec.py is its catalogue entry and constants (torch-free), workload.py its torch code.
Nothing is imported here: the parent process imports spec.py alone.
"""
