"""/v1/embeddings with the official openai client on a real embedding model (all-MiniLM-L6-v2
converted to GGUF by make embedding-model), served by llama.cpp in process."""

from __future__ import annotations

import asyncio
import base64
import math
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import REPO, Server, start_server, stop_server
from tests.e2e.test_examples import run_example

ROUTES = REPO / "examples" / "routes" / "embeddings.yaml"


@pytest.fixture(scope="module")
def embed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(ROUTES, tmp_path_factory.mktemp("embeddings") / "zest.log")
    yield running
    stop_server(running)


@pytest.fixture
def client(embed_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=embed_server.v1, api_key="unused", max_retries=0, timeout=600
    ) as made:
        yield made  # closed after the test: no socket left for the garbage collector


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.hypot(*a) / math.hypot(*b)


def test_a_list_of_inputs_gets_one_normalised_vector_each_in_order(client: openai.OpenAI) -> None:
    raw = client.embeddings.with_raw_response.create(
        model="embed", input=["A cat sits on the mat.", "Dogs bark."], user="u-1"
    )
    assert raw.headers["x-zest-route"] == "task=embed; model=minilm; device=cpu; engine=llamacpp"
    assert raw.headers["x-zest-ignored"] == "user"
    reply = raw.parse()
    assert [item.index for item in reply.data] == [0, 1]
    for item in reply.data:
        assert len(item.embedding) == 384
        assert math.isclose(math.hypot(*item.embedding), 1.0, rel_tol=1e-3)
    assert reply.usage.prompt_tokens > 4
    assert reply.usage.total_tokens == reply.usage.prompt_tokens
    one = client.embeddings.create(model="embed", input="Dogs bark.")
    assert (
        cosine(one.data[0].embedding, reply.data[1].embedding) > 0.999
    )  # batching changes nothing


def test_similar_sentences_are_closer_than_unrelated_ones(client: openai.OpenAI) -> None:
    eating, bread, markets = (
        item.embedding
        for item in client.embeddings.create(
            model="embed",
            input=[
                "A man is eating food.",
                "A man is eating a piece of bread.",
                "The stock market fell sharply today.",
            ],
        ).data
    )
    assert cosine(eating, bread) > 0.6
    assert cosine(eating, markets) < 0.2


def test_base64_is_the_same_vector_as_float32_bytes(client: openai.OpenAI) -> None:
    text = "Base64 saves bandwidth."
    floats = client.embeddings.create(model="embed", input=text).data[0].embedding
    raw = httpx.post(
        f"{client.base_url}embeddings",
        json={"model": "embed", "input": text, "encoding_format": "base64"},
        timeout=600,
    ).json()
    packed = base64.b64decode(raw["data"][0]["embedding"])
    decoded = struct.unpack(f"<{len(packed) // 4}f", packed)
    assert len(decoded) == 384
    assert max(abs(a - b) for a, b in zip(decoded, floats, strict=True)) < 1e-6
    # Asked for base64 explicitly, the openai client hands the same string back as it is.
    through_client = (
        client.embeddings.create(model="embed", input=text, encoding_format="base64")
        .data[0]
        .embedding
    )
    assert through_client == raw["data"][0]["embedding"]


def test_the_async_client_and_the_task_endpoint(embed_server: Server) -> None:
    async def run() -> list[float]:
        async with openai.AsyncOpenAI(base_url=embed_server.v1, api_key="u") as aclient:
            reply = await aclient.embeddings.create(model="embed", input="Hello there.")
            return reply.data[0].embedding

    vector = asyncio.run(run())
    task = httpx.post(f"{embed_server.v1}/tasks/embed", json={"input": "Hello there."}, timeout=600)
    assert task.status_code == 200
    assert cosine(task.json()["data"][0]["embedding"], vector) > 0.999


def test_models_lists_the_embedding_task(client: openai.OpenAI) -> None:
    embed = client.models.retrieve("embed")
    assert embed.model_extra is not None
    assert embed.model_extra["zest"]["kind"] == "embedding"


def test_bad_embedding_requests_say_what_to_fix(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as wrong_kind:
        client.embeddings.create(model="chat", input="Hi")
    assert "is a chat route: call /v1/chat/completions" in wrong_kind.value.message
    with pytest.raises(openai.BadRequestError) as empty:
        client.embeddings.create(model="embed", input=["fine", ""])
    assert empty.value.param == "input"
    with pytest.raises(openai.BadRequestError) as too_long:
        client.embeddings.create(model="embed", input=["short", "word " * 700])
    assert too_long.value.code == "context_length_exceeded"
    assert "input 1 is" in too_long.value.message
    with pytest.raises(openai.BadRequestError) as to_chat:
        client.chat.completions.create(model="embed", messages=[{"role": "user", "content": "x"}])
    assert "task 'embed' is an embedding route: call /v1/embeddings" in to_chat.value.message


# A token array as langchain's OpenAIEmbeddings sends one by default: ids of OpenAI's
# cl100k_base (it chunks texts by them). Read as all-MiniLM-L6-v2's WordPiece ids, any such
# array is other text: on 744dfcb a 200 with a vector of that other text.
TOKEN_IDS = [35, 27403, 54842, 13]
REFUSED = (
    "input holds token ids, and task 'embed' embeds with model 'minilm', which would read them "
    "in its own vocabulary, not in the one they were made with (OpenAI's cl100k_base, as "
    "langchain's OpenAIEmbeddings sends them by default): send the text itself (langchain: "
    "OpenAIEmbeddings(..., check_embedding_ctx_length=False))"
)


@pytest.mark.parametrize("ids", [TOKEN_IDS, [TOKEN_IDS, TOKEN_IDS[:2]], [[101, 100277, 102]]])
def test_token_ids_are_refused_with_the_fix_never_read_as_other_text(
    client: openai.OpenAI, ids: list[Any]
) -> None:
    """issue 32: the ids' vocabulary cannot be known from them, and a local model would read
    them in its own; a vector of other text is worse than a 400 that says what to send."""
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model="embed", input=ids)
    assert refused.value.body == {
        "message": REFUSED,
        "type": "invalid_request_error",
        "param": "input",
        "code": None,
    }
    with pytest.raises(openai.BadRequestError) as negative:
        client.embeddings.create(model="embed", input=[101, -1])
    assert "input: -1 is not a token id: " in negative.value.message


def test_retrieval_example_finds_the_right_document(embed_server: Server) -> None:
    out = run_example(embed_server, "retrieve.py", "How can I change my password?")
    assert out.startswith("[closest: document 0,")
