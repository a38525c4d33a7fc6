"""The official openai client, sync and async, streaming and not, against the real server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import openai
import pytest

from tests.e2e.conftest import REPO, Server, stream_chat
from zest.engines import load_tokenizer
from zest.router import load_routes

QUESTION = [{"role": "user", "content": "List the planets of the solar system."}]


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=600) as made:
        yield made  # closed after the test: no socket left for the garbage collector


@pytest.fixture
def aclient(server: Server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=600)


def test_chat_answers_with_usage_that_adds_up(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model="chat", messages=QUESTION, max_tokens=24)
    choice = reply.choices[0]
    assert reply.model == "chat"
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason in {"stop", "length"}
    usage = reply.usage
    assert usage is not None
    assert usage.prompt_tokens > 10
    assert 0 < usage.completion_tokens <= 24
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_chat_streams_chunks_then_usage(client: openai.OpenAI) -> None:
    chunks, text = stream_chat(client, "chat", QUESTION, 24, temperature=0)
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert text
    assert finishes in (["stop"], ["length"])
    usage = chunks[-1].usage
    assert usage is not None
    assert chunks[-1].choices == []
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    whole = client.chat.completions.create(
        model="chat", messages=QUESTION, max_tokens=24, temperature=0
    )
    assert whole.choices[0].message.content == text
    assert whole.usage is not None
    assert whole.usage.completion_tokens == usage.completion_tokens


def test_max_tokens_limits_the_completion(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Count from one to one hundred in words."}]
    for field in ("max_tokens", "max_completion_tokens"):
        reply = client.chat.completions.create(
            model="chat", messages=messages, temperature=0, **{field: 7}
        )
        assert reply.usage is not None
        assert reply.usage.completion_tokens == 7
        assert reply.choices[0].finish_reason == "length"


def test_a_stop_sequence_cuts_the_text_before_it(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Write three sentences about the sea."}]
    free = client.chat.completions.create(
        model="chat", messages=messages, temperature=0, max_tokens=40
    )
    text = free.choices[0].message.content or ""
    words = text.split()
    assert len(words) > 6, text
    stop = words[4]
    stopped = client.chat.completions.create(
        model="chat", messages=messages, temperature=0, max_tokens=40, stop=[stop]
    )
    assert stopped.choices[0].message.content == text[: text.index(stop)]
    assert stopped.choices[0].finish_reason == "stop"


def test_the_same_seed_gives_the_same_sample(client: openai.OpenAI) -> None:
    def sample(seed: int) -> str:
        reply = client.chat.completions.create(
            model="chat", messages=QUESTION, max_tokens=20, temperature=1.0, seed=seed
        )
        return reply.choices[0].message.content or ""

    assert sample(7) == sample(7)


def test_completions_continue_the_prompt(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model="autocomplete", prompt="def add(a, b):\n    return", max_tokens=8, temperature=0
    )
    assert reply.object == "text_completion"
    assert reply.choices[0].text
    assert reply.usage is not None
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_completions_stream(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model="autocomplete", prompt="The quick brown fox", max_tokens=8, temperature=0, stream=True
    )
    text = "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
    whole = client.completions.create(
        model="autocomplete", prompt="The quick brown fox", max_tokens=8, temperature=0
    )
    assert text == whole.choices[0].text


def test_models_lists_the_tasks(client: openai.OpenAI) -> None:
    ids = [model.id for model in client.models.list()]
    assert ids == ["chat", "autocomplete", "summarization"]


def test_models_retrieve_names_a_task_and_refuses_an_unknown_id(client: openai.OpenAI) -> None:
    chat = client.models.retrieve("chat")
    assert (chat.id, chat.object, chat.owned_by) == ("chat", "model", "zest")
    assert chat.model_extra is not None
    assert chat.model_extra["zest"]["kind"] == "chat"
    assert chat.model_extra["zest"]["model"] == "smollm2"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("nope")
    assert missing.value.code == "model_not_found"
    assert "GET /v1/models lists them" in missing.value.message


def test_fields_that_change_nothing_here_are_accepted_and_named_back(
    client: openai.OpenAI,
) -> None:
    """What agent frameworks send by default (store, metadata, user, ...) is not a 400: the
    answer is the same as without them, and x-zest-ignored says which were ignored."""
    plain = client.chat.completions.create(
        model="chat", messages=QUESTION, max_tokens=8, temperature=0
    )
    raw = client.chat.completions.with_raw_response.create(
        model="chat",
        messages=QUESTION,
        max_tokens=8,
        temperature=0,
        store=False,
        metadata={"team": "search"},
        user="user-42",
        service_tier="auto",
        reasoning_effort="low",
    )
    assert raw.headers["x-zest-ignored"] == (
        "store, metadata, user, service_tier, reasoning_effort"
    )
    assert raw.parse().choices[0].message.content == plain.choices[0].message.content
    stream = client.completions.with_raw_response.create(
        model="autocomplete", prompt="def f():", max_tokens=4, stream=True, user="u"
    )
    assert stream.headers["x-zest-ignored"] == "user"
    assert list(stream.parse())
    assert (
        "x-zest-ignored"
        not in client.chat.completions.with_raw_response.create(
            model="chat", messages=QUESTION, max_tokens=2
        ).headers
    )


def test_echo_puts_the_prompt_before_the_completion(client: openai.OpenAI) -> None:
    prompt = "def square(x):"
    plain = client.completions.create(
        model="autocomplete", prompt=prompt, max_tokens=8, temperature=0
    )
    echoed = client.completions.create(
        model="autocomplete", prompt=prompt, max_tokens=8, temperature=0, echo=True
    )
    assert echoed.choices[0].text == prompt + plain.choices[0].text
    stream = client.completions.create(
        model="autocomplete", prompt=prompt, max_tokens=8, temperature=0, echo=True, stream=True
    )
    chunks = [chunk.choices[0].text for chunk in stream if chunk.choices]
    assert chunks[0] == prompt
    assert "".join(chunks) == echoed.choices[0].text


def test_logit_bias_forces_or_bans_a_token(client: openai.OpenAI) -> None:
    routes = load_routes(REPO / "routes.yaml")
    tokenizer = load_tokenizer("smollm2", routes.config.models["smollm2"], routes.base_dir)
    assert tokenizer is not None
    [banana] = tokenizer.tokenize(" banana", add_special=False)
    forced = client.completions.create(
        model="autocomplete",
        prompt="My favourite fruit is",
        max_tokens=1,
        temperature=0,
        logit_bias={str(banana): 100},
    )
    assert forced.choices[0].text == " banana"
    first = (
        client.completions.create(
            model="autocomplete", prompt="My favourite fruit is", max_tokens=1, temperature=0
        )
        .choices[0]
        .text
    )
    [greedy] = tokenizer.tokenize(first, add_special=False)
    banned = client.completions.create(
        model="autocomplete",
        prompt="My favourite fruit is",
        max_tokens=1,
        temperature=0,
        logit_bias={str(greedy): -100},
    )
    assert banned.choices[0].text != first
    with pytest.raises(openai.BadRequestError) as outside:
        client.completions.create(
            model="autocomplete", prompt="x", max_tokens=1, logit_bias={"999999": 5}
        )
    assert outside.value.param == "logit_bias"


def test_n_gives_that_many_choices_sampled_apart(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="chat", messages=QUESTION, max_tokens=12, n=3, temperature=1.0, seed=7
    )
    assert [choice.index for choice in reply.choices] == [0, 1, 2]
    texts = [choice.message.content for choice in reply.choices]
    assert all(texts)
    assert len(set(texts)) > 1, "each choice samples with its own seed"
    assert reply.usage is not None
    assert 3 <= reply.usage.completion_tokens <= 36
    # A seeded single choice is repeatable (n > 1 shares decode steps as the choices come, so
    # a near-tie may differ between runs: docs/http-api.md).
    once, again = (
        client.chat.completions.create(
            model="chat", messages=QUESTION, max_tokens=12, temperature=1.0, seed=7
        )
        for _ in range(2)
    )
    assert once.choices[0].message.content == again.choices[0].message.content


def test_n_streams_each_choice_under_its_index(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model="autocomplete", prompt="The quick brown fox", max_tokens=6, n=2, temperature=0,
        stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    texts, finished, usage = ["", ""], set(), None
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            if choice.finish_reason:
                finished.add(choice.index)
        usage = chunk.usage or usage
    assert finished == {0, 1}
    assert texts[0] == texts[1]  # greedy: the same text twice
    whole = client.completions.create(
        model="autocomplete", prompt="The quick brown fox", max_tokens=6, temperature=0
    )
    assert texts[0] == whole.choices[0].text
    assert usage is not None
    assert usage.completion_tokens == 2 * (whole.usage.completion_tokens if whole.usage else 0)


def test_logprobs_cover_each_token_and_greedy_picks_the_top_one(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="chat", messages=QUESTION, max_tokens=8, temperature=0, logprobs=True,
        top_logprobs=3,
    )  # fmt: skip
    choice = reply.choices[0]
    assert choice.logprobs is not None
    content = choice.logprobs.content or []
    assert reply.usage is not None
    assert len(content) == reply.usage.completion_tokens == 8
    assert "".join(t.token for t in content) == choice.message.content
    for token in content:
        assert token.logprob <= 0
        assert len(token.top_logprobs) == 3
        ranked = [alt.logprob for alt in token.top_logprobs]
        assert ranked == sorted(ranked, reverse=True)
        # Greedy decoding takes the most likely token: it is the top alternative.
        assert token.top_logprobs[0].token == token.token
        assert abs(token.top_logprobs[0].logprob - token.logprob) < 1e-6
        assert bytes(token.bytes or []).decode("utf-8", "replace") == token.token


def test_completion_logprobs_in_the_legacy_columns_and_streamed(client: openai.OpenAI) -> None:
    prompt = "The quick brown fox"
    reply = client.completions.create(
        model="autocomplete", prompt=prompt, max_tokens=5, temperature=0, logprobs=2, echo=True
    )
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None
    tokens = logprobs.tokens or []
    assert len(tokens) == len(logprobs.token_logprobs or []) == 5
    assert all(len(top) == 2 for top in logprobs.top_logprobs or [])
    assert (logprobs.text_offset or [])[0] == len(prompt)  # after the echoed prompt
    assert reply.choices[0].text == prompt + "".join(tokens)
    stream = client.completions.create(
        model="autocomplete", prompt=prompt, max_tokens=5, temperature=0, logprobs=2, stream=True
    )
    last = [c.choices[0] for c in stream if c.choices][-1]
    assert last.logprobs is not None
    assert last.logprobs.token_logprobs == logprobs.token_logprobs
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="chat", messages=QUESTION, top_logprobs=2)
    assert "top_logprobs needs logprobs: true" in refused.value.message


def test_a_suffix_on_a_model_without_infill_tokens_says_so(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="autocomplete", prompt="def f(", suffix="):\n")
    assert refused.value.param == "suffix"
    assert "model 'smollm2' has no fill-in-the-middle tokens" in refused.value.message


def test_errors_arrive_as_openai_exceptions(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nope", messages=QUESTION)
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as too_long:
        client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "word " * 9000}]
        )
    assert too_long.value.code == "context_length_exceeded"


def test_async_client_streams_and_answers(aclient: openai.AsyncOpenAI) -> None:
    async def run() -> tuple[str, str]:
        stream = await aclient.chat.completions.create(
            model="chat", messages=QUESTION, max_tokens=16, temperature=0, stream=True
        )
        streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        whole = await aclient.chat.completions.create(
            model="chat", messages=QUESTION, max_tokens=16, temperature=0
        )
        await aclient.close()
        return streamed, whole.choices[0].message.content or ""

    streamed, whole = asyncio.run(run())
    assert streamed
    assert streamed == whole


def test_five_concurrent_requests_are_all_answered(aclient: openai.AsyncOpenAI) -> None:
    topics = ["cats", "rain", "trains", "bread", "stars"]

    async def ask(topic: str) -> str:
        reply = await aclient.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": f"One sentence about {topic}."}],
            max_tokens=16,
        )
        return reply.choices[0].message.content or ""

    async def run() -> list[str]:
        answers = await asyncio.gather(*(ask(t) for t in topics))
        await aclient.close()
        return list(answers)

    answers = asyncio.run(run())
    assert len(answers) == 5
    assert all(answers)
