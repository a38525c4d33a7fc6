"""bench/affinity.py's pure parts: its conversations keep one affinity key across turns and
differ from each other, turns arrive shuffled, and the summary counts what it says."""

from __future__ import annotations

from zest import affinity_key
from zest.bench._conversations import Turn, arrival_order, conversations, summarize


def test_each_conversation_keeps_its_key_and_differs_from_the_others() -> None:
    held = conversations(5)
    assert len({c.system for c in held}) == 5
    first_keys = [affinity_key(c.ask(0), "chat") for c in held]
    assert len(set(first_keys)) == 5
    for chat, key in zip(held, first_keys, strict=True):
        chat.answered("Fine.")
        assert affinity_key(chat.ask(1), "chat") == key
    assert [m["role"] for m in held[0].messages] == ["system", "user", "assistant", "user"]


def test_turns_arrive_shuffled_but_reproducibly() -> None:
    orders = [arrival_order(12, turn, seed=1) for turn in range(4)]
    assert all(sorted(order) == list(range(12)) for order in orders)
    assert len({tuple(order) for order in orders}) > 1
    assert arrival_order(12, 2, seed=1) == orders[2]


def test_the_summary_counts_later_turns_only() -> None:
    turns = [
        Turn(0, 0, "zest-1", 900.0, 200, 0),
        Turn(1, 0, "zest-2", 1000.0, 210, 0),
        Turn(0, 1, "zest-1", 300.0, 240, 200),  # same replica, reused
        Turn(1, 1, "zest-3", 1100.0, 250, 0),  # moved, cold
    ]
    summary = summarize(turns)
    assert summary["later_turns"] == 2
    assert summary["warm_hits"] == 1
    assert summary["warm_hit_rate"] == 0.5
    assert summary["cached_token_share"] == round(200 / 490, 3)
    assert summary["same_replica_rate"] == 0.5
    assert summary["ttft_p50_later_ms"] == 700.0
    assert summary["ttft_p50_first_ms"] == 950.0
    assert summary["replicas"] == ["zest-1", "zest-2", "zest-3"]
