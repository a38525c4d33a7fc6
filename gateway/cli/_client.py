"""What the client commands (chat, run, eval, models list --url) share: where the gateway is
and the key it takes, from their settings (ClientSettings): `--url` (else $ZEST_URL, else where
`zest serve` listens by the same environment: $ZEST_HOST and $ZEST_PORT, default
http://127.0.0.1:8000) means the server's root everywhere, with or without a trailing /v1;
`--api-key` (else $ZEST_API_KEY) is sent as a bearer token."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

__all__ = [
    "DEFAULT_URL",
    "ClientSettings",
    "Gateway",
    "add_gateway_options",
    "gateway_of",
    "server_root",
]

DEFAULT_URL = "http://127.0.0.1:8000"
_EVERY_INTERFACE = {"", "0.0.0.0", "::"}  # a bind address no client can connect to


@dataclass(frozen=True)
class ClientSettings:
    """The client commands' settings, taken as the server's Settings are: the flags given over
    the ZEST_ variables over the defaults (host and port: the server's own, so that
    `ZEST_PORT=9000 make serve` and a client in the same shell meet). A plain class where the
    server's is pydantic-settings: a client starts without pydantic and without an engine
    (tests/unit/cli/test_client_start.py)."""

    url: str | None = None  # --url, $ZEST_URL
    host: str = "127.0.0.1"  # $ZEST_HOST
    port: str = "8000"  # $ZEST_PORT
    api_key: str | None = None  # --api-key, $ZEST_API_KEY

    @classmethod
    def of(cls, environ: Mapping[str, str] = os.environ, **flags: str | None) -> ClientSettings:
        """From the flags given (None or empty: not given), else ZEST_<NAME> set and not
        empty, else the default."""
        given = {}
        for name in ("url", "host", "port", "api_key"):
            value = flags.get(name) or environ.get(f"ZEST_{name.upper()}", "").strip()
            if value:
                given[name] = value
        return cls(**given)

    def server_url(self) -> str:
        """--url or $ZEST_URL, else where `zest serve` listens with these settings (loopback
        for a server bound to every interface)."""
        if self.url:
            return self.url
        host = self.host.strip("[]")
        host = "127.0.0.1" if host in _EVERY_INTERFACE else host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def gateway(self) -> Gateway:
        return Gateway(server_root(self.server_url()), self.api_key)


def server_root(url: str) -> str:
    """The server's root for a URL given with or without /v1 (or /api/v1)."""
    root = url.strip().rstrip("/")
    for suffix in ("/api/v1", "/v1"):
        root = root.removesuffix(suffix)
    return root


@dataclass(frozen=True)
class Gateway:
    url: str  # the server's root
    api_key: str | None

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, timeout: float | None = 120.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=timeout)


def add_gateway_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        help="the gateway's root URL, /v1 or not (default: $ZEST_URL, else "
        f"http://$ZEST_HOST:$ZEST_PORT as zest serve takes them, else {DEFAULT_URL})",
    )
    parser.add_argument("--api-key", help="sent as a bearer token (default: $ZEST_API_KEY)")


def gateway_of(args: argparse.Namespace) -> Gateway:
    return ClientSettings.of(url=args.url, api_key=args.api_key).gateway()
