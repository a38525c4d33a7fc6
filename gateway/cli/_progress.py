"""Transfer progress on stderr, drawn by rich: redrawn in place on a terminal; elsewhere (a log,
CI) only the final line is printed, so that logs stay readable.

Every transfer of `zest models pull` shows this one bar, huggingface_hub's downloads included
(`hub_bar` stands in for the tqdm bar the library would draw).
"""

from __future__ import annotations

from functools import partial
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.filesize import decimal
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TransferSpeedColumn,
)

__all__ = ["HubBar", "TerminalBars", "Transfer", "human_size"]


def human_size(size: float) -> str:
    """1536 -> '1.5 kB' (powers of 1000, as the progress bar and download tools show them)."""
    return decimal(int(size))


class Transfer:
    """One transfer's bar (label, bar, percentage, bytes, rate), used as a context manager:
    the final line stays when the block succeeds, and goes when it raises."""

    def __init__(self, label: str, total: int | None, console: Console | None = None) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=console or Console(stderr=True),
        )
        self._task: TaskID = self._progress.add_task(label, total=total)

    def update(self, count: int) -> None:
        self._progress.advance(self._task, count)

    @property
    def received(self) -> int:
        return int(self._progress.tasks[0].completed)

    def __enter__(self) -> Transfer:
        self._progress.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is None:
            self._progress.stop()
        else:  # the error says what happened: no bar line beside it
            self._progress.live.transient = True
            self._progress.live.stop()


class HubBar(Transfer):
    """A `Transfer` that huggingface_hub draws into: what its `tqdm_class` asks of a bar (built
    with tqdm's keyword arguments, a context manager with `update(n)`). Pass it with its label
    bound, `functools.partial(HubBar, "downloading FILE")`: the library's own label is a URL."""

    def __init__(
        self, label: str, *, total: int | None = None, initial: int = 0, **tqdm_options: Any
    ) -> None:
        super().__init__(label, total)
        self.update(initial)


class TerminalBars:
    """The pull's progress on stderr, as `zest models pull` draws it (serving.Bars)."""

    def transfer(self, label: str, total: int | None) -> Transfer:
        return Transfer(label, total)

    def hub(self, label: str) -> Any:
        return partial(HubBar, label)
