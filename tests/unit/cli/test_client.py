"""Where the client commands look for the gateway: --url, else $ZEST_URL, else where `zest
serve` listens with the same environment ($ZEST_HOST, $ZEST_PORT); their settings
(ClientSettings) take flags over variables over defaults, as the server's Settings do."""

from __future__ import annotations

import argparse

import pytest

from zest.gateway.cli._client import ClientSettings, add_gateway_options, gateway_of
from zest.gateway.serving import Settings


def url_of(*args: str) -> str:
    parser = argparse.ArgumentParser()
    add_gateway_options(parser)
    return gateway_of(parser.parse_args(args)).url


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ZEST_URL", "ZEST_HOST", "ZEST_PORT", "ZEST_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_without_settings_the_default_port() -> None:
    assert url_of() == "http://127.0.0.1:8000"


@pytest.mark.parametrize(
    ("host", "port", "url"),
    [
        (None, "9000", "http://127.0.0.1:9000"),
        ("0.0.0.0", "9000", "http://127.0.0.1:9000"),  # every interface: reached on loopback
        ("::", None, "http://127.0.0.1:8000"),
        ("::1", "9001", "http://[::1]:9001"),
        ("10.0.0.5", None, "http://10.0.0.5:8000"),
    ],
)
def test_the_client_follows_the_server_s_host_and_port(
    monkeypatch: pytest.MonkeyPatch, host: str | None, port: str | None, url: str
) -> None:
    for name, value in (("ZEST_HOST", host), ("ZEST_PORT", port)):
        if value is not None:
            monkeypatch.setenv(name, value)
    assert url_of() == url


def test_zest_url_and_then_url_win_over_the_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEST_PORT", "9000")
    monkeypatch.setenv("ZEST_URL", "http://gateway.internal:8080/v1")
    assert url_of() == "http://gateway.internal:8080"
    assert url_of("--url", "http://127.0.0.1:7000/") == "http://127.0.0.1:7000"


@pytest.mark.parametrize(
    ("flag", "variable", "key"),
    [
        ("from-flag", "from-variable", "from-flag"),
        (None, "from-variable", "from-variable"),
        ("", "from-variable", "from-variable"),  # an empty flag is not given
        (None, "", None),  # nor is an empty variable
        (None, None, None),
    ],
)
def test_the_api_key_flag_wins_over_its_variable(
    monkeypatch: pytest.MonkeyPatch, flag: str | None, variable: str | None, key: str | None
) -> None:
    if variable is not None:
        monkeypatch.setenv("ZEST_API_KEY", variable)
    parser = argparse.ArgumentParser()
    add_gateway_options(parser)
    argv = [] if flag is None else ["--api-key", flag]
    assert gateway_of(parser.parse_args(argv)).api_key == key


def test_the_client_defaults_are_the_server_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's light settings mirror the server's host and port: they cannot drift."""
    for name in ("ZEST_HOST", "ZEST_PORT"):
        monkeypatch.delenv(name, raising=False)
    server = Settings()
    assert ClientSettings.of().server_url() == f"http://{server.host}:{server.port}"
