"""Grammars made and checked in a child process, off the event loop, with a time and a memory
bound: a JSON Schema whose grammar would crash llama.cpp's parser, fill the memory or take
minutes to build costs one child process and answers a 400, never the gateway.

Requests' schemas are bounded before this (router's SchemaLimits); this is the second line,
for whatever passes the bounds. The child (engines/_grammar_child.py) converts the schema with
llama-cpp-python's converter and parses the grammar with llama.cpp on a thread whose stack is
a small fraction of a serving thread's, so what it accepts the serving threads parse safely.
Answers are cached by schema text: an agent's schema is checked once, not per request.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import select
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cachetools import LRUCache

from zest.errors import BadRequestError, clipped, shown
from zest.router import SCHEMA_LIMITS

__all__ = ["GRAMMARS", "GrammarChecker", "GrammarLimits"]

log = logging.getLogger("zest.engines")

_CHILD = Path(__file__).with_name("_grammar_child.py")
_FIX = "remove or simplify that part of the schema (zest's limits: docs/structured-outputs.md)"


@dataclass(frozen=True)
class GrammarLimits:
    timeout_s: float = 10.0  # to convert and parse one schema
    memory_bytes: int = 1 << 30  # the child's address space beyond what llama.cpp maps
    grammar_bytes: int = SCHEMA_LIMITS.grammar_bytes
    # Serving threads have 8 MiB (Linux's default); a grammar that parses in 512 KiB leaves
    # them a 16x margin against the parser's recursion.
    stack_bytes: int = 512 * 1024


class GrammarChecker:
    """One child process, asked one schema at a time; restarted after a crash or a time-out."""

    def __init__(self, limits: GrammarLimits = GrammarLimits(), cache_size: int = 256) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._child: subprocess.Popen[str] | None = None
        self._answers: LRUCache[str, str | BadRequestError] = LRUCache(cache_size)
        self.restarts = 0  # children lost to a crash or a time-out (tests read it)

    async def grammar(self, schema: dict[str, Any], param: str = "response_format") -> str:
        """The checked GBNF grammar for `schema`, or a 400 naming why there is none."""
        text = json.dumps(schema, sort_keys=True)
        answer = self._answers.get(text)
        if answer is None:
            answer = await asyncio.to_thread(self._check, text, param)
            self._answers[text] = answer
        if isinstance(answer, BadRequestError):
            raise BadRequestError(answer.message, param=answer.param)
        return answer

    def close(self) -> None:
        with self._lock:
            self._stop()

    # --- on a worker thread ------------------------------------------------------------------

    def _check(self, schema: str, param: str) -> str | BadRequestError:
        with self._lock:
            child = self._running()
            try:
                reply = self._ask(child, schema)
            except (TimeoutError, OSError, ValueError) as exc:
                self._stop()
                self.restarts += 1
                return _refusal(_lost(exc, self.limits.timeout_s), param)
        if "grammar" in reply:
            return str(reply["grammar"])
        return _refusal(_reason(reply, self.limits), param)

    def _running(self) -> subprocess.Popen[str]:
        if self._child is None or self._child.poll() is not None:
            self._child = self._start()
        return self._child

    def _start(self) -> subprocess.Popen[str]:
        limits = self.limits
        args = [limits.memory_bytes, limits.grammar_bytes, limits.stack_bytes]
        child = subprocess.Popen(
            [sys.executable, "-P", str(_CHILD), *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # llama.cpp's parse errors: the answer says it
            text=True,
        )
        _read_line(child, 60.0)  # {"ready": true}: llama.cpp loaded
        return child

    def _ask(self, child: subprocess.Popen[str], schema: str) -> dict[str, Any]:
        assert child.stdin is not None
        child.stdin.write(json.dumps({"schema": schema}) + "\n")
        child.stdin.flush()
        reply = json.loads(_read_line(child, self.limits.timeout_s))
        assert isinstance(reply, dict)
        return reply

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is not None and child.poll() is None:
            child.kill()
        if child is not None:
            child.wait()
            for stream in (child.stdin, child.stdout):
                if stream is not None:
                    stream.close()


def _read_line(child: subprocess.Popen[str], timeout_s: float) -> str:
    """One line of the child's answer; TimeoutError past `timeout_s`, ValueError if it died.
    One request is in flight at a time, so nothing is buffered ahead of the line select sees."""
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], timeout_s)
    if not ready:
        child.kill()
        raise TimeoutError
    line = child.stdout.readline()
    if not line:
        raise ValueError(f"the grammar checker exited ({child.wait()})")
    return line


def _lost(exc: Exception, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"its grammar took over {timeout_s:g} s to build and check"
    log.warning("the grammar checker died on a schema (%s); it restarts", exc)
    return "llama.cpp could not parse the grammar made of it (the check crashed)"


def _reason(reply: dict[str, Any], limits: GrammarLimits) -> str:
    error, detail = reply.get("error"), str(reply.get("detail", ""))
    if error == "memory":
        return f"its grammar needs more than {limits.memory_bytes >> 20} MiB to build"
    if error == "size":
        return f"its grammar is {detail} bytes, over zest's limit of {limits.grammar_bytes}"
    if error == "parse":
        return "llama.cpp could not parse the grammar made of it"
    if error == "RecursionError":
        return "it nests too deeply"
    if error == "KeyError":
        return f"a part lacks {shown(detail)}"
    return clipped(detail, 200) or "a part it does not support"


def _refusal(reason: str, param: str) -> BadRequestError:
    return BadRequestError(
        f"{param}: llama.cpp cannot constrain the output to this JSON Schema ({reason}): {_FIX}",
        param=param,
    )


GRAMMARS = GrammarChecker()  # one per process: every llama.cpp model shares it
atexit.register(GRAMMARS.close)
