"""Where the examples find the gateway, as every zest command does: $ZEST_URL (the server's
root, with or without /v1), else where `zest serve` listens with the same environment
($ZEST_HOST and $ZEST_PORT: `ZEST_PORT=9000 make serve` and the examples meet), and the key
in $ZEST_API_KEY.

The examples put no cap of their own on an answer's time, only on connecting (the openai
client's default is 10 minutes a try, then it sends the request again): the route's timeouts
(routes.yaml) bound an answer on the server, and a loaded machine may take minutes over one."""

import os

_HOST = os.environ.get("ZEST_HOST", "127.0.0.1").strip().strip("[]")
_HOST = "127.0.0.1" if _HOST in ("", "0.0.0.0", "::") else _HOST  # a bind to every interface
_PORT = os.environ.get("ZEST_PORT", "").strip() or "8000"
_SERVED_AT = f"http://{f'[{_HOST}]' if ':' in _HOST else _HOST}:{_PORT}"

ROOT = (os.environ.get("ZEST_URL") or _SERVED_AT).rstrip("/").removesuffix("/v1")
API_KEY = os.environ.get("ZEST_API_KEY") or "unused"
