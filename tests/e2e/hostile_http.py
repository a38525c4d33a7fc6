"""The corpus's HTTP-level cases: path tricks, wrong methods, header abuse, the body limit."""

from __future__ import annotations

from collections.abc import Iterator

from tests.e2e.hostile_corpus import (
    ADMIN_KEY,
    ANY,
    AUTH,
    CHAT,
    GETS,
    HEADERS,
    JSON,
    KEY,
    LIMIT,
    POSTS,
    Case,
    case,
    post,
)
from tests.e2e.rawhttp import build

HI = CHAT  # a chat request the server answers with one token


def get(target: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> bytes:
    return build(b"GET", target, [AUTH] if headers is None else headers)


def refused_by_server(id: str, raw: bytes) -> Case:
    """Malformed HTTP: the HTTP server answers 400 text/plain (or closes) before zest runs."""
    return Case(id, raw, frozenset({0, 400}), by_server=True)


PATHS: list[tuple[str, bytes, bytes, set[int]]] = [
    ("dot-dot", b"GET", b"/v1/../v1/models", {404}),
    ("dot", b"GET", b"/v1/./models", {404}),
    ("double-slash-first", b"GET", b"//v1/models", {200}),
    ("double-slash-inside", b"GET", b"/v1//models", {200, 404}),
    ("trailing-slash", b"GET", b"/v1/models/", {200}),
    ("encoded-dot-dot", b"GET", b"/v1/%2e%2e/v1/models", {404}),
    ("upper-case-prefix", b"GET", b"/V1/models", {404}),
    ("upper-case-path", b"GET", b"/v1/MODELS", {404}),
    ("model-id-dot-dot", b"GET", b"/v1/models/%2e%2e%2fhealth", {404}),
    ("model-id-encoded-slash", b"GET", b"/v1/models/chat%2f..%2f", {404}),
    ("model-id-nul", b"GET", b"/v1/models/%00", {404}),
    ("model-id-60000", b"GET", b"/v1/models/" + b"a" * 60000, {404}),
    ("task-encoded-slash", b"POST", b"/v1/tasks/a%2Fb", {404}),
    ("task-nul", b"POST", b"/v1/tasks/%00", {404}),
    ("task-invalid-utf8", b"POST", b"/v1/tasks/%ff%fe", {404}),
    ("task-8000", b"POST", b"/v1/tasks/" + b"t" * 8000, {404}),
    ("task-control-token", b"POST", b"/v1/tasks/%3C%7Cim_start%7C%3E", {404}),
    ("task-trailing-space", b"POST", b"/v1/tasks/chat%20", {404}),
    ("task-traversal", b"POST", b"/v1/tasks/..%2F..%2Fetc%2Fpasswd", {404}),
    ("task-extra-segment", b"POST", b"/v1/tasks/chat/extra", {404, 405}),
    ("task-emoji-encoded", b"POST", b"/v1/tasks/%F0%9F%92%A5", {404}),
    ("explain-unknown-task", b"GET", b"/v1/routes/" + b"z" * 500 + b"/explain", {404}),
    ("explain-not-a-number", b"GET", b"/v1/routes/chat/explain?prompt_tokens=abc", {400}),
    ("explain-negative", b"GET", b"/v1/routes/chat/explain?prompt_tokens=-1", {400}),
    ("explain-infinite", b"GET", b"/v1/routes/chat/explain?prompt_tokens=1e309", {400}),
    ("explain-fraction", b"GET", b"/v1/routes/chat/explain?prompt_tokens=1.5", {400}),
    ("explain-nul", b"GET", b"/v1/routes/chat/explain?prompt_tokens=%00", {400}),
    ("explain-long", b"GET", b"/v1/routes/chat/explain?prompt_tokens=" + b"9" * 3000, {400}),
    (
        "explain-twice",
        b"GET",
        b"/v1/routes/chat/explain?prompt_tokens=1&prompt_tokens=2",
        {200, 400},
    ),
    ("query-junk", b"GET", b"/v1/models?%ff=%00&a=" + b"q" * 10000, {200}),
    ("openapi-yaml", b"GET", b"/v1/openapi.yaml", {404}),
    ("root", b"GET", b"/", {200}),  # the web page
    ("ui-unknown", b"GET", b"/ui/_web.py", {404}),
    ("ui-traversal", b"GET", b"/ui/..%2f..%2f_app.py", {404}),
    ("ui-dotdot", b"GET", b"/ui/../routes.yaml", {404}),
    ("prefix-only", b"GET", b"/v1", {404}),
]
QUERY_PARAM = {
    "explain-not-a-number",
    "explain-negative",
    "explain-infinite",
    "explain-fraction",
    "explain-nul",
    "explain-long",
}


def paths() -> Iterator[Case]:
    for name, method, target, statuses in PATHS:
        body = HI if method == b"POST" else None
        raw = build(method, target, HEADERS if body else [AUTH], body)
        param = "prompt_tokens" if name in QUERY_PARAM else ANY
        yield case(f"path/{name}", raw, statuses, param)
    yield refused_by_server("path/request-line-of-1mb", get(b"/v1/models/" + b"a" * 1_000_000))
    yield refused_by_server("path/raw-utf8", build(b"POST", "/v1/tasks/💥".encode(), HEADERS, HI))
    yield refused_by_server("path/space-inside", get(b"/v1/mod els"))


def methods() -> Iterator[Case]:
    for endpoint, (path, body) in POSTS.items():
        for method in (b"GET", b"PUT", b"DELETE", b"PATCH", b"TRACE", b"FOO"):
            if path.endswith("/explain") and method == b"GET":
                continue  # GET explains by prompt_tokens
            raw = build(method, path.encode(), HEADERS, body)
            yield case(f"method/{endpoint}/{method.decode()}", raw, 405)
    for path in GETS:
        for method in (b"POST", b"PUT", b"DELETE"):
            if path.endswith("/explain") and method == b"POST":
                continue  # POST explains a body
            raw = build(method, path.encode(), HEADERS, b"{}")
            yield case(f"method{path}/{method.decode()}", raw, 405)
    for path in (b"/v1/health", b"/v1/ready", b"/api/v1/health", b"/api/v1/ready"):
        # load balancers probe with HEAD: GET's status, no body, no key needed
        yield case(f"method{path.decode()}/HEAD", build(b"HEAD", path, []), 200)
        yield case(f"method{path.decode()}/GET-lower-case", build(b"get", path, []), 405)
    yield case("method/models/HEAD", build(b"HEAD", b"/v1/models", [AUTH]), 405)
    yield case("method/chat/OPTIONS", build(b"OPTIONS", b"/v1/chat/completions", []), 204)


def _auth(*values: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return [JSON, *values]


AUTH_CASES: list[tuple[str, list[tuple[bytes, bytes]], int]] = [
    ("none", _auth(), 401),
    ("wrong-key", _auth((b"authorization", b"Bearer sk-wrong")), 401),
    ("scheme-only", _auth((b"authorization", b"Bearer")), 401),
    ("empty", _auth((b"authorization", b"")), 401),
    ("spaces-around-key", _auth((b"authorization", b"Bearer   " + KEY + b"  ")), 200),
    ("lower-case-scheme", _auth((b"authorization", b"bearer " + KEY)), 200),
    ("basic", _auth((b"authorization", b"Basic dXNlcjpwYXNz")), 401),
    ("key-without-scheme", _auth((b"authorization", KEY)), 401),  # the key itself
    ("token-scheme", _auth((b"authorization", b"Token " + KEY)), 401),
    ("upper-case-scheme", _auth((b"authorization", b"BEARER " + KEY)), 200),
    (
        "two-headers-one-good",
        _auth((b"authorization", b"Bearer " + KEY), (b"authorization", b"Bearer sk-wrong")),
        401,
    ),
    (
        "two-headers-both-good",
        _auth((b"authorization", b"Bearer " + KEY), (b"authorization", b"Bearer " + ADMIN_KEY)),
        401,
    ),
    ("two-x-api-keys", _auth((b"x-api-key", KEY), (b"x-api-key", b"sk-wrong")), 401),
    ("x-api-key", _auth((b"x-api-key", KEY)), 200),
    ("8kb-key", _auth((b"authorization", b"Bearer " + b"k" * 8192)), 401),
    ("latin-1-key", _auth((b"authorization", b"Bearer \xe9\xe8")), 401),
    ("key-in-query", _auth(), 401),  # sent as ?api_key= below: never read there
]
MEDIA_TYPES: list[tuple[str, bytes | None, int]] = [
    ("missing", None, 415),
    ("text-plain", b"text/plain", 415),
    ("form", b"application/x-www-form-urlencoded", 415),
    ("multipart", b"multipart/form-data; boundary=x", 415),
    ("empty", b"", 415),
    ("json-x", b"application/jsonx", 415),
    ("two-types", b"application/json, text/plain", 415),
    ("8kb", b"application/" + b"j" * 8192, 415),
    ("charset", b"application/json; charset=utf-8", 200),
    ("upper-case", b"APPLICATION/JSON", 200),
    ("suffix-json", b"application/vnd.api+json", 200),
]


def headers() -> Iterator[Case]:
    for name, values, status in AUTH_CASES:
        target = b"/v1/chat/completions" + (b"?api_key=" + KEY if name == "key-in-query" else b"")
        yield case(f"auth/{name}", build(b"POST", target, values, HI), status)
    yield case("auth/probe-with-a-wrong-key", get(b"/v1/health", [(b"authorization", b"x")]), 200)
    for path in (b"/v1/openapi.json", b"/api/v1/openapi.json"):  # the document is the API's
        yield case(f"auth/no-key{path.decode()}", get(path, []), 401, None, "missing API key")
    for name, media_type, status in MEDIA_TYPES:
        values = [AUTH] + ([(b"content-type", media_type)] if media_type is not None else [])
        param = "content-type" if status == 415 else ANY
        yield case(f"content-type/{name}", post("/v1/chat/completions", HI, values), status, param)
    yield case("header/60kb-value", get(b"/v1/models", [AUTH, (b"x-big", b"v" * 60000)]), 200)
    many = [(b"x-h%d" % i, b"1") for i in range(2000)]
    yield case("header/2000-headers", get(b"/v1/models", [AUTH, *many]), {200, 431})
    continue_ = [*HEADERS, (b"expect", b"100-continue")]
    yield case("header/expect-100-continue", post("/v1/chat/completions", HI, continue_), 200)
    yield from _framing()
    yield from _hosts()
    yield from _origins()


def _framing() -> Iterator[Case]:
    path = b"/v1/chat/completions"
    lying = [(b"content-length", b"5")]  # shorter than the body: the rest is a bad request
    yield case(
        "length/shorter-than-body",
        build(b"POST", path, HEADERS + lying, HI, length=False),
        400,
        None,
        "not valid JSON",
    )
    chunked = [*HEADERS, (b"transfer-encoding", b"chunked")]
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(HI), HI)
    yield case("length/chunked", build(b"POST", path, chunked, body, length=False), 200)
    for name, value in (("not-a-number", b"abc"), ("negative", b"-1"), ("hex", b"0x10")):
        raw = build(b"POST", path, [*HEADERS, (b"content-length", value)], HI, length=False)
        yield refused_by_server(f"length/{name}", raw)
    two = [*HEADERS, (b"content-length", b"5"), (b"content-length", b"%d" % len(HI))]
    yield refused_by_server("length/two-values", build(b"POST", path, two, HI, length=False))
    gzip = [*HEADERS, (b"transfer-encoding", b"gzip")]
    yield refused_by_server(
        "length/unknown-transfer-encoding", build(b"POST", path, gzip, HI, length=False)
    )
    bad_chunk = build(b"POST", path, chunked, b"zz\r\n{}\r\n0\r\n\r\n", length=False)
    yield refused_by_server("length/bad-chunk-size", bad_chunk)
    yield refused_by_server("header/nul-in-value", get(b"/v1/models", [AUTH, (b"x-a", b"a\x00b")]))
    yield refused_by_server("header/space-in-name", get(b"/v1/models", [AUTH, (b"x a", b"1")]))


NOT_OURS = "is not a name of this server"  # a 403 host_not_allowed's message says so
HOSTS: list[tuple[str, bytes | None, int]] = [  # the server binds 127.0.0.1
    ("rebound-name", b"rebind.evil.example:8000", 403),
    ("rebound-name-no-port", b"rebind.evil.example", 403),
    ("localhost-prefix", b"localhost.evil.example", 403),
    ("loopback-prefix", b"127.0.0.1.evil.example:8000", 403),
    ("all-interfaces", b"0.0.0.0:8000", 403),
    ("lan-address", b"192.168.1.10", 403),
    ("empty", b"", 403),
    ("user-info", b"user@127.0.0.1", 403),
    ("8kb-name", b"h" * 8192, 403),
    ("localhost-port", b"localhost:8000", 200),
    ("localhost-upper-case", b"LOCALHOST", 200),
    ("localhost-final-dot", b"localhost.:8000", 200),
    ("loopback-127-8", b"127.8.0.1:1", 200),
    ("ipv6-loopback", b"[::1]:8000", 200),
]


def _hosts() -> Iterator[Case]:
    """DNS rebinding: a page's own name pointed at 127.0.0.1 still says so in Host."""
    for name, value, status in HOSTS:
        raw = build(b"GET", b"/v1/models", [AUTH], host=value)
        if status == 403:
            yield case(f"host/{name}", raw, status, None, NOT_OURS)
        else:
            yield case(f"host/{name}", raw, status)
    rebound = b"rebind.evil.example:8000"
    chat = build(b"POST", b"/v1/chat/completions", HEADERS, HI, host=rebound)
    yield case("host/rebound-name-chat", chat, 403, None, NOT_OURS)
    reload = build(b"POST", b"/v1/admin/reload", [AUTH], host=rebound)
    yield case("host/rebound-name-reload", reload, 403, None, NOT_OURS)
    probe = build(b"GET", b"/v1/ready", [], host=rebound)
    yield case("host/rebound-name-probe", probe, 200)  # balancers send names of their own
    http10 = b"GET /v1/models HTTP/1.0\r\nauthorization: Bearer " + ADMIN_KEY + b"\r\n\r\n"
    yield case("host/http-1.0-without-host", http10, 403, None, "without a Host header")
    two = build(b"GET", b"/v1/models", [AUTH, (b"host", b"rebind.evil.example")])
    yield refused_by_server("host/two-host-headers", two)  # the HTTP server refuses two


ELSEWHERE = "ZEST_CORS_ORIGINS does not list it"  # a 403 origin_not_allowed's message says so


def _origins() -> Iterator[Case]:
    """A page elsewhere may send a state-changing request unasked: Origin names the page."""
    for name, origin in (
        ("other-port", b"http://127.0.0.1:1"),
        ("other-site", b"https://evil.example"),
        ("null", b"null"),
        ("not-an-origin", b"http://127.0.0.1/x"),
    ):
        chat = post("/v1/chat/completions", HI, [*HEADERS, (b"origin", origin)])
        yield case(f"origin/{name}/chat", chat, 403, None, ELSEWHERE)
        reload = build(b"POST", b"/v1/admin/reload", [AUTH, (b"origin", origin)])
        yield case(f"origin/{name}/reload", reload, 403, None, ELSEWHERE)
    own = [*HEADERS, (b"origin", b"http://127.0.0.1")]  # Host 127.0.0.1: the server's page
    yield case("origin/own-page", post("/v1/chat/completions", HI, own), 200)
    read = get(b"/v1/models", [AUTH, (b"origin", b"https://evil.example")])
    yield case("origin/read-from-elsewhere", read, 200)  # the browser keeps the answer from it
    for name, media_type in (
        ("text-plain", b"text/plain"),
        ("form", b"application/x-www-form-urlencoded"),
        ("multipart", b"multipart/form-data; boundary=x"),
    ):
        raw = build(b"POST", b"/v1/admin/reload", [AUTH, (b"content-type", media_type)], b"")
        yield case(f"origin/form-type-reload/{name}", raw, 415, "content-type", "takes no body")


def body_limit() -> Iterator[Case]:
    """Bodies at and just over ZEST_MAX_BODY_BYTES (whitespace after the JSON pads them)."""
    path = b"/v1/chat/completions"
    at_limit = HI + b" " * (LIMIT - len(HI))
    yield case("limit/at", post(path.decode(), at_limit), 200)
    yield case("limit/one-over", post(path.decode(), at_limit + b" "), 413)
    chunked = [*HEADERS, (b"transfer-encoding", b"chunked")]
    for name, body, status in (
        ("chunked-at", at_limit, 200),
        ("chunked-over", at_limit + b" ", 413),
    ):
        framed = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        yield case(f"limit/{name}", build(b"POST", path, chunked, framed, length=False), status)
    announced = [*HEADERS, (b"content-length", b"%d" % (LIMIT + 1))]
    yield case("limit/announced-over", build(b"POST", path, announced, HI, length=False), 413)
    for endpoint, (target, _) in POSTS.items():
        yield case(f"limit/one-over/{endpoint}", post(target, b" " * (LIMIT + 1)), 413)
