"""Auth on and off against the real `zest serve`: keys, probes, body limit, CORS, bind warning.

Admin routes (handlers with opt={"admin": True}) are checked in
tests/unit/gateway/test_security_app.py with a small app wired like create_app's.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import REPO, ZEST, Server, start_server, stop_server

ENV_KEYS = ("sk-zest-env-1", "sk-zest-env-2")
FILE_KEY = "sk-zest-file-1"
ADMIN_KEY = "sk-zest-admin"
ORIGIN = "https://app.example"
HI = {"model": "chat", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4}
SEND_KEY = "send 'Authorization: Bearer <key>'; the keys are set with ZEST_API_KEYS"
NO_KEYS = {"ZEST_API_KEYS": "", "ZEST_ADMIN_KEY": "", "ZEST_CORS_ORIGINS": ""}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("secured")
    key_file = folder / "keys"
    key_file.write_text(f"# keys of the test\n{FILE_KEY}\n", encoding="utf-8")
    env = {
        "ZEST_API_KEYS": ",".join(ENV_KEYS),
        "ZEST_API_KEYS_FILE": str(key_file),
        "ZEST_ADMIN_KEY": ADMIN_KEY,
        "ZEST_MAX_BODY_BYTES": "4096",
        "ZEST_CORS_ORIGINS": ORIGIN,
        "ZEST_LOG_LEVEL": "debug",  # the most talkative log must still hold no key
    }
    running = start_server(REPO / "routes.yaml", folder / "zest.log", env)
    yield running
    stop_server(running)


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """No keys, bound to every interface: the configuration zest warns about."""
    log = tmp_path_factory.mktemp("exposed") / "zest.log"
    running = start_server(REPO / "routes.yaml", log, {**NO_KEYS, "ZEST_HOST": "0.0.0.0"})
    yield running
    stop_server(running)


def chat(server: Server, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{server.v1}/chat/completions", json=HI, headers=headers, timeout=600)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}
    return dict(body["error"])


def test_no_key_is_a_401_in_openai_shape(secured: Server) -> None:
    reply = chat(secured)
    assert reply.status_code == 401
    assert reply.headers["www-authenticate"] == "Bearer"
    assert error_of(reply) == {
        "message": f"missing API key: {SEND_KEY}",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }


@pytest.mark.parametrize(
    "path",
    ["/v1/models", "/api/v1/models", "/v1/system-info", "/metrics", "/api/v1/metrics", "/v1/stats"],
)
def test_every_api_route_needs_a_key(secured: Server, path: str) -> None:
    assert httpx.get(f"{secured.base_url}{path}", timeout=10).status_code == 401


def test_a_wrong_key_is_a_401(secured: Server) -> None:
    reply = chat(secured, bearer("sk-zest-wrong"))
    assert reply.status_code == 401
    assert error_of(reply)["message"] == f"invalid API key: {SEND_KEY}"


@pytest.mark.parametrize("key", [*ENV_KEYS, FILE_KEY, ADMIN_KEY])
def test_each_key_opens_the_api(secured: Server, key: str) -> None:
    reply = chat(secured, bearer(key))
    assert reply.status_code == 200
    assert reply.json()["object"] == "chat.completion"


def test_an_x_api_key_header_works_too(secured: Server) -> None:
    assert chat(secured, {"x-api-key": FILE_KEY}).status_code == 200


def test_the_openai_client_sends_its_key(secured: Server) -> None:
    with openai.OpenAI(base_url=secured.v1, api_key=ENV_KEYS[0], max_retries=0) as client:
        reply = client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "Say hello."}], max_tokens=4
        )
    assert reply.choices[0].message.content is not None
    with (
        openai.OpenAI(base_url=secured.v1, api_key="sk-zest-wrong", max_retries=0) as wrong,
        pytest.raises(openai.AuthenticationError) as info,
    ):
        wrong.models.list()
    assert info.value.status_code == 401
    assert info.value.code == "invalid_api_key"


@pytest.mark.parametrize("prefix", ["/v1", "/api/v1"])
def test_health_needs_no_key(secured: Server, prefix: str) -> None:
    reply = httpx.get(f"{secured.base_url}{prefix}/health", timeout=10)
    assert reply.status_code == 200
    assert reply.json()["status"] == "ok"


def test_a_body_over_the_limit_is_a_413(secured: Server) -> None:
    long_text = "word " * 1000  # 5,000 bytes of content against a 4,096-byte limit
    body = {**HI, "messages": [{"role": "user", "content": long_text}]}
    reply = httpx.post(
        f"{secured.v1}/chat/completions", json=body, headers=bearer(ENV_KEYS[0]), timeout=600
    )
    assert reply.status_code == 413
    assert error_of(reply) == {
        "message": "the request body is larger than 4096 bytes: send a smaller body, "
        "or raise the limit with ZEST_MAX_BODY_BYTES on the server",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


def test_a_configured_origin_passes_the_preflight(secured: Server) -> None:
    preflight = httpx.options(
        f"{secured.v1}/chat/completions",
        headers={
            "origin": ORIGIN,
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type",
        },
        timeout=10,
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    reply = chat(secured, {**bearer(ENV_KEYS[0]), "origin": ORIGIN})
    assert reply.headers["access-control-allow-origin"] == ORIGIN
    exposed = reply.headers["access-control-expose-headers"].split(", ")
    assert {"x-request-id", "x-zest-route"} <= set(exposed)


def test_the_log_counts_the_keys_and_never_shows_one(secured: Server) -> None:
    secured.wait_for_log("auth: 3 API key(s); admin key: set")
    chat(secured, bearer(ENV_KEYS[1]))
    log = secured.log()
    for key in (*ENV_KEYS, FILE_KEY, ADMIN_KEY):
        assert key not in log


def test_the_openai_javascript_sdks_preflight_passes(secured: Server) -> None:
    sent = (
        "authorization, content-type, x-stainless-arch, x-stainless-lang, x-stainless-os, "
        "x-stainless-package-version, x-stainless-retry-count, x-stainless-runtime, "
        "x-stainless-runtime-version, x-stainless-timeout"
    )
    preflight = httpx.options(
        f"{secured.v1}/chat/completions",
        headers={
            "origin": ORIGIN,
            "access-control-request-method": "POST",
            "access-control-request-headers": sent,
        },
        timeout=10,
    )
    assert preflight.status_code == 204, preflight.text
    assert preflight.headers["access-control-allow-origin"] == ORIGIN


def test_a_key_sent_in_the_query_string_never_reaches_the_log(secured: Server) -> None:
    wrong = httpx.get(f"{secured.v1}/models?api_key=sk-leaked-in-url&limit=2", timeout=30)
    assert wrong.status_code == 401
    line = secured.wait_for_log("/v1/models?api_key=[redacted]&limit=2")
    assert "401" in line
    assert "sk-leaked-in-url" not in secured.log()


def test_without_keys_the_api_is_open(exposed: Server) -> None:
    reply = chat(exposed)
    assert reply.status_code == 200
    assert reply.json()["object"] == "chat.completion"


def test_binding_beyond_loopback_without_keys_warns(exposed: Server) -> None:
    line = exposed.wait_for_log("without API keys")
    assert "WARNING" in line
    assert line.endswith(
        "zest is listening on 0.0.0.0:"
        f"{exposed.base_url.rsplit(':', 1)[1]} without API keys: anyone who can reach this "
        "port can use it; set ZEST_API_KEYS"
    )


def test_without_cors_origins_a_preflight_gets_no_allow_origin(exposed: Server) -> None:
    preflight = httpx.options(
        f"{exposed.v1}/chat/completions",
        headers={"origin": ORIGIN, "access-control-request-method": "POST"},
        timeout=10,
    )
    assert "access-control-allow-origin" not in preflight.headers


def test_an_unreadable_key_file_stops_the_start(tmp_path: Path) -> None:
    missing = tmp_path / "keys"
    done = subprocess.run(
        [str(ZEST), "serve", "--port", "1"],
        env={**os.environ, "ZEST_API_KEYS_FILE": str(missing)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"ZEST_API_KEYS_FILE: cannot read {missing}: No such file or directory: "
        "point it at a file of keys"
    )


def admin_reload(server: Server, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{server.v1}/admin/reload", headers=headers, timeout=600)


def test_an_admin_route_needs_the_admin_key(secured: Server) -> None:
    assert admin_reload(secured).status_code == 401
    refused = admin_reload(secured, bearer(ENV_KEYS[0]))
    assert refused.status_code == 403
    assert error_of(refused)["type"] == "permission_error"
    assert "ZEST_ADMIN_KEY" in error_of(refused)["message"]
    accepted = admin_reload(secured, bearer(ADMIN_KEY))
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["reloaded"] is True


@pytest.mark.parametrize("action", ["load", "unload"])
def test_loading_and_unloading_are_admin_routes(secured: Server, action: str) -> None:
    url = f"{secured.v1}/{action}"
    refused = httpx.post(url, json={"model": "smollm2"}, headers=bearer(ENV_KEYS[0]), timeout=600)
    assert refused.status_code == 403


def test_readiness_needs_no_key_but_the_listings_do(secured: Server) -> None:
    assert httpx.get(f"{secured.v1}/ready", timeout=10).status_code == 200
    assert httpx.get(f"{secured.v1}/loaded", timeout=10).status_code == 401
    assert httpx.get(f"{secured.v1}/routes", timeout=10).status_code == 401


def test_without_an_admin_key_a_server_beyond_loopback_refuses_admin_routes(
    exposed: Server,
) -> None:
    refused = admin_reload(exposed)
    assert refused.status_code == 403
    assert "set ZEST_ADMIN_KEY" in error_of(refused)["message"]
