"""How far a long fleet command has got: what `compare` and `ingest` tell the person waiting.

The library only reports (`ProgressSink`); `render.fleet_progress` draws it on a terminal and draws
nothing otherwise, so a pipe, a log or `--json` gets no extra line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

READING = "reading reports"
JUDGING = "judging"  # the engine runs the steps and the findings are assembled
WRITING = "writing the dataset"


@dataclass(frozen=True)
class FleetProgress:
    """One update: the phase, the report files read of all named, the reports and case rows so far."""

    phase: str
    files_read: int
    files: int
    reports: int
    case_rows: int


ProgressSink = Callable[[FleetProgress], None]


def no_progress(_: FleetProgress) -> None:
    """The sink of callers that show nothing (tests, the distributed run's cluster report)."""


class Counter:
    """Running totals of a read, each chunk's result added as it arrives."""

    def __init__(self, files: int, sink: ProgressSink) -> None:
        self.files = files
        self.sink = sink
        self.files_read = self.reports = self.case_rows = 0

    def read(self, files: int, reports: int, case_rows: int) -> None:
        """A chunk was read: add it, and tell the sink."""
        self.files_read += files
        self.reports += reports
        self.case_rows += case_rows
        self.phase(READING)

    def phase(self, name: str) -> None:
        """Tell the sink the current totals under phase `name`."""
        self.sink(FleetProgress(name, self.files_read, self.files, self.reports, self.case_rows))
