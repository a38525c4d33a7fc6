"""What the client commands (chat, run, eval, models list --url) share: where the gateway is
and the key it takes. `--url` (else $ZEST_URL, else where `zest serve` listens by the same
environment: $ZEST_HOST and $ZEST_PORT, default http://127.0.0.1:8000) means the server's root
everywhere, with or without a trailing /v1; `--api-key` (else $ZEST_API_KEY) is sent as a
bearer token."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import httpx

__all__ = [
    "DEFAULT_URL",
    "Gateway",
    "add_gateway_options",
    "default_url",
    "gateway_of",
    "server_root",
]

DEFAULT_URL = "http://127.0.0.1:8000"
_EVERY_INTERFACE = {"", "0.0.0.0", "::"}  # a bind address no client can connect to


def default_url() -> str:
    """Where `zest serve` listens with this environment: $ZEST_HOST and $ZEST_PORT (so that
    `ZEST_PORT=9000 make serve` and a client in the same shell meet), loopback for a server
    bound to every interface."""
    host = os.environ.get("ZEST_HOST", "127.0.0.1").strip().strip("[]")
    host = "127.0.0.1" if host in _EVERY_INTERFACE else host
    port = os.environ.get("ZEST_PORT", "").strip() or "8000"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


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
    url = args.url or os.environ.get("ZEST_URL") or default_url()
    return Gateway(server_root(url), args.api_key or os.environ.get("ZEST_API_KEY") or None)
