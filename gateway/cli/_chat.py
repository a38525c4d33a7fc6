"""`zest chat [TASK]` (an interactive conversation with a running gateway) and `zest run TASK
[PROMPT]` (one answer, the prompt from the command line or stdin), both streamed.

In `zest chat` the history is kept until `/reset` (`/history` shows it); `/task NAME` talks to
another task (afresh); Ctrl-C stops the answer being written, not the session: the part written
stays in the history, marked as cut; Ctrl-D (or /quit) ends it. After each answer a line says
what served it, from the answer's own headers and usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import connect_sse

from zest.errors import CommandError
from zest.gateway.cli._client import Gateway, add_gateway_options, gateway_of
from zest.gateway.cli._ctrl_c import StopOnCtrlC

__all__ = ["add_chat_commands"]

HELP = (
    "/reset clears the history, /history shows it, /task NAME talks to another task, "
    "Ctrl-C cuts an answer short (kept, marked as cut), /quit (or Ctrl-D) leaves"
)
_ENDPOINTS = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}
# Below this many tokens an answer's decode rate measures a step's overhead, not decoding:
# a two-token answer read "1 tokens/s".
MIN_TOKENS_FOR_A_RATE = 4


def add_chat_commands(commands: Any) -> None:
    chat = commands.add_parser("chat", help="talk to a task of a running gateway (streamed)")
    chat.add_argument("task", nargs="?", default="chat", help="the task (default: chat)")
    _add_sampling(chat)
    add_gateway_options(chat)
    chat.set_defaults(func=_chat)
    run = commands.add_parser("run", help="one answer from a task: prompt as argument or stdin")
    run.add_argument("task", help="the task")
    run.add_argument("prompt", nargs="*", help="the prompt (default, or '-': read stdin)")
    _add_sampling(run)
    add_gateway_options(run)
    run.set_defaults(func=_run)


def _add_sampling(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-tokens", type=int, help="answer length (default: the route's)")
    parser.add_argument("--temperature", type=float, help="(default: the route's)")


@dataclass
class Served:
    """What served an answer: the route header and the usage the stream ended with."""

    route: str = ""
    usage: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        parts = dict(p.split("=", 1) for p in self.route.split("; ") if "=" in p)
        where = f"{parts.get('model', '?')} on {parts.get('device', '?')}"
        usage = self.usage
        if not usage:
            return f"[{where}]"
        completion = usage.get("completion_tokens", 0)
        tokens = f"{usage.get('prompt_tokens', 0)} in, {completion} out"
        rate = (usage.get("pipeline") or {}).get("decode_tokens_per_s")
        if not rate or completion < MIN_TOKENS_FOR_A_RATE:
            return f"[{where}; {tokens}; — tokens/s]"
        return f"[{where}; {tokens}; {rate:.0f} tokens/s]"


@dataclass(frozen=True)
class Turn:
    """One exchange of a chat; `cut`: Ctrl-C stopped the answer, which holds what was written."""

    user: str
    assistant: str
    cut: bool = False


@dataclass
class Session:
    """One conversation with a task: its kind, its history, the sampling asked for."""

    client: httpx.Client
    gateway: Gateway
    task: str
    kind: str
    max_tokens: int | None = None
    temperature: float | None = None
    history: list[Turn] = field(default_factory=list)
    served: Served = field(default_factory=Served)
    written: list[str] = field(default_factory=list)  # the pieces of the answer under way
    asked: str | None = None  # the text of the turn under way, until the history keeps it
    ctrl_c: StopOnCtrlC = field(default_factory=StopOnCtrlC)  # around `answer`: see _ctrl_c.py

    def answer(self, text: str) -> Iterator[str]:
        """The answer's pieces as they come; the history keeps the turn once it is whole."""
        body = self._body(text)
        self.written, self.asked = [], text
        self.served = Served()
        with connect_sse(self.client, "POST", _ENDPOINTS[self.kind], json=body) as source:
            _raise_for_status(source.response, self.gateway)
            self.served.route = source.response.headers.get("x-zest-route", "")
            self.ctrl_c.watch(source.response)
            try:
                for event in source.iter_sse():
                    if event.data == "[DONE]":
                        break
                    for piece in self._pieces(json.loads(event.data)):
                        self.written.append(piece)
                        yield piece
            except httpx.HTTPError:
                if not self.ctrl_c.stopped:  # else the socket Ctrl-C shut ended the read
                    raise
        if self.ctrl_c.stopped:  # its KeyboardInterrupt was lost: the stop still counts
            raise KeyboardInterrupt
        self._keep(cut=False)

    def cut(self) -> bool:
        """Ctrl-C stopped the answer under way: its turn stays, with the part written (False:
        no turn was under way, or the history of a completion task keeps none)."""
        return self._keep(cut=True)

    def _keep(self, *, cut: bool) -> bool:
        asked, self.asked = self.asked, None
        if asked is None or self.kind != "chat":
            return False
        self.history.append(Turn(asked, "".join(self.written), cut))
        return True

    def _body(self, text: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.task,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.kind == "chat":
            body["messages"] = [*self._messages(), {"role": "user", "content": text}]
        else:
            body["prompt"] = text
        return body

    def _messages(self) -> list[dict[str, str]]:
        """The history as the model is sent it: a cut answer as far as it was written."""
        messages = []
        for turn in self.history:
            messages.append({"role": "user", "content": turn.user})
            messages.append({"role": "assistant", "content": turn.assistant})
        return messages

    def _pieces(self, chunk: dict[str, Any]) -> Iterator[str]:
        if "error" in chunk:  # a failure after the answer began
            error = chunk["error"]
            raise CommandError(f"the answer broke off: {error.get('message')}")
        if chunk.get("usage"):
            self.served.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content") or choice.get("text") or ""
            if piece:
                yield piece


def _raise_for_status(response: httpx.Response, gateway: Gateway) -> None:
    if response.status_code == 200:
        return
    response.read()
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text[:200]
    hint = " (pass the key with --api-key or ZEST_API_KEY)" if response.status_code == 401 else ""
    raise CommandError(f"{gateway.url} answered {response.status_code}: {message}{hint}")


def _task_kinds(client: httpx.Client, gateway: Gateway) -> dict[str, str]:
    """Each task's kind, from GET /v1/models (an unreachable gateway says how to start one)."""
    try:
        response = client.get("/v1/models")
    except httpx.TransportError as exc:
        raise CommandError(
            f"cannot reach the gateway at {gateway.url} ({exc}): start it with `zest serve`, "
            "or pass --url (or set ZEST_URL)"
        ) from None
    _raise_for_status(response, gateway)
    return {
        model["id"]: (model.get("zest") or {}).get("kind") or "chat"
        for model in response.json().get("data", [])
    }


def _session(client: httpx.Client, gateway: Gateway, task: str, args: Any) -> Session:
    kinds = _task_kinds(client, gateway)
    kind = kinds.get(task)
    if kind is None:
        raise CommandError(f"unknown task {task!r}: use one of {', '.join(sorted(kinds))}")
    if kind not in _ENDPOINTS:
        raise CommandError(f"task {task!r} is an {kind} route: it answers with vectors, not text")
    return Session(client, gateway, task, kind, args.max_tokens, args.temperature)


def _run(args: argparse.Namespace) -> int:
    gateway = gateway_of(args)
    prompt = " ".join(args.prompt)
    if not prompt or prompt == "-":
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise CommandError("no prompt: give it as arguments or on stdin")
    with gateway.client(timeout=None) as client:
        session = _session(client, gateway, args.task, args)
        try:
            with session.ctrl_c.installed():
                for piece in session.answer(prompt):
                    sys.stdout.write(piece)
                    sys.stdout.flush()
        except KeyboardInterrupt:
            print(file=sys.stderr)
            return 130
    sys.stdout.write("\n")
    print(session.served.line(), file=sys.stderr)
    return 0


def _chat(args: argparse.Namespace) -> int:
    import readline  # noqa: F401  (line editing and history for input())

    gateway = gateway_of(args)
    with gateway.client(timeout=None) as client:
        session = _session(client, gateway, args.task, args)
        print(f"zest chat: task {session.task} ({session.kind}) at {gateway.url}; {HELP}")
        while (text := _read(session)) is not None:
            if text.startswith("/"):
                session = _command(session, text, client, gateway, args)
            elif text.strip():
                _answer(session, text)
    return 0


def _read(session: Session) -> str | None:
    """The next line typed; None at the end (Ctrl-D). Ctrl-C at the prompt only says how."""
    while True:
        try:
            return input(f"{session.task}> ")
        except EOFError:
            print()
            return None
        except KeyboardInterrupt:
            print("\n(Ctrl-D or /quit leaves)")


def _answer(session: Session, text: str) -> None:
    try:
        with session.ctrl_c.installed():
            for piece in session.answer(text):
                print(piece, end="", flush=True)
        print()
        print(session.served.line())
    except KeyboardInterrupt:  # the stream is closed: the gateway stops generating
        kept = "; kept in the history, marked as cut" if session.cut() else ""
        print(f"\n(stopped{kept})")
    except (CommandError, httpx.HTTPError) as exc:
        print(f"\nerror: {exc}")


def _command(
    session: Session, text: str, client: httpx.Client, gateway: Gateway, args: Any
) -> Session:
    name, _, rest = text.partition(" ")
    if name in ("/quit", "/exit", "/bye"):
        raise SystemExit(0)
    if name == "/reset":
        session.history.clear()
        print("(history cleared)")
    elif name == "/history":
        _print_history(session)
    elif name == "/task" and rest.strip():
        try:
            session = _session(client, gateway, rest.strip(), args)
            print(f"(task {session.task}, {session.kind}; history cleared)")
        except CommandError as exc:
            print(f"error: {exc}")
    else:
        print(HELP)
    return session


def _print_history(session: Session) -> None:
    if not session.history:
        print("(no history)")
    for turn in session.history:
        print(f"you: {turn.user}")
        print(f"{session.task}: {turn.assistant}" + (" [cut]" if turn.cut else ""))
