"""Tables on stdout, drawn by rich: a header row over aligned columns, no borders.

On a terminal the table fits its width (long cells fold); elsewhere (a pipe, a file) each row
stays on one line, so that scripts can split it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.table import Table

__all__ = ["print_table"]

_UNBOUNDED = 10_000  # columns off a terminal: a row is never wrapped


def print_table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], console: Console | None = None
) -> None:
    table = Table(*headers, box=None, pad_edge=False)
    for row in rows:
        table.add_row(*row)
    console = console or Console()
    if not console.is_terminal:
        console.width = _UNBOUNDED
    console.print(table)
