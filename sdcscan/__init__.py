"""sdcscan: screen CPUs and GPUs for silent data corruption."""

__version__ = "0.1.0"
