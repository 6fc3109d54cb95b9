"""Crash files: an unexpected exception becomes exit 3, one `Error:` line and a file holding the traceback.

An internal error must never look like a verdict (exit 1 drains a node) and must not drown the
operator in a traceback; but whoever fixes it needs the traceback. It goes to
`<state dir>/crash/<UTC time>-<pid>.txt`, or to the temporary directory when the state directory is
not writable (a read-only container), or nowhere when neither is: the `Error:` line still names the
exception.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

from sdcscan import __version__


def crash_dirs() -> list[Path]:
    """Where a crash file may go, best first."""
    from sdcscan.outputs.history import default_state_dir

    return [default_state_dir() / "crash", Path(tempfile.gettempdir())]


def write_crash_file(err: BaseException, argv: list[str]) -> Path | None:
    """Write the traceback of `err` with the command line and versions; return its path, or None."""
    text = "".join(
        [
            f"sdcscan {__version__} crashed at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n",
            f"command: sdcscan {' '.join(argv)}\n",
            f"python {platform.python_version()} on {platform.platform()}\n\n",
            *traceback.format_exception(err),
        ]
    )
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for directory in crash_dirs():
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            # mkstemp: a new file (O_EXCL), never a planted symlink, private (0600): a traceback may show paths.
            fd, name = tempfile.mkstemp(
                prefix=f"sdcscan-crash-{stamp}-{os.getpid()}-", suffix=".txt", dir=directory
            )
            with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
                f.write(text)
            return Path(name)
        except OSError:
            continue
    return None


def report_crash(err: BaseException) -> None:
    """Say in one line that sdcscan failed internally, and where the details are."""
    path = write_crash_file(err, sys.argv[1:])
    where = f"details in {path}" if path else "no crash file could be written"
    summary = type(err).__name__ + (f": {str(err).splitlines()[0][:200]}" if str(err).strip() else "")
    print(f"Error: internal error ({summary}); {where}. Please report it.", file=sys.stderr)
