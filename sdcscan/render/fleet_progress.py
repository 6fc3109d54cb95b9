"""Progress of `compare` and `ingest` on a terminal: files read, reports and case rows, the phase.

Drawn only when stderr is a terminal and the command was not asked for JSON: a log, a pipe or a
cron mail gets nothing extra. The bar is transient: it is gone when the result is printed.
"""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from sdcscan.fleet.progress import FleetProgress

REFRESH_PER_S = 4
BAR_WIDTH = 20  # leaves room for the counts on an 80-column terminal


class FleetProgressBar:
    """A `fleet.progress.ProgressSink` that draws a bar on a terminal, and does nothing elsewhere."""

    def __init__(self, console: Console, *, wanted: bool = True) -> None:
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        if wanted and console.is_terminal:
            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(bar_width=BAR_WIDTH),
                MofNCompleteColumn(),
                TextColumn("files · {task.fields[counts]}"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
                refresh_per_second=REFRESH_PER_S,
            )

    def __enter__(self) -> FleetProgressBar:
        if self.bar is not None:
            self.bar.start()
            self.task = self.bar.add_task("starting", total=None, counts="")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.bar is not None:
            self.bar.stop()

    def __call__(self, update: FleetProgress) -> None:
        if self.bar is None or self.task is None:
            return
        counts = f"{update.reports:,} reports, {update.case_rows:,} case rows"
        self.bar.update(
            self.task,
            description=update.phase,
            completed=update.files_read,
            total=update.files or None,
            counts=counts,
            refresh=True,  # drawn now: an update comes once per chunk of files, and each phase is seen
        )
