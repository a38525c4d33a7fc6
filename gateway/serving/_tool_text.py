"""The text of a tool-use answer, streamed as it comes once it is clearly not a tool call.

With `tool_choice: auto` the answer is zest's constrained envelope: `{"tool_calls": [...]}` or
`{"response": ...}` (serving/_tools.py). Calls are sent whole when the answer ends (a call's
arguments are read as one JSON value), but a text answer need not wait: as soon as the answer
reads `{"response": "`, what follows is the text, a JSON string, decoded here a piece at a
time and given out as it comes. An escape whose end has not come yet is held back (`\\u00`,
or the first half of a surrogate pair), and the string's closing quote ends it. So what was
given out is always the start of what the whole answer reads as (ToolUse.read), cut short or
not: the end adds only the rest.

A response in the client's own format (an object, not a string) is still sent whole.
"""

from __future__ import annotations

import json
import re

__all__ = ["ResponseText"]

_STRING_RESPONSE = re.compile(r'\s*\{\s*"response"\s*:\s*"')
_PLAIN = re.compile(r'[^"\\]+')
_ESCAPE = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])')
_HIGH_SURROGATE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LOW_SURROGATE = re.compile(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_ESCAPE_CHARS = 6  # \uXXXX


class ResponseText:
    """Feed it an auto tool-use answer's deltas; it gives out the text of a string response."""

    def __init__(self) -> None:
        self._answer = ""
        self._at: int | None = None  # where the string's next undecoded character is
        self._ended = False
        self.sent = ""  # the text given out so far

    @property
    def streaming(self) -> bool:
        """The answer is a text response (its text goes out as it comes)."""
        return self._at is not None

    def feed(self, text: str) -> str:
        """The response's text that `text` completes (empty: none yet, or no text answer)."""
        self._answer += text
        if self._at is None:
            head = _STRING_RESPONSE.match(self._answer)
            if head is None:
                return ""
            self._at = head.end()
        decoded = self._decode()
        self.sent += decoded
        return decoded

    def rest(self, whole: str | None) -> str:
        """What of the whole answer's text (ToolUse.read's) was not given out yet."""
        if whole is None or not whole.startswith(self.sent):
            return ""
        return whole[len(self.sent) :]

    def _decode(self) -> str:
        out, answer, at = [], self._answer, self._at or 0
        while not self._ended and at < len(answer):
            if (plain := _PLAIN.match(answer, at)) is not None:
                out.append(plain.group())
                at = plain.end()
            elif answer[at] == '"':
                self._ended = True
            elif (escape := _escape_at(answer, at)) is not None:
                out.append(json.loads(f'"{escape}"'))
                at += len(escape)
            else:
                break  # an escape whose end has not come yet
        self._at = at
        return "".join(out)


def _escape_at(answer: str, at: int) -> str | None:
    """The whole escape at `at` (a surrogate pair's two halves together), None until it has
    come. A malformed one stops the stream there: the whole answer's reading says the rest."""
    escape = _ESCAPE.match(answer, at)
    if escape is None:
        return None
    first = escape.group()
    if _HIGH_SURROGATE.fullmatch(first) is None:
        return first
    rest = answer[escape.end() : escape.end() + _ESCAPE_CHARS]
    if len(rest) < _ESCAPE_CHARS and rest[:1] in ("", "\\"):
        return None  # its low half may be on its way
    low = _LOW_SURROGATE.fullmatch(rest)
    return first + rest if low is not None else first
