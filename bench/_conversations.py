"""bench/affinity.py's pure parts: the conversations it holds (each with its own system
prompt), the order their turns arrive in, and the figures a run reports."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Conversation", "Turn", "arrival_order", "conversations", "summarize"]

_TEAMS = ["harbour", "orchard", "foundry", "library", "observatory", "bakery", "clinic", "depot"]
_RULES = [
    "Answer in one short sentence.",
    "Name the unit of every number you give.",
    "Never guess a date: say that you do not know it.",
    "Call the customer by the team's name for them.",
    "Refer to earlier answers of this conversation when they help.",
    "Write numbers as digits, not as words.",
    "Prefer plain words to technical ones.",
    "End with a question when the request is ambiguous.",
]
_QUESTIONS = [
    "What should we check first this morning?",
    "How many crates fit on one shelf?",
    "Which task can wait until tomorrow?",
    "Summarize what we decided so far.",
    "What is the next step?",
    "Who should we call if it breaks?",
]


@dataclass
class Conversation:
    """One user's chat: its system prompt and the messages so far."""

    index: int
    system: str
    messages: list[dict[str, str]] = field(default_factory=list)

    def ask(self, turn: int) -> list[dict[str, str]]:
        """The request for `turn` (0-based): the history plus a new user message."""
        question = f"{_QUESTIONS[(self.index + turn) % len(_QUESTIONS)]} (turn {turn + 1})"
        if not self.messages:
            self.messages.append({"role": "system", "content": self.system})
        self.messages.append({"role": "user", "content": question})
        return list(self.messages)

    def answered(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})


def conversations(count: int, rules: int = 6) -> list[Conversation]:
    """`count` conversations, each with a system prompt of its own (a team, its rules and a
    few facts), a couple of hundred tokens long like a real app's."""
    made = []
    for n in range(count):
        team = f"{_TEAMS[n % len(_TEAMS)]} team {n}"
        chosen = [_RULES[(n + k) % len(_RULES)] for k in range(rules)]
        facts = " ".join(
            f"Shelf {s} of the {team} holds {3 + (n * s) % 11} crates of item {n}-{s}."
            for s in range(1, 6)
        )
        system = f"You are the assistant of the {team}. " + " ".join(chosen) + " " + facts
        made.append(Conversation(n, system))
    return made


def arrival_order(count: int, turn: int, seed: int) -> list[int]:
    """The conversations in the order their `turn` arrives: shuffled (users do not take turns
    in a fixed order, and a fixed order would make round robin repeat itself)."""
    order = list(range(count))
    random.Random(seed * 1000 + turn).shuffle(order)
    return order


@dataclass(frozen=True)
class Turn:
    conversation: int
    turn: int  # 0-based
    replica: str
    ttft_ms: float
    prompt_tokens: int
    cached_tokens: int


def summarize(turns: list[Turn]) -> dict[str, Any]:
    """The figures of a run, over the turns after the first (a first turn has no earlier
    prompt of its conversation to reuse): how many reused a cached prefix, the share of
    their prompt tokens it covered, TTFT p50 (all turns and later turns), and how often a
    conversation stayed on the replica of its previous turn."""
    later = [t for t in turns if t.turn > 0]
    previous = {(t.conversation, t.turn): t.replica for t in turns}
    stayed = [t for t in later if previous.get((t.conversation, t.turn - 1)) == t.replica]
    prompt = sum(t.prompt_tokens for t in later)
    return {
        "requests": len(turns),
        "later_turns": len(later),
        "warm_hits": sum(1 for t in later if t.cached_tokens > 0),
        "warm_hit_rate": _share(sum(1 for t in later if t.cached_tokens > 0), len(later)),
        "cached_token_share": _share(sum(t.cached_tokens for t in later), prompt),
        "same_replica_rate": _share(len(stayed), len(later)),
        "ttft_p50_ms": _median([t.ttft_ms for t in turns]),
        "ttft_p50_later_ms": _median([t.ttft_ms for t in later]),
        "ttft_p50_first_ms": _median([t.ttft_ms for t in turns if t.turn == 0]),
        "replicas": sorted({t.replica for t in turns}),
    }


def _share(part: float, whole: float) -> float:
    return round(part / whole, 3) if whole else 0.0


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 1) if values else 0.0
