"""Errors that carry the exit code the command line turns them into."""

from __future__ import annotations

# Exit codes are a contract with cron, Slurm and CI: never renumber them.
EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_INVALID = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class SdcscanError(Exception):
    """Base of every error sdcscan reports to a person; `exit_code` says how the process ends."""

    exit_code = EXIT_INVALID


class UsageError(SdcscanError):
    """Bad arguments or options: exit 2."""

    exit_code = EXIT_USAGE


class ProfileError(UsageError):
    """A profile file is missing, malformed or invalid: exit 2. The message names the file and the key."""


class InputRefused(UsageError):
    """An input the user gave (a calibration file) that a unit proved unusable at start-up: exit 2, and
    the run is void. Raised in a worker's `prepare`, carried to the parent as a message."""


class ReportError(SdcscanError):
    """A report could not be read or written: exit 3 unless the caller decides otherwise."""


class RunError(SdcscanError):
    """The run could not be carried out (could not start workers, write output): exit 3."""
