"""stdout and stderr that a closed pipe or a full disk cannot turn into an exit code.

`sdcscan run ... 2>&1 | head -1` closes the pipe after one line; a cron log on a full filesystem fails
every write with ENOSPC. Either used to end the command in 1 (rich exits 1 on a broken pipe), which
only a unit that miscomputes may do. The command's streams are wrapped at its entry: the first write or
flush that fails says nothing more can be shown, the stream's descriptor is pointed at /dev/null (so no
buffered text fails again at exit), and the command goes on, writing its report and exiting with its
verdict's code.
"""

from __future__ import annotations

import os
from typing import Any, TextIO


class LossTolerantStream:
    """A text stream that forwards to `stream` until a write or flush fails, then drops what follows.

    Every other attribute (isatty, fileno, encoding, buffer, ...) is the wrapped stream's.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.lost: str | None = None  # why output stopped reaching its reader, once it has

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                return self._stream.write(text)
            except OSError as err:
                self._drop(err)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self._stream.flush()
            except OSError as err:
                self._drop(err)

    def _drop(self, err: OSError) -> None:
        self.lost = err.strerror or type(err).__name__
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (
            OSError,
            ValueError,
            AttributeError,
        ):  # no descriptor (a test's StringIO): nothing buffered there
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def install() -> None:
    """Wrap sys.stdout and sys.stderr (once)."""
    import sys

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, LossTolerantStream):
            setattr(sys, name, LossTolerantStream(stream))
