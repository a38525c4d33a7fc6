"""Hostile routes files are refused with a clear error, never run out of memory or hang: alias
bombs, FIFOs and devices, huge files, keys given twice, tabs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.router.test_config import VALID, problems
from zest.errors import ConfigError
from zest.router import load_routes, parse_routes


def test_an_alias_bomb_is_refused_before_it_expands() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for level in "bcdefghi":
        previous = chr(ord(level) - 1)
        bomb += f"{level}: &{level} [" + ", ".join([f"*{previous}"] * 10) + "]\n"
    [problem] = problems(bomb)
    assert problem.startswith("routes.yaml: the YAML expands to more than 100000 values")


def test_anchors_reused_a_little_are_fine() -> None:
    text = VALID.replace(
        "  chat: {kind: chat, model: smollm2}",
        "  chat: &chat {kind: chat, model: smollm2}\n  chat2: *chat",
    )
    assert set(parse_routes(text, "routes.yaml").routes) == {"chat", "chat2"}


def test_a_key_given_twice_names_both_lines() -> None:
    text = VALID + "  chat: {kind: completion, model: smollm2}\n"
    assert problems(text) == [
        "routes.yaml: key 'chat' is given twice in the same mapping (lines 5 and 6): keep one"
    ]


def test_a_tab_says_so_plainly() -> None:
    [problem] = problems("version: 1\nmodels:\n\tsmollm2: {}\n")
    assert "a tab: YAML indents with spaces only" in problem


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "routes.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError) as refused:
        load_routes(fifo)
    assert refused.value.problems == [
        f"{fifo}: not a regular file: point --routes at a routes.yaml"
    ]


def test_a_loop_of_links_says_so(tmp_path: Path) -> None:
    routes, other = tmp_path / "routes.yaml", tmp_path / "other.yaml"
    routes.symlink_to(other)
    other.symlink_to(routes)
    with pytest.raises(ConfigError) as refused:
        load_routes(routes)
    assert refused.value.problems == [
        f"{routes}: a loop of symbolic links leads to no file: point the link at the routes file"
    ]


def test_a_device_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        load_routes(Path("/dev/zero"))
    assert "not a regular file" in refused.value.problems[0]


def test_a_huge_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    huge = tmp_path / "routes.yaml"
    with huge.open("w") as file:
        file.write(VALID)
        file.write("#" * (2 * 1024 * 1024))
    with pytest.raises(ConfigError) as refused:
        load_routes(huge)
    assert refused.value.problems == [f"{huge}: larger than 1024 KiB: a routes file is a few KiB"]


def test_a_system_prompt_on_a_completion_route_is_refused_not_ignored() -> None:
    text = VALID.replace(
        "  chat: {kind: chat, model: smollm2}",
        "  complete: {kind: completion, model: smollm2, system_prompt: Be brief.}",
    )
    assert problems(text) == [
        "routes.yaml: routes.complete.system_prompt: a completion route has no messages to put "
        "it before, so it would be ignored: remove it, or make the route kind: chat"
    ]


def test_max_tokens_that_leave_no_room_for_a_prompt_are_refused() -> None:
    text = VALID.replace("source: m.gguf}", "source: m.gguf, context_length: 512}").replace(
        "model: smollm2}", "model: smollm2, max_tokens: 512}"
    )
    assert problems(text) == [
        "routes.yaml: routes.chat.max_tokens: 512 leaves no room for a prompt in the "
        "context_length (512) of model 'smollm2': lower max_tokens below 512"
    ]
