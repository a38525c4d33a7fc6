"""The transfer progress line: redrawn on a terminal, printed once elsewhere."""

from __future__ import annotations

import io

from zest.gateway.cli._progress import Progress, human_size


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_sizes_read_like_download_tools_show_them() -> None:
    assert [human_size(n) for n in (999, 1536, 98_362_432, 4e12, 5e15)] == [
        "999 B",
        "1.5 KB",
        "98.4 MB",
        "4.0 TB",
        "5000.0 TB",
    ]


def test_off_a_terminal_only_the_final_line_is_printed() -> None:
    log = io.StringIO()
    progress = Progress("downloading m.gguf", 2000, stream=log)
    progress.update(1000)
    progress.update(1000)
    progress.done()
    line = log.getvalue()
    assert line.startswith("downloading m.gguf  [########################] 100%  2.0 KB / 2.0 KB  ")
    assert line.endswith("/s\n")
    assert line.count("\n") == 1


def test_without_a_total_bytes_and_rate_are_shown() -> None:
    log = io.StringIO()
    progress = Progress("copying m", None, stream=log)
    progress.update(1500)
    assert progress.line().startswith("copying m  1.5 KB  ")


def test_on_a_terminal_the_line_is_redrawn_in_place() -> None:
    terminal = Terminal()
    progress = Progress("copying m", 10, stream=terminal)
    progress.update(5)
    progress.done()
    assert terminal.getvalue().startswith("\rcopying m  [############------------]  50%")
    assert terminal.getvalue().endswith("\x1b[K\n")
