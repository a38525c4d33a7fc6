"""The hostile-input corpus of Ollama's API (/api/...): what test_hostile_ollama.py sends to the
hostile server (tests/e2e/routes/hostile.yaml: keys on, a 64 KiB body limit, max_tokens 8).

Bad JSON at every endpoint that reads a body, hostile strings in every text field, numbers
out of range in every option, images that are too many, too large or not images, JSON Schema
grammar bombs as `format`, names and fields that do not exist: each case says which statuses
it may get, and (where it is pinned) a part of Ollama's `{"error": "..."}` message.
"""

from __future__ import annotations

from collections.abc import Iterator

from tests.e2e.hostile_corpus import BAD_JSON, BOMBS, HEADERS, LIMIT, STRINGS, Case, case
from tests.e2e.rawhttp import build

CHAT_HEAD = b'{"model":"chat","stream":false,"options":{"num_predict":1},"messages":'
GENERATE = b'{"model":"chat","stream":false,"options":{"num_predict":1},'
ENDPOINTS = {  # every Ollama endpoint that reads a body: its method and path
    "chat": (b"POST", "/api/chat"),
    "generate": (b"POST", "/api/generate"),
    "embed": (b"POST", "/api/embed"),
    "embeddings": (b"POST", "/api/embeddings"),
    "show": (b"POST", "/api/show"),
    "pull": (b"POST", "/api/pull"),
    "delete": (b"DELETE", "/api/delete"),
}
PNG = b"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"  # a PNG's first bytes


def send(method: bytes, path: str, body: bytes) -> bytes:
    return build(method, path.encode(), HEADERS, body)


def bad_json() -> Iterator[Case]:
    for endpoint, (method, path) in ENDPOINTS.items():
        for name, body in BAD_JSON:
            yield case(f"ollama/bad-json/{endpoint}/{name}", send(method, path, body), 400)


def _text_fields() -> list[tuple[str, str, bytes, bytes]]:
    """Where a request carries text: (name, path, the body before the string, after it)."""
    return [
        ("chat-content", "/api/chat", CHAT_HEAD + b'[{"role":"user","content":', b"}]}"),
        ("generate-prompt", "/api/generate", GENERATE + b'"prompt":', b"}"),
        ("generate-system", "/api/generate", GENERATE + b'"prompt":"Hi","system":', b"}"),
        ("raw-prompt", "/api/generate", GENERATE + b'"raw":true,"prompt":', b"}"),
        ("embed-input", "/api/embed", b'{"model":"embed","input":', b"}"),
        ("model-name", "/api/chat", b'{"model":', b',"messages":[]}'),
        (
            "tool-name",
            "/api/chat",
            CHAT_HEAD + b'[{"role":"tool","content":"x","tool_name":',
            b"}]}",
        ),
    ]


def hostile_strings() -> Iterator[Case]:
    for field, path, head, tail in _text_fields():
        for name, string, _ in STRINGS:
            body = head + string + tail
            if len(body) > LIMIT:
                continue
            yield case(f"ollama/strings/{field}/{name}", send(b"POST", path, body), {200, 400, 404})


OPTIONS: list[tuple[str, bytes, str]] = [
    ("temperature-huge", b'{"temperature":1e308}', "options.temperature"),
    ("temperature-negative", b'{"temperature":-1}', "options.temperature"),
    ("temperature-string", b'{"temperature":"hot"}', "options.temperature"),
    ("top-p-zero", b'{"top_p":0}', "options.top_p"),
    ("top-k-float", b'{"top_k":1.5}', "options.top_k"),
    ("seed-over-int64", b'{"seed":18446744073709551616}', "options.seed"),
    ("num-predict-zero", b'{"num_predict":0}', "num_predict 0 asks for no tokens"),
    ("num-predict-below", b'{"num_predict":-3}', "options.num_predict"),
    ("num-ctx-zero", b'{"num_ctx":0}', "options.num_ctx"),
    ("stop-17", b'{"stop":[' + b",".join([b'"s"'] * 17) + b"]}", "at most 16 stop"),
    ("stop-empty", b'{"stop":[""]}', "must not be empty"),
    ("unknown-option", b'{"temprature":1}', "did you mean 'temperature'?"),
    ("options-list", b"[1,2]", "options"),
    ("repeat-penalty-zero", b'{"repeat_penalty":0}', "options.repeat_penalty"),
]


def bad_options() -> Iterator[Case]:
    for name, options, message in OPTIONS:
        body = GENERATE.replace(b'"options":{"num_predict":1},', b"") + b'"prompt":"Hi",'
        raw = send(b"POST", "/api/generate", body + b'"options":' + options + b"}")
        yield case(f"ollama/options/{name}", raw, 400, message=message)


def images() -> Iterator[Case]:
    head = GENERATE + b'"prompt":"Hi","images":'
    many = b"[" + b",".join([b'"' + PNG + b'"'] * 17) + b"]"
    yield case("ollama/images/17", send(b"POST", "/api/generate", head + many + b"}"), 400,
               message="at most 16")  # fmt: skip
    # Over the body limit: refused before it is read, let alone decoded.
    big = b'["' + PNG + b"A" * (LIMIT + 10) + b'"]'
    yield case("ollama/images/over-the-limit", send(b"POST", "/api/generate", head + big + b"}"),
               413)  # fmt: skip
    for name, image, message in [
        ("not-base64", b'["%%%not base64%%%"]', "is not base64"),
        ("not-an-image", b'["aGVsbG8gd29ybGQ="]', "is not a PNG, JPEG, GIF or WebP"),
        ("number", b"[42]", "images.0"),
        ("object", b'[{"data":"x"}]', "images.0"),
    ]:
        raw = send(b"POST", "/api/generate", head + image + b"}")
        yield case(f"ollama/images/{name}", raw, 400, message=message)
    # A real image to a route whose model reads text: the plan says no attempt can take it.
    raw = send(b"POST", "/api/generate", head + b'["' + PNG + b'"]}')
    yield case("ollama/images/to-a-text-model", raw, 400)
    chat = CHAT_HEAD + b'[{"role":"user","content":"Hi","images":["' + PNG + b'"]}]}'
    yield case("ollama/images/chat-to-a-text-model", send(b"POST", "/api/chat", chat), 400)


def format_bombs() -> Iterator[Case]:
    for name, schema, message in BOMBS:
        raw = send(b"POST", "/api/chat", GENERATE.replace(b"{", b'{"format":' + schema + b",", 1)
                   + b'"messages":[{"role":"user","content":"Hi"}]}')  # fmt: skip
        yield case(f"ollama/format/{name}", raw, 400, message=message)
    for name, value in [("yaml", b'"yaml"'), ("number", b"1"), ("list", b"[]")]:
        raw = send(b"POST", "/api/generate", GENERATE + b'"prompt":"Hi","format":' + value + b"}")
        yield case(f"ollama/format/{name}", raw, 400, message="format")


REFUSALS: list[tuple[str, str, bytes, int, str]] = [
    ("unknown-field", "/api/chat", CHAT_HEAD + b'[],"temprature":1}', 400, "temprature"),
    ("role-function", "/api/chat", CHAT_HEAD + b'[{"role":"function","content":"x"}]}', 400,
     "messages.0.role"),
    ("content-parts", "/api/chat", CHAT_HEAD + b'[{"role":"user","content":[{"type":"text"}]}]}',
     400, "messages.0.content"),
    ("user-tool-calls", "/api/chat", CHAT_HEAD
     + b'[{"role":"user","content":"x","tool_calls":[{"function":{"name":"f"}}]}]}', 400,
     "only assistant messages carry tool_calls"),
    ("template", "/api/generate", GENERATE + b'"prompt":"Hi","template":"{{ .Prompt }}"}', 400,
     "template"),
    ("context", "/api/generate", GENERATE + b'"prompt":"Hi","context":[1,2,3]}', 400,
     "context"),
    ("raw-with-system", "/api/generate", GENERATE + b'"prompt":"Hi","raw":true,"system":"s"}',
     400, "no system turn"),
    ("suffix-on-chat", "/api/generate", GENERATE + b'"prompt":"Hi","suffix":"x"}', 400,
     "suffix"),
    ("keep-alive-words", "/api/generate", GENERATE + b'"prompt":"Hi","keep_alive":"soon"}', 400,
     "keep_alive"),
    ("keep-alive-true", "/api/generate", GENERATE + b'"prompt":"Hi","keep_alive":true}', 400,
     "keep_alive"),
    ("keep-alive-infinite", "/api/generate", GENERATE + b'"prompt":"Hi","keep_alive":1e999}',
     400, ""),
    ("unknown-model", "/api/chat", b'{"model":"llama3.2","messages":[{"role":"user",'
     b'"content":"Hi"}]}', 404, "unknown task 'llama3.2'"),
    ("other-tag", "/api/show", b'{"model":"chat:7b"}', 404, "unknown task 'chat:7b'"),
    ("show-nothing", "/api/show", b"{}", 400, "send model"),
    ("embed-a-chat", "/api/embed", b'{"model":"chat","input":"x"}', 400, "chat route"),
    ("embed-dimensions", "/api/embed", b'{"model":"embed","input":"x","dimensions":8}', 400,
     "dimensions"),
    ("embed-empty", "/api/embed", b'{"model":"embed","input":""}', 400, "empty"),
    ("pull-unknown", "/api/pull", b'{"model":"llama3.2"}', 404, "unknown task"),
    ("create", "/api/create", b'{"model":"x"}', 501, "not something zest does"),
]  # fmt: skip


def refusals() -> Iterator[Case]:
    for name, path, body, status, message in REFUSALS:
        yield case(f"ollama/refused/{name}", send(b"POST", path, body), status, message=message)


def corpus() -> list[Case]:
    return [
        *bad_json(),
        *hostile_strings(),
        *bad_options(),
        *images(),
        *format_bombs(),
        *refusals(),
    ]
