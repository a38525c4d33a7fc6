"""The affinity key (zest.affinity): stable across a conversation's turns, different for
another route, system prompt or first question, and pinned to its documented algorithm so
that clients computing it elsewhere keep getting the same key."""

from __future__ import annotations

import ast
import hashlib
import sys
from pathlib import Path

import pytest

import zest
from zest.affinity import PROMPT_HEAD_CHARS, affinity_key, client_key

SYSTEM = {"role": "system", "content": "You answer in French."}
FIRST = {"role": "user", "content": "Name three colours."}
REPLY = {"role": "assistant", "content": "Rouge, bleu, vert."}
SECOND = {"role": "user", "content": "And three animals?"}


def test_every_turn_of_a_conversation_has_the_same_key() -> None:
    turn1 = affinity_key([SYSTEM, FIRST], "chat")
    assert affinity_key([SYSTEM, FIRST, REPLY, SECOND], "chat") == turn1
    assert affinity_key([SYSTEM, FIRST, REPLY, SECOND, REPLY], "chat") == turn1


@pytest.mark.parametrize(
    ("messages", "route"),
    [
        ([SYSTEM, FIRST], "summarization"),  # another route
        ([{"role": "system", "content": "You answer in German."}, FIRST], "chat"),
        ([SYSTEM, SECOND], "chat"),  # another first question
        ([FIRST], "chat"),  # no system prompt
        ([{"role": "developer", "content": SYSTEM["content"]}, FIRST], "chat"),  # role as sent
    ],
)
def test_another_start_has_another_key(messages: list[dict[str, str]], route: str) -> None:
    assert affinity_key(messages, route) != affinity_key([SYSTEM, FIRST], "chat")


def test_the_key_is_the_documented_sha256() -> None:
    """The module docstring's algorithm, computed here by hand: a client in another language
    that follows it gets the same key."""
    text = (
        '["zest-affinity-1","chat",[["system","You answer in French."],'
        '["user","Name three colours."]]]'
    )
    expected = hashlib.sha256(text.encode()).hexdigest()[:16]
    assert affinity_key([SYSTEM, FIRST, REPLY], "chat") == expected
    assert len(expected) == 16


def test_text_parts_count_as_their_joined_text() -> None:
    parts = {"role": "user", "content": [{"type": "text", "text": "Name three "},
                                         {"type": "text", "text": "colours."}]}  # fmt: skip
    assert affinity_key([SYSTEM, parts], "chat") == affinity_key([SYSTEM, FIRST], "chat")


def test_no_user_message_hashes_them_all() -> None:
    assert affinity_key([SYSTEM], "chat") != affinity_key([], "chat")


def test_a_completion_prompt_is_keyed_by_its_head() -> None:
    head = "def fibonacci(n):\n" * 40
    assert len(head) > PROMPT_HEAD_CHARS
    assert affinity_key(head + "    return", "autocomplete") == affinity_key(head, "autocomplete")
    assert affinity_key("short", "autocomplete") != affinity_key("short!", "autocomplete")


def test_a_client_key_wins_session_id_first() -> None:
    assert client_key("user-42:conv-7", "abc") == "user-42:conv-7"
    assert client_key(None, "0123456789abcdef") == "0123456789abcdef"
    assert client_key("", "") is None
    assert client_key(None, None) is None


@pytest.mark.parametrize("odd", ["two words", "x" * 129, "line\r\nbreak", "é"])
def test_a_client_key_that_is_not_a_plain_token_is_hashed(odd: str) -> None:
    key = client_key(odd, None)
    assert key is not None
    assert len(key) == 16
    assert key == client_key(odd, None)  # still the same key every time
    assert all(c in "0123456789abcdef" for c in key)


def test_the_package_offers_the_helper() -> None:
    assert zest.affinity_key is affinity_key


def test_the_module_needs_only_the_standard_library() -> None:
    """Clients may copy zest/affinity.py as it is: it imports nothing outside the stdlib."""
    source = Path(zest.__file__).with_name("affinity.py").read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
