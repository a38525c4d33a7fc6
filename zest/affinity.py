"""The affinity key: which replica of a fleet should serve a request, so that the replica whose
prefix cache holds a conversation's start serves its later turns too.

A load balancer picks the replica before the request is served, so the key must be computable
without zest: a client computes it with `affinity_key` and sends it as `x-zest-affinity`
(HAProxy hashes that header: deploy/haproxy/haproxy.cfg); zest answers every generation with
the key it used, so a client that does not compute it can send back the one it got. A client's
`x-session-id` is the key when given (the balancer hashes it instead).

The algorithm, for clients in any language (standard library only, so this module may be
copied as it is):

    chat:        the messages up to and including the first user message (all of them when
                 none is a user message), each as [role, text] (text: the content string, or
                 its text parts joined), then
                 key = sha256(json([VERSION, route, those pairs]))[:16 hex]
    completion:  key = sha256(json([VERSION, route, prompt[:PROMPT_HEAD_CHARS]]))[:16 hex]

json is `json.dumps(..., ensure_ascii=False, separators=(",", ":"))` in UTF-8; `route` is the
request's `model` (the task). A conversation keeps its system prompt and first question as it
grows, so every turn has the same key; a completion prompt that grows at its end (autocomplete)
keeps its head.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "AFFINITY_HEADER",
    "PROMPT_HEAD_CHARS",
    "SESSION_HEADER",
    "VERSION",
    "affinity_key",
    "client_key",
]

AFFINITY_HEADER = "x-zest-affinity"
SESSION_HEADER = "x-session-id"
VERSION = "zest-affinity-1"  # part of what is hashed: a new algorithm gets a new name
PROMPT_HEAD_CHARS = 512
KEY_HEX = 16
# A key a client sends is used as it is when it is a plain token (it comes back in a header);
# anything else is hashed, so the answer never echoes arbitrary bytes.
_PLAIN_KEY = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")


def affinity_key(messages: Iterable[Mapping[str, Any]] | str, route: str) -> str:
    """The key of a chat request (OpenAI-style messages) or of a completion prompt (a string)."""
    if isinstance(messages, str):
        return _digest([VERSION, route, messages[:PROMPT_HEAD_CHARS]])
    return _digest([VERSION, route, _stable_prefix(messages)])


def client_key(session_id: str | None, sent_key: str | None) -> str | None:
    """The key a client chose, if any: its session id, else the key it sent (what the balancer
    hashed). None: the key is computed from the request (`affinity_key`)."""
    for given in (session_id, sent_key):
        if given:
            return given if _PLAIN_KEY.fullmatch(given) else _digest([VERSION, given])
    return None


def _stable_prefix(messages: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    prefix = []
    for message in messages:
        role = str(message.get("role", ""))
        prefix.append([role, _text(message.get("content"))])
        if role == "user":
            break
    return prefix


def _text(content: Any) -> str:
    """A message's text: its content string, or the text of its parts, joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))


def _digest(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:KEY_HEX]
