"""`zest bench --phases mixed`: an interactive task beside a batch task on one model (issues
25 and 35).

One autocomplete request a second (a fresh ~40-token text, 16 tokens, streamed) for `seconds`,
first alone (idle), then beside `SUMMARIES` clients that loop summaries of fresh ~1,600-token
documents (128 tokens each: loaded), then beside as many looping summaries as the servers have
slots (`SLOTS`: full, every slot held, where zest preempts). zest takes the tasks' priorities
from its routes (`autocomplete` above `summarization`, bench/_servers.py); llama-server serves
both as they come. Each server runs its spells in turn, round by round with the order
alternating, in one run.

Read off: the autocomplete's time to first token (TTFT) and to its last token p50/p95 in each
spell, the ratios of the loaded and full p95s to the idle ones (how much the batch task slows
the interactive one), and the summaries' tokens/s: the completion tokens streamed to the
summary clients inside the loaded window, over the window's length. Beside it, how the
machine's work was shared in that window: each task's tokens processed a second, prompt and
completion (work_in_window), for the servers give the two tasks different shares of one CPU.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from zest.bench._servers import SLOTS
from zest.bench._workload import percentile

__all__ = [
    "AUTOCOMPLETE_TOKENS",
    "SPELLS",
    "SUMMARIES",
    "SUMMARY_TOKENS",
    "MixedServer",
    "Spell",
    "document",
    "mixed",
    "snippet",
    "spell_figures",
    "tokens_in_window",
    "work_in_window",
]

AUTOCOMPLETE_TOKENS = 16
SUMMARY_TOKENS = 128
SUMMARIES = 3  # looping summary clients in the loaded spell
# Summary loops beside the autocompletes in each spell: none, a few, one for every slot.
SPELLS = {"idle": 0, "loaded": SUMMARIES, "full": SLOTS}
DOCUMENT_SENTENCES = 56  # ~1,570 tokens of SmolLM2's tokenizer (~28 a sentence)
SUMMARY_SYSTEM = "Summarize the report in a few sentences, keeping its names and figures."
_LEAD_S = 1.0  # the summaries run this long before the first autocomplete request
TIMEOUT_S = 900  # a request with no byte for this long is given up (and counted that long)

_PLACES = ["Riverton", "Harbour Point", "Millbrook", "Eastfield", "Stonebridge", "Ashford"]
_SUBJECTS = [
    "the water board",
    "the school district",
    "the bus company",
    "the hospital trust",
    "the port authority",
    "the library service",
    "the housing office",
    "the parks department",
]
_VERBS = [
    "approved",
    "postponed",
    "reviewed",
    "questioned",
    "cut",
    "extended",
    "published",
    "rejected",
]
_OBJECTS = [
    "a budget of {n} million dollars for new pipes",
    "a plan to hire {n} more nurses before winter",
    "a timetable that adds {n} evening buses on weekdays",
    "a report counting {n} complaints about late repairs",
    "a contract for {n} electric ferries over five years",
    "a survey of {n} households on rents and repairs",
    "a proposal to open {n} reading rooms on Sundays",
    "a study of {n} trees damaged by the spring storms",
]
_ENDINGS = [
    "after a debate that lasted until midnight",
    "although several members asked for more figures",
    "citing the rising cost of materials",
    "despite a petition signed by residents",
    "following a vote of six to three",
    "pending a second reading next month",
]
_AUTOCOMPLETE = (
    "Meeting notes {tag}: the team agreed to move the release of the billing service to "
    "Thursday, because the database migration needs one more day of testing, and"
)


def document(serial: int, nonce: str, sentences: int = DOCUMENT_SENTENCES) -> str:
    """Report `serial` of a run: a new title (no KV cache has seen its first tokens) over
    sentences drawn by the serial, so no two documents share a paragraph either."""
    pick = random.Random(serial)
    body = []
    for _ in range(sentences):
        sentence = (
            f"In {pick.choice(_PLACES)}, {pick.choice(_SUBJECTS)} {pick.choice(_VERBS)} "
            f"{pick.choice(_OBJECTS).format(n=pick.randint(2, 950))} "
            f"{pick.choice(_ENDINGS)}."
        )
        body.append(sentence)
    return f"Report {nonce}-{serial}\n\n" + " ".join(body)


def snippet(serial: int, nonce: str) -> str:
    """The autocomplete request's text (~40 tokens), new from its first token."""
    return _AUTOCOMPLETE.format(tag=f"{nonce}-{serial}")


@dataclass(frozen=True)
class MixedServer:
    name: str
    base: str  # …/v1
    autocomplete: str  # the `model` of its autocomplete requests
    summarization: str  # the `model` of its summary requests


@dataclass
class Timed:
    """One streamed request: when it was sent and when each content event came."""

    sent: float
    times: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    # When the client gave up waiting (TIMEOUT_S without a byte): its times count as that
    # long, a lower bound (a server that starves a request must not drop out of the figures).
    gave_up: float | None = None

    @property
    def ttft_ms(self) -> float:
        first = self.times[0] if self.times else self.gave_up
        return ((first or self.sent) - self.sent) * 1000

    @property
    def last_token_ms(self) -> float:
        last = self.gave_up if self.gave_up is not None else self.times[-1]
        return (last - self.sent) * 1000


@dataclass
class Spell:
    """What one server's idle or loaded spell measured."""

    ttfts_ms: list[float]
    window_s: float
    summary_tokens: int = 0  # streamed inside the window
    summaries: int = 0  # summary requests that finished
    summary_prompt_tokens: list[int] = field(default_factory=list)
    summary_work: float = 0.0  # tokens processed inside the window (work_in_window)
    autocomplete_work: float = 0.0
    last_tokens_ms: list[float] = field(default_factory=list)  # the autocompletes' whole answer
    timeouts: int = 0  # autocompletes the client gave up on (counted until it did)


def tokens_in_window(requests: list[Timed], start: float, end: float) -> int:
    """Content events (one a token) that arrived in [start, end)."""
    return sum(1 for request in requests for t in request.times if start <= t < end)


def work_in_window(requests: list[Timed], start: float, end: float) -> float:
    """Tokens the requests had processed inside [start, end): each prompt's tokens spread
    evenly over its prefill (sent to first token: what a client can see of it), and each
    completion token when it came. The same estimate for every server."""
    prompts = 0.0
    for request in requests:
        if not request.prompt_tokens or not request.times:
            continue
        began, ended = request.sent, request.times[0]
        inside = max(0.0, min(ended, end) - max(began, start))
        share = inside / (ended - began) if ended > began else float(start <= ended < end)
        prompts += request.prompt_tokens * share
    return prompts + tokens_in_window(requests, start, end)


def spell_figures(spells: list[Spell]) -> dict[str, Any]:
    """One spell's figures over every round: TTFT p50/p95 and the summaries' tokens/s."""
    ttfts = [t for spell in spells for t in spell.ttfts_ms]
    window = sum(spell.window_s for spell in spells)

    def per_second(total: float) -> float:
        return total / window if window else 0.0

    prompts = [n for spell in spells for n in spell.summary_prompt_tokens]
    last = [t for spell in spells for t in spell.last_tokens_ms]
    return {
        "requests": len(ttfts),
        "ttft_p50_ms": percentile(ttfts, 50),
        "ttft_p95_ms": percentile(ttfts, 95),
        "last_token_p50_ms": percentile(last, 50) if last else None,
        "last_token_p95_ms": percentile(last, 95) if last else None,
        "summary_tps": per_second(sum(spell.summary_tokens for spell in spells)),
        "summary_work_tps": per_second(sum(spell.summary_work for spell in spells)),
        "autocomplete_work_tps": per_second(sum(spell.autocomplete_work for spell in spells)),
        "summaries": sum(spell.summaries for spell in spells),
        "summary_prompt_tokens": sorted(prompts)[len(prompts) // 2] if prompts else None,
        "timeouts": sum(spell.timeouts for spell in spells),
    }


async def _timed(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> Timed:
    timed = Timed(time.perf_counter())
    try:
        await _read(client, url, body, timed)
    except httpx.TimeoutException:
        timed.gave_up = time.perf_counter()
        return timed
    if not timed.times:
        raise RuntimeError(f"{url}: the stream carried no tokens")
    return timed


async def _read(client: httpx.AsyncClient, url: str, body: dict[str, Any], timed: Timed) -> None:
    async with aconnect_sse(client, "POST", url, json=body) as events:
        events.response.raise_for_status()
        async for event in events.aiter_sse():
            if event.data == "[DONE]":
                break
            chunk = event.json()
            if usage := chunk.get("usage"):
                timed.prompt_tokens = int(usage["prompt_tokens"])
            choice = (chunk.get("choices") or [{}])[0]
            if choice.get("text") or (choice.get("delta") or {}).get("content"):
                timed.times.append(time.perf_counter())


def _autocomplete_body(server: MixedServer, serial: int, nonce: str) -> dict[str, Any]:
    return {
        "model": server.autocomplete,
        "prompt": snippet(serial, nonce),
        "max_tokens": AUTOCOMPLETE_TOKENS,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _summary_body(server: MixedServer, serial: int, nonce: str) -> dict[str, Any]:
    return {
        "model": server.summarization,
        "messages": [
            {"role": "system", "content": SUMMARY_SYSTEM},
            {"role": "user", "content": document(serial, nonce)},
        ],
        "max_tokens": SUMMARY_TOKENS,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def _spell(server: MixedServer, seconds: int, *, loops: int) -> Spell:
    """`seconds` autocomplete requests, one a second (sent on time, whatever the earlier ones
    are doing), beside `loops` summary loops that start `_LEAD_S` earlier and stop starting
    new summaries when the last autocomplete request is sent. Every request sent is waited
    for: the server is quiet when the spell ends."""
    nonce = secrets.token_hex(4)
    completions, chats = f"{server.base}/completions", f"{server.base}/chat/completions"
    summaries: list[Timed] = []
    serials = iter(range(1_000_000))
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
        stop = asyncio.Event()

        async def summary_loop() -> None:
            while not stop.is_set():
                body = _summary_body(server, next(serials), nonce)
                summaries.append(await _timed(client, chats, body))

        looping = [asyncio.create_task(summary_loop()) for _ in range(loops)]
        if looping:
            await asyncio.sleep(_LEAD_S)
        start = time.perf_counter()
        sent = []
        for serial in range(seconds):
            await asyncio.sleep(max(0.0, start + serial - time.perf_counter()))
            body = _autocomplete_body(server, serial, nonce)
            sent.append(asyncio.create_task(_timed(client, completions, body)))
        end = start + seconds
        await asyncio.sleep(max(0.0, end - time.perf_counter()))
        stop.set()
        answered = await asyncio.gather(*sent)
        await asyncio.gather(*looping)
    done = [s for s in summaries if s.times]
    return Spell(
        [a.ttft_ms for a in answered],
        seconds,
        tokens_in_window(done, start, end),
        len(done),
        [s.prompt_tokens for s in done if s.prompt_tokens is not None],
        work_in_window(done, start, end),
        work_in_window(answered, start, end),
        [a.last_token_ms for a in answered],
        sum(1 for a in answered if a.gave_up is not None),
    )


async def _warm(server: MixedServer) -> None:
    """One untimed request of each task: first-request costs stay out of the figures."""
    nonce = secrets.token_hex(4)
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
        await _timed(client, f"{server.base}/completions", _autocomplete_body(server, 0, nonce))
        await _timed(client, f"{server.base}/chat/completions", _summary_body(server, 0, nonce))


def mixed(servers: list[MixedServer], *, seconds: int, rounds: int) -> dict[str, Any]:
    """Each server's idle then loaded spell, round by round (the server order alternating);
    the figures of each server and spell over every round."""
    for server in servers:
        asyncio.run(_warm(server))
    spells: dict[str, dict[str, list[Spell]]] = {
        s.name: {name: [] for name in SPELLS} for s in servers
    }
    for round_number in range(rounds):
        for server in servers if round_number % 2 == 0 else servers[::-1]:
            for name, beside in SPELLS.items():
                spell = asyncio.run(_spell(server, seconds, loops=beside))
                spells[server.name][name].append(spell)
    return {
        "seconds": seconds,
        "rounds": rounds,
        "summaries": SUMMARIES,
        "slots": SLOTS,
        "autocomplete_tokens": AUTOCOMPLETE_TOKENS,
        "summary_tokens": SUMMARY_TOKENS,
        "servers": {name: _server_figures(by_spell) for name, by_spell in spells.items()},
    }


def _server_figures(spells: dict[str, list[Spell]]) -> dict[str, Any]:
    figures = {name: spell_figures(runs) for name, runs in spells.items()}
    idle, loaded, full = figures["idle"], figures["loaded"], figures["full"]
    return {
        **figures,
        "p95_ratio": loaded["ttft_p95_ms"] / idle["ttft_p95_ms"],
        "last_token_p95_ratio": loaded["last_token_p95_ms"] / idle["last_token_p95_ms"],
        "full_p95_ratio": full["ttft_p95_ms"] / idle["ttft_p95_ms"],
        "spells": {name: [asdict(spell) for spell in runs] for name, runs in spells.items()},
    }
