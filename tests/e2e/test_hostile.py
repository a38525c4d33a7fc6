"""The hostile-input corpus against a real `zest serve`: every case's status is one it may
get, no 5xx but a documented 503/504, every error in OpenAI's shape (short, naming no internal
exception), every accepted stream closed by [DONE] or an error event, and the server alive."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.e2e.answers import check_error, check_stream
from tests.e2e.conftest import Server
from tests.e2e.hostile_corpus import (
    ANY,
    Case,
    bad_json,
    extreme_numbers,
    field_abuse,
    grammar_bombs,
    hostile_strings,
    plain_refusals,
    routing_abuse,
    tool_depth,
)
from tests.e2e.hostile_dialects import anthropic_cases, mcp_cases
from tests.e2e.hostile_http import body_limit, headers, methods, paths
from tests.e2e.rawhttp import Reply, send

CORPUS: list[Case] = [
    *bad_json(),
    *hostile_strings(),
    *extreme_numbers(),
    *field_abuse(),
    *grammar_bombs(),
    *plain_refusals(),
    *routing_abuse(),
    *tool_depth(),
    *paths(),
    *methods(),
    *headers(),
    *body_limit(),
    *anthropic_cases(),
    *mcp_cases(),
]
CLIENTS = 4  # requests in flight at once: the corpus is sent as a few busy clients would


@pytest.fixture(scope="module")
def replies(hostile: Server) -> dict[str, Reply]:
    """Every case's answer, the corpus sent by CLIENTS clients at once (each case's test then
    reads its own)."""
    port = int(hostile.base_url.rsplit(":", 1)[1])
    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = pool.map(lambda case: send(port, case.raw), CORPUS)
        return {case.id: reply for case, reply in zip(CORPUS, answers, strict=True)}


def test_the_corpus_is_large_and_its_ids_unique() -> None:
    assert len(CORPUS) >= 300
    assert [id for id, n in Counter(c.id for c in CORPUS).items() if n > 1] == []


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_a_hostile_request_gets_a_clean_answer(replies: dict[str, Reply], case: Case) -> None:
    reply = replies[case.id]
    assert reply.status in case.statuses, f"{reply.status}: {reply.body[:600]!r}"
    if case.by_server:  # refused before zest: the HTTP server's own short text answer
        assert reply.status == 0 or reply.media_type == "text/plain"
        return
    if case.raw.startswith(b"HEAD "):  # GET's status and headers, never a body
        assert reply.body == b""
    elif reply.status >= 400:
        error = check_error(reply.status, reply.headers, reply.body)
        if case.param is not ANY:
            assert error["param"] == case.param, error
        assert case.message in error["message"]
    elif reply.media_type == "text/event-stream":
        check_stream(reply.body)
    elif reply.status == 200:
        assert reply.media_type in {"application/json", "text/plain", "text/html"}, reply.headers
        if reply.media_type == "text/html":  # the web page: nothing from elsewhere may load
            assert reply.headers["content-security-policy"].startswith("default-src 'self'")
        if reply.media_type == "application/json":
            assert isinstance(reply.json(), dict)
