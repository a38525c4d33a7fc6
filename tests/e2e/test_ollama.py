"""Ollama's API (/api/...) with the official `ollama` Python client, against the real server on
SmolLM2 and MiniLM (tests/e2e/routes/ollama.yaml): chat, generate, streaming, tools, format
with a schema, embed, list, ps, show, pull with its progress (from a loopback stand-in for the
Hugging Face Hub), delete, keep_alive 0; and what the dialect must not change: the headers
that say what served, the metrics, the access line, control tokens staying text."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import jsonschema
import ollama
import pytest

from tests.e2e.conftest import REPO, Server, start_server, stop_server
from tests.e2e.prometheus import scrape, total

ROUTES = REPO / "tests" / "e2e" / "routes" / "ollama.yaml"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
# A stand-in for a model file: GGUF's magic, then 20 MB (progress comes every 8 MB).
PAYLOAD = b"GGUF" + bytes(20 << 20)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def hub() -> Iterator[str]:
    """Answers hf_hub_download's requests for org/repo/model.Q4.gguf as the Hub does."""
    etag = hashlib.sha256(PAYLOAD).hexdigest()

    class Handler(BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.answer(with_body=False)

        def do_GET(self) -> None:
            self.answer(with_body=True)

        def answer(self, *, with_body: bool) -> None:
            found = self.path == "/org/repo/resolve/main/model.Q4.gguf"
            self.send_response(200 if found else 404)
            self.send_header("content-length", str(len(PAYLOAD) if found else 0))
            self.send_header("x-repo-commit", COMMIT)
            if found:
                self.send_header("etag", f'"{etag}"')
            else:
                self.send_header("x-error-code", "EntryNotFound")
            self.end_headers()
            if with_body and found:
                self.wfile.write(PAYLOAD)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, hub: str) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("ollama")
    env = {"HF_ENDPOINT": hub, "HF_HOME": str(folder / "hf-home"), "ZEST_WATCH": "false"}
    running = start_server(ROUTES, folder / "zest.log", env)
    yield running
    stop_server(running)


@pytest.fixture
def client(served: Server) -> Iterator[ollama.Client]:
    # Generous: a constrained answer on a loaded 2-core machine takes its time (never timed).
    made = ollama.Client(host=served.base_url, timeout=900)
    yield made
    made.close()


def post(served: Server, path: str, body: Any, **headers: str) -> httpx.Response:
    return httpx.post(f"{served.base_url}/api/{path}", json=body, headers=headers, timeout=900)


# chat and generate


def test_chat_answers_in_ollamas_shape_with_its_final_fields(client: ollama.Client) -> None:
    reply = client.chat(
        model="chat:latest",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        options={"temperature": 0.7, "seed": 11, "num_predict": 12},
    )
    assert reply.model == "chat:latest"
    assert reply.message.role == "assistant"
    assert reply.message.content
    assert reply.done is True
    assert reply.done_reason in ("stop", "length")
    assert reply.eval_count is not None
    assert 1 <= reply.eval_count <= 12
    assert reply.prompt_eval_count is not None
    assert reply.prompt_eval_count > 5
    durations = [reply.total_duration, reply.prompt_eval_duration, reply.eval_duration]
    assert all(isinstance(d, int) and d > 0 for d in durations)
    assert reply.total_duration is not None
    assert reply.prompt_eval_duration is not None
    assert reply.total_duration >= reply.prompt_eval_duration  # nanoseconds, zest's timings
    # Same seed, same settings: the same answer (the sampler sees the same request).
    again = client.chat(
        model="chat",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        options={"temperature": 0.7, "seed": 11, "num_predict": 12},
    )
    assert again.message.content == reply.message.content


def test_chat_streams_a_line_per_piece_of_text(client: ollama.Client) -> None:
    parts = list(
        client.chat(
            model="chat",
            messages=[{"role": "user", "content": "Count from one to ten in words."}],
            stream=True,
            options={"temperature": 0.3, "seed": 5, "num_predict": 24},
        )
    )
    assert len(parts) >= 3  # text as it comes, then the final line
    assert all(not part.done for part in parts[:-1])
    last = parts[-1]
    assert last.done
    assert last.message.content == ""
    assert last.eval_count
    text = "".join(part.message.content or "" for part in parts)
    assert text.strip()
    # A line per piece of text as the engine yields it (a token's, or a few bytes a character
    # needs), never the answer buffered into a few lines.
    assert last.eval_count // 2 <= len(parts) - 1 <= last.eval_count


def test_generate_on_a_chat_task_uses_its_system_and_streams(client: ollama.Client) -> None:
    parts = list(
        client.generate(
            model="chat",
            prompt="Say hello.",
            system="You answer in one short sentence.",
            stream=True,
            options={"num_predict": 8, "temperature": 0.5, "seed": 1},
        )
    )
    assert parts[-1].done
    assert parts[-1].eval_count
    assert parts[-1].eval_count >= 1
    assert "".join(p.response or "" for p in parts).strip()
    assert parts[-1].done_reason in ("stop", "length")


def test_generate_on_a_completion_task_continues_the_text(served: Server) -> None:
    answer = post(
        served,
        "generate",
        {"model": "autocomplete", "prompt": "def add(a, b):", "stream": False,
         "options": {"temperature": 0, "num_predict": 8}},
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["done"]
    assert body["eval_count"] <= 8
    assert body["response"]
    assert answer.headers["x-zest-route"].startswith("task=autocomplete; model=smollm2;")
    # The same text through the OpenAI endpoint, greedy: the same continuation.
    openai = httpx.post(
        f"{served.v1}/completions",
        json={"model": "autocomplete", "prompt": "def add(a, b):", "temperature": 0,
              "max_tokens": 8},
        timeout=900,
    )  # fmt: skip
    assert openai.json()["choices"][0]["text"] == body["response"]


def test_num_predict_is_capped_by_the_route_and_other_options_are_named(served: Server) -> None:
    answer = post(
        served,
        "generate",
        {"model": "autocomplete", "prompt": "Once upon a time", "stream": False,
         "options": {"num_predict": 500, "num_gpu": 99, "mirostat": 2, "temperature": 0.8},
         "think": False},
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert answer.json()["eval_count"] <= 16  # the route's max_tokens
    assert answer.headers["x-zest-ignored"] == "think, options.num_gpu, options.mirostat"


def test_raw_mode_keeps_control_token_text_as_text(served: Server) -> None:
    """raw: true sends the prompt without the template, and what the client wrote stays
    text: `<|im_start|>` in the prompt is counted as the characters it is, not one token."""
    plain = "user\nHi<|im_end|>\n<|im_start|>assistant\n"
    raw = {"model": "chat", "prompt": "<|im_start|>" + plain, "raw": True, "stream": False,
           "options": {"num_predict": 1}}  # fmt: skip
    answer = post(served, "generate", raw)
    assert answer.status_code == 200, answer.text
    text = post(served, "generate", {**raw, "prompt": "[|im_start|]" + plain}).json()
    # The control-token text is tokenized as characters, as the look-alike text is.
    assert answer.json()["prompt_eval_count"] > 20
    assert abs(answer.json()["prompt_eval_count"] - text["prompt_eval_count"]) <= 6


# tools and format


def test_a_tool_call_comes_back_with_arguments_as_an_object(client: ollama.Client) -> None:
    reply = client.chat(
        model="chat",
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER],
        options={"temperature": 0.3, "seed": 2, "num_predict": 96},
    )
    calls = reply.message.tool_calls or []
    if calls:  # the constrained answer either calls the tool or answers
        call = calls[0]
        assert call.function.name == "get_weather"
        assert isinstance(call.function.arguments, dict)
        jsonschema.validate(call.function.arguments, WEATHER["function"]["parameters"])
        # The call and its result go back in Ollama's history shape.
        follow = client.chat(
            model="chat",
            messages=[
                {"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": "18 degrees and sunny", "tool_name": "get_weather"},
            ],
            tools=[WEATHER],
            options={"num_predict": 24},
        )
        assert follow.done
    else:  # answered directly: in words (an answer cut short holds what it completed)
        assert reply.message.content or reply.done_reason == "length"


def test_a_task_that_denies_tools_says_so_in_ollamas_shape(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as raised:
        client.chat(model="summarization", messages=[{"role": "user", "content": "x"}],
                    tools=[WEATHER])  # fmt: skip
    assert raised.value.status_code == 400
    assert raised.value.error.startswith("task 'summarization' does not accept tools")


def test_format_with_a_schema_answers_json_that_follows_it(client: ollama.Client) -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 30},
            "country": {"type": "string", "maxLength": 30},
        },
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    for stream in (False, True):
        if stream:
            parts = list(
                client.chat(
                    model="chat",
                    messages=[{"role": "user", "content": "Name a city and its country."}],
                    format=schema,
                    stream=True,
                    options={"temperature": 0.8, "seed": 4, "num_predict": 96},
                )
            )
            text = "".join(p.message.content or "" for p in parts)
        else:
            text = (
                client.chat(
                    model="chat",
                    messages=[{"role": "user", "content": "Name a city and its country."}],
                    format=schema,
                    options={"temperature": 0.8, "seed": 4, "num_predict": 96},
                ).message.content
                or ""
            )
        jsonschema.validate(json.loads(text), schema)


def test_format_json_answers_a_json_object(client: ollama.Client) -> None:
    reply = client.generate(model="chat", prompt="Describe a cat as JSON.", format="json",
                            options={"num_predict": 40, "seed": 9, "temperature": 0.5})  # fmt: skip
    if reply.done_reason == "stop":
        assert isinstance(json.loads(reply.response), dict)


# embeddings


def test_embed_and_embeddings_give_the_openai_endpoints_vectors(
    client: ollama.Client, served: Server
) -> None:
    reply = client.embed(model="embed", input=["A cat sits on the mat.", "Dogs bark."])
    assert len(reply.embeddings) == 2
    assert len(reply.embeddings[0]) == 384
    assert reply.prompt_eval_count
    assert reply.prompt_eval_count > 4
    one = client.embeddings(model="embed:latest", prompt="Dogs bark.")
    openai = httpx.post(f"{served.v1}/embeddings", json={"model": "embed", "input": "Dogs bark."},
                        timeout=900).json()["data"][0]["embedding"]  # fmt: skip
    assert list(one.embedding) == pytest.approx(openai, abs=1e-5)
    assert list(reply.embeddings[1]) == pytest.approx(openai, abs=1e-4)


# models


def test_list_show_and_ps_describe_the_tasks(client: ollama.Client) -> None:
    names = [m.model for m in client.list().models]
    assert names[:4] == ["chat:latest", "autocomplete:latest", "summarization:latest",
                         "embed:latest"]  # fmt: skip
    listed = client.list().models[0]
    assert listed.size
    assert listed.size > 50_000_000
    assert listed.details
    assert listed.details.format == "gguf"
    assert listed.details.family == "llama"
    shown = client.show("chat")
    assert shown.capabilities == ["completion", "tools"]
    assert shown.modelinfo
    assert shown.modelinfo["llama.context_length"] == 2048
    assert "<|im_start|>" in (shown.template or "")
    assert client.show("summarization").capabilities == ["completion"]
    assert client.show("embed").capabilities == ["embedding"]
    client.chat(model="chat", messages=[{"role": "user", "content": "hi"}],
                options={"num_predict": 1})  # fmt: skip
    running = {m.model for m in client.ps().models}
    assert "chat:latest" in running


def test_an_unknown_model_is_a_404_in_ollamas_shape(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as raised:
        client.chat(model="llama3.2", messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 404
    assert raised.value.error == (
        "unknown task 'llama3.2': use one of autocomplete, chat, embed, fetched, summarization "
        "(GET /api/tags lists them)"
    )
    with pytest.raises(ollama.ResponseError) as shown:
        client.show("chat:7b")
    assert shown.value.status_code == 404


def test_keep_alive_0_unloads_and_an_empty_prompt_loads(client: ollama.Client) -> None:
    loaded = client.generate(model="embed", prompt="")
    assert loaded.done
    assert loaded.done_reason == "load"
    assert "embed:latest" in {m.model for m in client.ps().models}
    unloaded = client.generate(model="embed", prompt="", keep_alive=0)
    assert unloaded.done_reason == "unload"
    assert "embed:latest" not in {m.model for m in client.ps().models}
    # A duration keeps it: ps says when it goes.
    client.embed(model="embed", input="warm", keep_alive="10m")
    (entry,) = [m for m in client.ps().models if m.model == "embed:latest"]
    assert entry.expires_at is not None


def test_create_copy_and_push_answer_501_saying_what_to_do(served: Server) -> None:
    for path in ("create", "copy", "push"):
        answer = post(served, path, {"model": "x"})
        assert answer.status_code == 501
        assert answer.json() == {
            "error": f"POST /api/{path} is not something zest does: its models are the routes "
            "file's; add a model to routes.yaml (zest models pull fetches its file) and reload"
        }


def test_pull_streams_the_pullers_progress_then_delete_removes_the_copy(
    client: ollama.Client, served: Server
) -> None:
    lines = list(client.pull("fetched", stream=True))
    assert lines[0].status == "pulling manifest"
    progress = [line for line in lines if line.status == "pulling model.Q4.gguf"]
    assert [line.total for line in progress] == [len(PAYLOAD)] * len(progress)
    completed = [line.completed for line in progress]
    assert completed == sorted(completed)
    assert completed[-1] == len(PAYLOAD)
    assert len(progress) >= 3  # 0, every 8 MB, the end
    assert lines[-1].status == "success"
    listed = {m.model: m for m in client.list().models}
    assert listed["fetched:latest"].size == len(PAYLOAD)
    # A local source is there already: one complete transfer.
    local = list(client.pull("chat", stream=True))
    assert [line.status for line in local] == ["pulling manifest",
        "pulling SmolLM2-135M-Instruct.Q4_1.gguf", "success"]  # fmt: skip
    assert client.delete("fetched").status == "success"
    assert {m.model: m for m in client.list().models}["fetched:latest"].size == 0
    with pytest.raises(ollama.ResponseError) as refused:
        client.delete("chat")
    assert refused.value.status_code == 400
    assert "which zest did not pull" in refused.value.error


# the dialect is a label


def test_headers_metrics_and_the_access_line_say_what_served(served: Server) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream": False,
            "options": {"num_predict": 2}}  # fmt: skip
    before = scrape(f"{served.base_url}/metrics")
    answer = post(served, "chat", body)
    assert answer.headers["x-zest-route"].startswith("task=chat; model=smollm2; device=cpu;")
    assert answer.json()["zest"]["task"] == "chat"
    after = scrape(f"{served.base_url}/metrics")
    labels = {"task": "chat", "dialect": "ollama", "outcome": "ok"}
    assert (
        total(after, "zest_requests_total", **labels)
        == total(before, "zest_requests_total", **labels) + 1
    )
    request_id = answer.headers["x-request-id"]
    line = served.wait_for_log(f'"POST /api/chat HTTP/1.1" 200 {request_id} ollama ')
    assert line


def test_bad_bodies_get_ollamas_400_saying_what_to_fix(served: Server) -> None:
    cases = [
        ({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "optoins": {}},
         "optoins: unknown parameter: did you mean 'options'?"),
        ({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "temprature": 1},
         "temprature: unknown parameter: remove it (docs/ollama.md lists them)"),
        ({"model": "chat", "prompt": "hi", "options": {"temperature": 5}},
         "options.temperature: Input should be less than or equal to 2, got 5"),
        ({"model": "chat", "prompt": "hi", "options": {"num_gpux": 1}},
         "options: 'num_gpux' is not one of Ollama's options: did you mean 'num_gpu'? "
         "(docs/ollama.md lists them)"),
        ({"model": "chat", "prompt": "hi", "images": ["not base64!"]},
         "images: image 0 is not base64: send each image's bytes base64-encoded (no data: "
         "header)"),
        ({"model": "chat", "prompt": "hi", "keep_alive": "soon"},
         "keep_alive: keep_alive 'soon' is not a duration: send seconds (300), a duration such "
         "as 5m or 1h30m, 0 to unload the model now, or -1 to keep it loaded"),
    ]  # fmt: skip
    for body, message in cases:
        path = "chat" if "messages" in body else "generate"
        answer = post(served, path, body)
        assert answer.status_code == 400, answer.text
        assert answer.json() == {"error": message}
    too_many = {"model": "chat", "prompt": "hi", "images": ["aGk="] * 17}
    answer = post(served, "generate", too_many)
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("images: List should have at most 16 items")
