"""The one rich console every command writes to (stderr: people read stderr, machines stdout), and literal text.

Text that comes from a file, a profile, a path or a host name is shown as typed: print it as
`cell(text)` (a rich Text, for a line or a table cell), never inside a markup string. rich then
never reads `[bold]` or `[/x]` in it as markup (a `[/x]` with nothing to close raised MarkupError),
and control characters and ANSI escape sequences are written as visible escapes
(`sdcscan.outcomes.printable`).
"""

from __future__ import annotations

from rich.console import Console as Console  # re-exported: the command line names it in its types
from rich.text import Text

from sdcscan.outcomes import printable

MIN_PIPE_WIDTH = 120  # logs and pipes: don't wrap sentences at rich's default 80 columns


def stderr_console() -> Console:
    """A new console on the current `sys.stderr`, without rich's number/URL highlighting or emoji codes.

    Created per call, not once at import: click's test runner swaps sys.stderr for each command.
    Emoji codes are off so that a host named `db:fire:` prints as typed.
    """
    console = Console(stderr=True, highlight=False, emoji=False)
    if not console.is_terminal:
        console.width = max(console.width, MIN_PIPE_WIDTH)  # tables still need a width to lay out
        console.soft_wrap = True  # a log or a pipe gets each message on one line, whole (grep finds it)
    return console


def cell(value: object, style: str = "") -> Text:
    """`value` as a table cell (or a line) shown as typed, optionally in `style`."""
    return Text(printable(str(value)), style=style)
