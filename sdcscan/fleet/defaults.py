"""`compare`'s default thresholds, apart from the engine: the command line shows them in `--help`
without importing the rules."""

DEFAULT_SLOW_Z = 3.5  # how many robust standard deviations below its cohort a unit's rate must fall
DEFAULT_SLOW_DROP = 0.10  # ... and how far below the cohort's median, as a fraction
DEFAULT_STALE_S = 60 * 86400.0  # Fleetscanner covers a fleet every 45-60 days
