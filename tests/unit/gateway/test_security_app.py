"""The guard, CORS and the body limit in a small Litestar app wired like create_app's.

create_app needs a loaded model; these handlers stand in for its routes (and for the admin
routes, handlers with opt={"admin": True}), so the HTTP side is checked without one. The real
server is checked end to end in tests/e2e/test_security.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from litestar import Litestar, Request, Router, get, post
from litestar.exceptions import HTTPException
from litestar.testing import TestClient

from zest.errors import RequestError
from zest.gateway.http._app import _http_error, _request_error
from zest.gateway.http._security import EXPOSED_HEADERS, HttpSecurity
from zest.gateway.serving import Settings


@get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@post("/echo", status_code=200)
async def echo(request: Request[Any, Any, Any]) -> dict[str, int]:
    return {"bytes": len(await request.body())}


@post("/admin/reload", status_code=200, opt={"admin": True})
async def reload() -> dict[str, str]:
    return {"status": "reloaded"}


def app_for(settings: Settings) -> Litestar:
    security = HttpSecurity.from_settings(settings)
    handlers = [health, echo, reload]
    return Litestar(
        route_handlers=[Router("/api/v1", route_handlers=handlers)],
        exception_handlers={RequestError: _request_error, HTTPException: _http_error},
        guards=security.guards,
        cors_config=security.cors,
        request_max_body_size=security.max_body_bytes,
        openapi_config=None,
        logging_config=None,
    )


LOCAL = "http://127.0.0.1:8000"  # what a client on the machine calls (Host: 127.0.0.1:8000)


def client_for(settings: Settings, base_url: str = LOCAL) -> TestClient[Litestar]:
    return TestClient(app_for(settings), base_url=base_url)


@pytest.fixture
def secured() -> Iterator[TestClient[Litestar]]:
    settings = Settings(
        api_keys="sk-a,sk-b",  # type: ignore[arg-type]
        admin_key="sk-admin",  # type: ignore[arg-type]
        max_body_bytes=64,
        cors_origins="https://app.example",
    )
    with client_for(settings) as client:
        yield client


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_no_key_is_a_401_that_says_how_to_send_one(secured: TestClient[Litestar]) -> None:
    reply = secured.post("/api/v1/echo", content=b"{}")
    assert reply.status_code == 401
    assert reply.headers["www-authenticate"] == "Bearer"
    assert reply.json() == {
        "error": {
            "message": "missing API key: send 'Authorization: Bearer <key>'; "
            "the keys are set with ZEST_API_KEYS",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }


def test_keys_open_the_api(secured: TestClient[Litestar]) -> None:
    assert secured.post("/api/v1/echo", content=b"{}", headers=bearer("sk-b")).json() == {
        "bytes": 2
    }
    reply = secured.post("/api/v1/echo", content=b"{}", headers={"x-api-key": "sk-a"})
    assert reply.status_code == 200
    assert secured.post("/api/v1/echo", headers=bearer("sk-c")).status_code == 401


def test_health_needs_no_key(secured: TestClient[Litestar]) -> None:
    assert secured.get("/api/v1/health").status_code == 200
    assert secured.get("/api/v1/health/").status_code == 200


def test_admin_routes_need_the_admin_key(secured: TestClient[Litestar]) -> None:
    refused = secured.post("/api/v1/admin/reload", headers=bearer("sk-a"))
    assert refused.status_code == 403
    assert refused.json()["error"] == {
        "message": "this is an admin route and an API key is not enough: "
        "send 'Authorization: Bearer <admin key>', the key set with ZEST_ADMIN_KEY",
        "type": "permission_error",
        "param": None,
        "code": "admin_key_required",
    }
    assert secured.post("/api/v1/admin/reload").status_code == 401
    reply = secured.post("/api/v1/admin/reload", headers=bearer("sk-admin"))
    assert reply.json() == {"status": "reloaded"}


def test_a_body_over_the_limit_is_a_413(secured: TestClient[Litestar]) -> None:
    reply = secured.post("/api/v1/echo", content=b"x" * 65, headers=bearer("sk-a"))
    assert reply.status_code == 413
    assert reply.json()["error"] == {
        "message": "the request body is larger than 64 bytes: send a smaller body, "
        "or raise the limit with ZEST_MAX_BODY_BYTES on the server",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    at_limit = secured.post("/api/v1/echo", content=b"x" * 64, headers=bearer("sk-a"))
    assert at_limit.json() == {"bytes": 64}


def test_a_streamed_body_over_the_limit_is_a_413(secured: TestClient[Litestar]) -> None:
    chunks = iter([b"x" * 40, b"x" * 40])  # no content-length: counted as it arrives
    reply = secured.post("/api/v1/echo", content=chunks, headers=bearer("sk-a"))
    assert reply.status_code == 413


def test_a_preflight_from_a_configured_origin_is_allowed(secured: TestClient[Litestar]) -> None:
    reply = secured.options(
        "/api/v1/echo",
        headers={
            "origin": "https://app.example",
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type",
        },
    )
    assert reply.status_code == 204
    assert reply.headers["access-control-allow-origin"] == "https://app.example"
    answer = secured.post(
        "/api/v1/echo", headers={**bearer("sk-a"), "origin": "https://app.example"}
    )
    assert answer.headers["access-control-allow-origin"] == "https://app.example"
    exposed = answer.headers["access-control-expose-headers"].split(", ")
    assert sorted(exposed) == sorted(EXPOSED_HEADERS)


def test_a_preflight_from_another_origin_is_refused(secured: TestClient[Litestar]) -> None:
    reply = secured.options(
        "/api/v1/echo",
        headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
    )
    assert "access-control-allow-origin" not in reply.headers


def test_without_keys_everything_is_open_on_loopback() -> None:
    with client_for(Settings()) as client:
        assert client.post("/api/v1/echo", content=b"{}").status_code == 200
        assert client.post("/api/v1/admin/reload").json() == {"status": "reloaded"}
        preflight = client.options(
            "/api/v1/echo",
            headers={"origin": "https://app.example", "access-control-request-method": "POST"},
        )
        assert "access-control-allow-origin" not in preflight.headers


def test_without_an_admin_key_a_server_beyond_loopback_closes_admin_routes() -> None:
    with client_for(Settings(host="0.0.0.0")) as client:
        assert client.post("/api/v1/echo", content=b"{}").status_code == 200
        reply = client.post("/api/v1/admin/reload")
        assert reply.status_code == 403
        assert "set ZEST_ADMIN_KEY" in reply.json()["error"]["message"]


def test_a_key_without_the_bearer_scheme_is_a_401(secured: TestClient[Litestar]) -> None:
    for value in ("sk-a", "Basic c2stYQ=="):
        reply = secured.post("/api/v1/echo", headers={"authorization": value})
        assert reply.status_code == 401
        assert reply.json()["error"]["message"] == (
            "the Authorization header must be 'Bearer <key>' (the word Bearer, a space, the "
            "key); other schemes and a bare key are refused: send 'Authorization: Bearer <key>' "
            "or 'x-api-key: <key>'"
        )
    assert secured.post("/api/v1/echo", headers={"authorization": "bearer sk-a"}).is_success


def test_without_keys_the_authorization_header_is_not_read() -> None:
    with client_for(Settings()) as client:
        assert client.post("/api/v1/echo", headers={"authorization": "Basic x"}).is_success


REBOUND = "http://rebind.evil.example:8000"  # a page's own name, pointed at 127.0.0.1
HOST_REFUSED = {
    "message": "the Host 'rebind.evil.example:8000' is not a name of this server: zest "
    "answers only to loopback names (localhost, 127.0.0.1, [::1]), its bind address and "
    "ZEST_ALLOWED_HOSTS, so that no web page can reach it by pointing a name of its own at "
    "this machine (DNS rebinding); to use this name, add it to ZEST_ALLOWED_HOSTS on the "
    "server (comma-separated; * for any)",
    "type": "permission_error",
    "param": None,
    "code": "host_not_allowed",
}


def test_a_rebound_name_gets_nothing_from_a_keyless_loopback_server() -> None:
    with client_for(Settings(), REBOUND) as client:
        for reply in (
            client.post("/api/v1/admin/reload", headers={"origin": REBOUND}),  # same-origin
            client.post("/api/v1/echo", content=b"{}"),
        ):
            assert reply.status_code == 403
            assert reply.json()["error"] == HOST_REFUSED
        assert client.get("/api/v1/health").status_code == 200  # the probes: any Host


def test_zest_allowed_hosts_names_more_hosts() -> None:
    settings = Settings(allowed_hosts="rebind.evil.example")
    with client_for(settings, REBOUND) as client:
        assert client.post("/api/v1/admin/reload").json() == {"status": "reloaded"}
    with client_for(Settings(host="0.0.0.0"), "http://zest.default.svc:8000") as client:
        assert client.post("/api/v1/echo", content=b"{}").status_code == 200


def test_a_page_of_another_origin_may_not_reload() -> None:
    with client_for(Settings()) as client:
        reply = client.post("/api/v1/admin/reload", headers={"origin": "http://127.0.0.1:9999"})
        assert reply.status_code == 403
        assert reply.json()["error"] == {
            "message": "a POST from the web page at 'http://127.0.0.1:9999' is refused: that "
            "origin is not this server's and ZEST_CORS_ORIGINS does not list it; to let that "
            "page call zest, add its origin to ZEST_CORS_ORIGINS on the server",
            "type": "permission_error",
            "param": None,
            "code": "origin_not_allowed",
        }
        # The server's own page (the web UI), and reading from anywhere, stay allowed.
        own = client.post("/api/v1/admin/reload", headers={"origin": LOCAL})
        assert own.json() == {"status": "reloaded"}
        read = client.get("/api/v1/health", headers={"origin": "http://127.0.0.1:9999"})
        assert read.status_code == 200


def test_a_cors_origin_may_change_state_and_is_refused_before_the_key_is_asked(
    secured: TestClient[Litestar],
) -> None:
    listed = {"origin": "https://app.example", **bearer("sk-admin")}
    assert secured.post("/api/v1/admin/reload", headers=listed).is_success
    other = secured.post("/api/v1/echo", headers={"origin": "https://evil.example"})
    assert other.json()["error"]["code"] == "origin_not_allowed"


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
def test_a_form_s_content_type_is_refused_where_no_body_is_read(content_type: str) -> None:
    with client_for(Settings()) as client:
        reply = client.post("/api/v1/admin/reload", headers={"content-type": content_type})
        assert reply.status_code == 415
        media = content_type.partition(";")[0]
        assert reply.json()["error"] == {
            "message": f"POST /api/v1/admin/reload takes no body, and Content-Type '{media}' "
            "is what any web page may send to any site unasked: send the request without a "
            "body (or as 'Content-Type: application/json')",
            "type": "invalid_request_error",
            "param": "content-type",
            "code": "unsupported_media_type",
        }
        json_type = {"content-type": "application/json"}
        assert client.post("/api/v1/admin/reload", headers=json_type).is_success
