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
    assert problems(bomb) == [
        "routes.yaml: the YAML's aliases expand it by more than 100000 values (an alias "
        "bomb?): write the repeated parts out, or reuse fewer"
    ]


def test_an_alias_inside_its_own_anchor_is_refused() -> None:
    assert problems("version: 1\nmodels: &loop {again: *loop}\n") == [
        "routes.yaml: an alias names a value that holds it, so the YAML never ends: write that "
        "part out instead"
    ]


def rule_file(rules: int) -> str:
    """A route with `rules` rules, written out (no alias)."""
    rule = "      - {{id: r{n}, when: {{keywords_any: [w{n}]}}, to: other}}\n"
    written = "".join(rule.format(n=n) for n in range(rules))
    route = f"  chat:\n    kind: chat\n    model: smollm2\n    rules:\n{written}"
    return VALID.replace("  chat: {kind: chat, model: smollm2}\n", route) + (
        "  other: {kind: chat, model: smollm2}\n"
    )


def test_a_large_rule_file_without_aliases_is_no_alias_bomb() -> None:
    """10,000 rules write some 100,000 YAML values out: only what aliases add is bounded."""
    config = parse_routes(rule_file(10_000), "routes.yaml")
    assert len(config.routes["chat"].rules) == 10_000


def test_the_size_of_a_document_is_worked_out_once_per_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Linear in the file, counted in steps: each written node's children are listed twice
    (going down, coming back up), whatever its aliases expand to: 2**50 values here."""
    import yaml

    from zest.router import _yaml

    listed: list[yaml.Node] = []
    children = _yaml._children
    monkeypatch.setattr(_yaml, "_children", lambda node: listed.append(node) or children(node))
    bomb = "l0: &l0 [x, x]\n" + "".join(
        f"l{n}: &l{n} [*l{n - 1}, *l{n - 1}]\n" for n in range(1, 50)
    )
    size = _yaml.yaml_size(yaml.compose(bomb, Loader=yaml.SafeLoader))
    # l_n expands to 2**(n+2) - 1 values; the mapping adds itself and its 50 keys.
    assert size.expanded == 1 + 50 + sum(2 ** (n + 2) - 1 for n in range(50)) == 2**52 - 3
    assert len(listed) == 2 * size.written
    plain = yaml.compose(rule_file(1_000), Loader=yaml.SafeLoader)
    assert _yaml.yaml_size(plain).added_by_aliases == 0


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
