"""The transfer progress line (rich): printed once off a terminal, gone when the transfer fails,
and the same bar for huggingface_hub's downloads; the command's tables."""

from __future__ import annotations

import io
from functools import partial

import pytest
from rich.console import Console

from zest.gateway.cli._progress import HubBar, Transfer, human_size
from zest.gateway.cli._tables import print_table


def test_sizes_read_like_download_tools_show_them() -> None:
    assert [human_size(n) for n in (999, 1536, 98_362_432, 4e12)] == [
        "999 bytes",
        "1.5 kB",
        "98.4 MB",
        "4.0 TB",
    ]


def test_off_a_terminal_only_the_final_line_is_printed() -> None:
    log = io.StringIO()
    with Transfer("downloading m.gguf", 2000, Console(file=log, width=100)) as progress:
        progress.update(1000)
        progress.update(1000)
    line = log.getvalue()
    assert line.startswith("downloading m.gguf ━")
    assert " 100% 2.0/2.0 kB " in line
    assert line.endswith("/s\n")
    assert line.count("\n") == 1


def test_without_a_total_bytes_are_shown() -> None:
    log = io.StringIO()
    with Transfer("copying m", None, Console(file=log, width=100)) as progress:
        progress.update(1500)
    assert "1.5/? kB" in log.getvalue()
    assert progress.received == 1500


def test_a_failed_transfer_leaves_no_line() -> None:
    log = io.StringIO()

    def copy() -> None:
        with Transfer("copying m", 10, Console(file=log)) as progress:
            progress.update(5)
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        copy()
    assert log.getvalue() == ""


def test_huggingface_hub_draws_into_the_same_bar() -> None:
    # What hf_hub_download does with tqdm_class: build it with tqdm's keywords, use it as a
    # context manager, update it per chunk (a resumed download starts at `initial`).
    bar = partial(HubBar, "downloading m.gguf")
    with bar(desc="https://hub/...", total=3000, initial=1000, unit="B", unit_scale=True) as hub:
        hub.update(2000)
    assert hub.received == 3000


def test_a_table_keeps_each_row_on_one_line_off_a_terminal() -> None:
    out = io.StringIO()
    long = "pkg:dist/" + "x" * 300
    print_table(["TASK", "SOURCE"], [["chat", long], ["notes", "-"]], Console(file=out))
    lines = out.getvalue().splitlines()
    assert [line.split() for line in lines] == [["TASK", "SOURCE"], ["chat", long], ["notes", "-"]]
