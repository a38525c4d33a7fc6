"""The remote engine against a real upstream (llama_cpp.server) through the loopback proxy."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import free_port
from tests.upstream import Proxy
from zest.engines import Delta, GenerationJob, Prompt, RemoteEngine
from zest.errors import (
    EngineError,
    GatewayTimeoutError,
    OverloadedError,
    PrivacyError,
    RequestError,
    ServiceUnavailableError,
)
from zest.router import REMOTE_DEVICE, Placement, RemoteModel, ResponseFormat

HELLO = ({"role": "user", "content": "Say hello."},)


def engine(base_url: str, **fields: Any) -> RemoteEngine:
    config = RemoteModel.model_validate(
        {"engine": "remote", "base_url": base_url, "model": "smollm2", **fields}
    )
    return RemoteEngine("up", config, Path("."), Placement(REMOTE_DEVICE, REMOTE_DEVICE))


def job(**fields: Any) -> GenerationJob:
    defaults: dict[str, Any] = {
        "prompt": Prompt.chat(HELLO),
        "max_tokens": 6,
        "temperature": 0.0,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": 0.0,
        "repeat_penalty": 1.0,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
        "seed": 1,
        "stop": (),
        "privacy": "allow_remote",
    }
    return GenerationJob(**{**defaults, **fields})


def run(remote: RemoteEngine, request: GenerationJob) -> list[Delta]:
    async def collect() -> list[Delta]:
        try:
            return [delta async for delta in remote.stream(request)]
        finally:
            await remote.close()

    return asyncio.run(collect())


def failure(remote: RemoteEngine, request: GenerationJob) -> RequestError:
    with pytest.raises(RequestError) as info:
        run(remote, request)
    return info.value


def test_a_chat_streams_through_with_the_upstreams_figures(proxy: Proxy) -> None:
    remote = engine(proxy.v1)
    info = remote.load()
    assert (info.engine, info.device, info.context_length) == ("remote", "remote", 0)
    deltas = run(remote, job())
    assert deltas[0].stats is not None
    assert (deltas[0].stats.prefill_device, deltas[0].stats.decode_device) == ("remote", "remote")
    assert "".join(d.text for d in deltas)
    final = deltas[-1]
    assert final.finish_reason in {"stop", "length"}
    assert 1 <= final.completion_tokens <= 6
    [sent] = proxy.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.body["messages"] == list(HELLO)
    assert (sent.body["model"], sent.body["stream"], sent.body["max_tokens"]) == (
        "smollm2",
        True,
        6,
    )
    assert "authorization" not in sent.headers


def test_a_completion_prompt_goes_to_the_completions_endpoint(proxy: Proxy) -> None:
    remote = engine(proxy.v1)
    remote.load()
    deltas = run(remote, job(prompt=Prompt.completion("def square(x):"), stop=("\n\n",)))
    assert deltas[-1].finish_reason in {"stop", "length"}
    [sent] = proxy.requests
    assert sent.path == "/v1/completions"
    assert (sent.body["prompt"], sent.body["stop"]) == ("def square(x):", ["\n\n"])


def test_a_response_format_is_forwarded_as_openai_spells_it(proxy: Proxy) -> None:
    """(The test upstream, llama_cpp.server, takes json_object only: a json_schema format is
    forwarded the same way, as tests/unit/router's as_openai test shows.)"""
    remote = engine(proxy.v1)
    remote.load()
    fmt = ResponseFormat(type="json_object")
    deltas = run(remote, job(response_format=fmt, max_tokens=24))
    assert deltas[-1].finish_reason in {"stop", "length"}
    [sent] = proxy.requests
    assert sent.body["response_format"] == {"type": "json_object"}


def test_the_key_comes_from_the_named_variable(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZEST_TEST_UPSTREAM_KEY", "sk-test-123")
    remote = engine(proxy.v1, api_key_env="ZEST_TEST_UPSTREAM_KEY")
    remote.load()
    run(remote, job())
    assert proxy.requests[0].headers["authorization"] == "Bearer sk-test-123"


def test_a_missing_key_variable_fails_the_load() -> None:
    remote = engine("http://127.0.0.1:9/v1", api_key_env="ZEST_TEST_NO_SUCH_VARIABLE")
    with pytest.raises(ServiceUnavailableError) as info:
        remote.load()
    assert info.value.message == (
        "model 'up': the environment variable ZEST_TEST_NO_SUCH_VARIABLE "
        "(models.up.api_key_env) is not set: export it before starting zest"
    )


def test_a_local_only_job_never_leaves_the_machine(proxy: Proxy) -> None:
    remote = engine(proxy.v1)
    remote.load()
    error = failure(remote, job(privacy="local_only"))
    assert isinstance(error, PrivacyError)
    assert error.message == (
        "model 'up' is remote and this request's route is local_only: its prompt may not "
        "leave the machine"
    )
    assert proxy.requests == []


def test_strict_privacy_refuses_to_load_or_to_run(proxy: Proxy) -> None:
    """Armed by the runtime from Settings.privacy (tests/unit/gateway/test_strict_privacy.py),
    checked at load and again on every job."""
    loaded = engine(proxy.v1)
    loaded.load()
    strict = engine(proxy.v1)
    strict.strict_privacy = True
    with pytest.raises(PrivacyError) as info:
        strict.load()
    assert info.value.message == (
        "model 'up' is remote and ZEST_PRIVACY=strict: no remote engine may be reached"
    )
    loaded.strict_privacy = True
    assert isinstance(failure(loaded, job()), PrivacyError)
    assert proxy.requests == []


def test_429_is_retried_after_the_time_retry_after_asks(proxy: Proxy) -> None:
    proxy.behaviour.answer_429, proxy.behaviour.retry_after = 2, "1"
    remote = engine(proxy.v1)
    remote.load()
    started = time.monotonic()
    deltas = run(remote, job())
    assert time.monotonic() - started >= 2.0  # two waits of Retry-After: 1
    assert deltas[-1].finish_reason in {"stop", "length"}
    assert proxy.statuses == [429, 429, 200]


def test_retries_are_bounded_and_end_as_overloaded(proxy: Proxy) -> None:
    proxy.behaviour.answer_429, proxy.behaviour.retry_after = 5, "0"
    remote = engine(proxy.v1, retries=1)
    remote.load()
    error = failure(remote, job())
    assert isinstance(error, OverloadedError)
    assert error.message == (
        f"upstream {proxy.v1} is overloaded (429): slow down (after 1 retries)"
    )
    assert proxy.statuses == [429, 429]


@pytest.mark.parametrize("retry_after", ["0", None])
def test_an_upstream_that_keeps_answering_503_is_unavailable_not_a_rate_limit(
    proxy: Proxy, retry_after: str | None
) -> None:
    """A 503 is the upstream's trouble, not the client sending too much: it reaches the client
    as a 503, with the upstream's Retry-After when it gave one (never a 429)."""
    proxy.behaviour.answer_503, proxy.behaviour.retry_after = 5, retry_after
    remote = engine(proxy.v1, retries=1, backoff_s=0.01)
    remote.load()
    error = failure(remote, job())
    assert (error.status_code, error.error_type, error.code) == (
        503,
        "service_unavailable",
        "upstream_unavailable",
    )
    assert error.message == (
        f"upstream {proxy.v1} is unavailable (503): down for maintenance (after 1 retries)"
    )
    assert error.headers == ({"retry-after": "1"} if retry_after else {})
    assert proxy.statuses == [503, 503]


def test_a_retry_after_beyond_the_limit_is_not_waited_for(proxy: Proxy) -> None:
    proxy.behaviour.answer_429, proxy.behaviour.retry_after = 1, "3600"
    remote = engine(proxy.v1)
    remote.load()
    assert isinstance(failure(remote, job()), OverloadedError)
    assert proxy.statuses == [429]


def test_the_upstreams_retry_after_is_passed_on(proxy: Proxy) -> None:
    proxy.behaviour.answer_429, proxy.behaviour.retry_after = 1, "3600"
    remote = engine(proxy.v1)
    remote.load()
    error = failure(remote, job())
    assert isinstance(error, OverloadedError)
    assert (error.retry_after, error.headers["retry-after"]) == (3600, "3600")


def test_headers_then_silence_is_a_first_token_timeout(proxy: Proxy) -> None:
    """The proxy sends the headers itself, then nothing until released: not the real
    upstream, whose own headers could take longer than read_s on a loaded machine."""
    release = threading.Event()
    proxy.behaviour.reply, proxy.behaviour.release = "", release
    remote = engine(proxy.v1, timeouts={"connect_s": 5, "read_s": 0.5})
    remote.load()
    try:
        error = failure(remote, job())
    finally:
        release.set()  # the proxy's answer may end now
    assert isinstance(error, GatewayTimeoutError)
    assert error.code == "first_token_timeout"
    assert "sent its headers, then no first token within 0.5s" in error.message


def test_an_unreachable_upstream_is_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    remote = engine(url)
    remote.load()
    error = failure(remote, job())
    assert type(error) is ServiceUnavailableError
    assert error.code == "upstream_unreachable"
    assert error.message.startswith(f"upstream {url} is unreachable: ConnectError: ")


def test_a_stream_cut_by_the_network_is_an_engine_error(proxy: Proxy) -> None:
    proxy.behaviour.cut_after_events = 3
    remote = engine(proxy.v1)
    remote.load()

    async def first_then_rest() -> tuple[Delta, BaseException]:
        stream = remote.stream(job(max_tokens=40))
        try:
            first = await anext(stream)
            with pytest.raises(EngineError) as info:
                async for _ in stream:
                    pass
            return first, info.value
        finally:
            await remote.close()

    first, error = asyncio.run(first_then_rest())
    assert first.text
    assert str(error).startswith(f"upstream {proxy.v1}: the stream broke: RemoteProtocolError: ")
