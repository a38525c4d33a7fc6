"""A named client's admission (serving/_clients.py) with the limits library's real in-memory
store: a task it may not call, each limit reached (nothing held by a refused request), the
tokens reserved and settled, the x-ratelimit-* headers; and a store that cannot be reached (a
Redis port nobody listens on), in both directions the operator may choose."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from zest.errors import LimitsUnavailableError, RateLimitedError, TaskNotAllowedError
from zest.gateway.serving import Caller, ClientGate, format_reset
from zest.gateway.serving._clients import Ticket
from zest.router import ClientConfig


def client(**limits: int) -> Caller:
    config = ClientConfig.model_validate({"key_env": "K", "tasks": ["chat"], "limits": limits})
    return Caller("team-a", config)


def test_a_task_the_client_may_not_call_is_a_403_naming_it() -> None:
    with pytest.raises(TaskNotAllowedError) as refused:
        asyncio.run(ClientGate().admit(client(), "summarize", reserve=8))
    assert refused.value.status_code == 403
    assert refused.value.message == (
        "client 'team-a' may not call task 'summarize' (clients.team-a.tasks: chat): call one "
        "of its tasks, or ask for 'summarize' to be added to clients.team-a.tasks in routes.yaml"
    )


def test_requests_per_minute_then_a_429_that_holds_nothing() -> None:
    gate, caller = ClientGate(), client(requests_per_minute=2, concurrent=5)

    async def scenario() -> tuple[list[Ticket], RateLimitedError]:
        tickets = [await gate.admit(caller, "chat", reserve=8) for _ in range(2)]
        with pytest.raises(RateLimitedError) as refused:
            await gate.admit(caller, "chat", reserve=8)
        return tickets, refused.value

    tickets, refused = asyncio.run(scenario())
    assert tickets[0].headers["x-ratelimit-remaining-requests"] == "1"
    assert tickets[1].headers["x-ratelimit-remaining-requests"] == "0"
    assert (refused.status_code, refused.error_type, refused.code) == (
        429,
        "requests",
        "rate_limit_exceeded",
    )
    assert refused.message.startswith(
        "client 'team-a' is over its limit clients.team-a.limits.requests_per_minute: 2, 0 left, "
        "this request needs 1 request: retry in "
    )
    headers = refused.headers
    assert headers["x-ratelimit-limit-requests"] == "2"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert 1 <= int(headers["retry-after"]) <= 60
    assert headers["x-ratelimit-reset-requests"].endswith("s")
    assert gate.running == {"team-a": 2}  # the refused one took no slot


def test_tokens_are_reserved_from_max_tokens_and_settled_from_usage() -> None:
    gate, caller = ClientGate(), client(tokens_per_minute=100)

    async def scenario() -> list[str]:
        seen = []
        ticket = await gate.admit(caller, "chat", reserve=60)
        seen.append(ticket.headers["x-ratelimit-remaining-tokens"])  # 100 - 60
        with pytest.raises(RateLimitedError) as refused:  # 60 more do not fit in the 40 left
            await gate.admit(caller, "chat", reserve=60)
        seen.append(refused.value.headers["x-ratelimit-remaining-tokens"])  # nothing taken
        ticket.used = 25  # prompt + completion, as the request's end says
        ticket.release()
        await asyncio.sleep(0.05)  # the settlement runs in the background
        again = await gate.admit(caller, "chat", reserve=60)
        seen.append(again.headers["x-ratelimit-remaining-tokens"])  # 100 - 25 - 60
        return seen

    assert asyncio.run(scenario()) == ["40", "40", "15"]


def test_more_used_than_reserved_is_counted_too() -> None:
    gate, caller = ClientGate(), client(tokens_per_minute=100)

    async def scenario() -> RateLimitedError:
        ticket = await gate.admit(caller, "chat", reserve=10)
        ticket.used = 95  # a long prompt: its tokens count when the request ends
        ticket.release()
        await asyncio.sleep(0.05)
        with pytest.raises(RateLimitedError) as refused:
            await gate.admit(caller, "chat", reserve=10)
        return refused.value

    refused = asyncio.run(scenario())
    assert refused.error_type == "tokens"
    assert refused.headers["x-ratelimit-remaining-tokens"] == "5"


def test_concurrent_requests_free_their_slot_when_they_end() -> None:
    gate, caller = ClientGate(), client(concurrent=1)

    async def scenario() -> str:
        ticket = await gate.admit(caller, "chat", reserve=8)
        with pytest.raises(RateLimitedError) as refused:
            await gate.admit(caller, "chat", reserve=8)
        ticket.release()
        ticket.release()  # once only
        assert gate.running == {"team-a": 0}
        await gate.admit(caller, "chat", reserve=8)
        return refused.value.message

    assert asyncio.run(scenario()) == (
        "client 'team-a' has 1 requests running, its limit (clients.team-a.limits.concurrent: "
        "1): retry when one ends"
    )


def test_a_request_that_could_never_fit_says_so() -> None:
    with pytest.raises(RateLimitedError) as refused:
        asyncio.run(ClientGate().admit(client(tokens_per_day=50), "chat", reserve=64))
    assert refused.value.message.endswith(
        "retry in 86400 s, or ask for fewer max_tokens (this request could never fit)"
    )


def unreachable_redis() -> str:
    with socket.socket() as sock:  # a port bound and closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


def test_a_store_that_cannot_be_reached_admits_when_told_allow(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = ClientGate(unreachable_redis(), on_store_error="allow", timeout_s=2)
    caller = client(requests_per_minute=1, concurrent=3)

    async def scenario() -> list[Ticket]:
        tickets = [await gate.admit(caller, "chat", reserve=8) for _ in range(3)]
        await gate.close()
        return tickets

    with caplog.at_level(logging.WARNING, "zest.gateway"):
        tickets = asyncio.run(scenario())
    assert len(tickets) == 3  # over its requests_per_minute, but nothing could count them
    assert gate.store_problem is not None
    assert gate.running == {"team-a": 3}  # its concurrent slots are still this replica's
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once (a minute), not once a request
    assert "limited clients are admitted without their limits until it answers" in warnings[0]
    assert "ZEST_LIMITS_ON_STORE_ERROR=allow" in warnings[0]


def test_a_store_that_cannot_be_reached_refuses_when_told_deny() -> None:
    gate = ClientGate(unreachable_redis(), on_store_error="deny", timeout_s=2)

    async def scenario() -> LimitsUnavailableError:
        with pytest.raises(LimitsUnavailableError) as refused:
            await gate.admit(client(requests_per_minute=5, concurrent=2), "chat", reserve=8)
        await gate.close()
        return refused.value

    refused = asyncio.run(scenario())
    assert (refused.status_code, refused.code) == (503, "limits_unavailable")
    assert refused.headers["retry-after"] == "1"
    assert gate.running == {"team-a": 0}  # refused: its slot given back


def test_a_client_without_limits_and_no_client_take_nothing() -> None:
    gate = ClientGate()
    free = asyncio.run(gate.admit(client(), "chat", reserve=8))
    anonymous = asyncio.run(gate.admit(Caller("anonymous"), "anything", reserve=8))
    assert (free.headers, anonymous.headers, gate.running) == ({}, {}, {})


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.0, "0s"),
        (0.25, "250ms"),
        (12.44, "12.5s"),
        (59.99, "60s"),
        (360, "6m0s"),
        (86399.0, "23h59m59s"),
        (86399.5, "24h0m0s"),
    ],
)
def test_resets_are_written_as_openai_writes_them(seconds: float, shown: str) -> None:
    assert format_reset(seconds) == shown
