"""The one rich console every command writes to: stderr, because people read stderr and machines stdout."""

from __future__ import annotations

from rich.console import Console

MIN_PIPE_WIDTH = 120  # logs and pipes: don't wrap sentences at rich's default 80 columns


def stderr_console() -> Console:
    """A new console on the current `sys.stderr`, without rich's number/URL highlighting.

    Created per call, not once at import: click's test runner swaps sys.stderr for each command.
    """
    console = Console(stderr=True, highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, MIN_PIPE_WIDTH)
    return console
