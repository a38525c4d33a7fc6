"""Who may call which route: bearer API keys, the admin key, and the probes left open.

Rules (docs/security.md):
- no API keys configured: the API is open (the default, for a loopback-bound server);
- API keys configured: every route needs one (or the admin key), except the liveness and
  readiness probes and OPTIONS requests (CORS preflights never carry credentials);
- admin routes (handlers with ``opt={"admin": True}``) need the admin key; an API key is not
  enough. Without an admin key they are open only where the API is: no API keys and a loopback
  bind. Anywhere else a reachable admin route would let anyone reload or unload models.
- a key is sent as `Authorization: Bearer KEY` (the scheme in any case) or `x-api-key: KEY`;
  an Authorization header of another scheme, or a bare key, is a 401 that says so.
- named clients (routes.yaml `clients:`, docs/teams.md) are keys too: a routes table with
  clients needs a key on every route, as ZEST_API_KEYS does. A presented key is compared with
  every client's digest, every API key and the admin key, each in constant time, all of them
  every time; the caller found (a client, `anonymous` for an API key, `admin`) is put in the
  request's state for the request path.
"""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from zest.errors import AuthenticationError, ConfigError, PermissionDeniedError
from zest.gateway.http._callers import CALLER
from zest.gateway.serving import ADMIN, ANONYMOUS, Caller, Settings
from zest.router import ClientConfig, ClientKeys, key_digest

# The named clients of the routes table in force: their key digests and their entries.
Clients = Callable[[], tuple[ClientKeys, Mapping[str, ClientConfig]]]

__all__ = [
    "OWN_OR_ADMIN",
    "PUBLIC_PATHS",
    "AccessPolicy",
    "AuthGuard",
    "Clients",
    "credential_of",
    "exposure_warning",
    "is_loopback",
    "no_clients",
    "parse_keys",
    "read_key_file",
]

# Probes must answer without a key: orchestrators rarely hold one.
PUBLIC_PATHS = frozenset({"/api/v1/health", "/v1/health", "/api/v1/ready", "/v1/ready"})
SEND_KEY = "send 'Authorization: Bearer <key>'; the keys are set with ZEST_API_KEYS"
SEND_CLIENT_KEY = f"{SEND_KEY} and routes.yaml's clients"
# A handler's opt: a named client may call it (about itself); anyone else needs the admin key.
OWN_OR_ADMIN = "own_or_admin"
SEND_ADMIN_KEY = "send 'Authorization: Bearer <admin key>', the key set with ZEST_ADMIN_KEY"


def parse_keys(text: str, *, comments: bool = True) -> tuple[str, ...]:
    """Keys separated by commas or newlines; blank entries are dropped, and so are `#` comment
    lines where `comments` (a key file; in ZEST_API_KEYS a `#` is part of a key)."""
    keys = (
        key.strip()
        for line in text.splitlines()
        if not (comments and line.lstrip().startswith("#"))
        for key in line.split(",")
    )
    return tuple(dict.fromkeys(key for key in keys if key))


def keys_from_variable(value: str) -> tuple[str, ...]:
    """ZEST_API_KEYS: set but holding no key is an error, never auth switched off."""
    keys = parse_keys(value, comments=False)
    if value.strip() and not keys:
        raise ConfigError(
            [
                "ZEST_API_KEYS is set but holds no key (only commas and spaces): write the keys "
                "separated by commas, or unset it to serve without keys"
            ]
        )
    return keys


def read_key_file(path: Path) -> tuple[str, ...]:
    try:
        keys = parse_keys(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(
            [f"ZEST_API_KEYS_FILE: cannot read {path}: {reason}: point it at a file of keys"]
        ) from None
    if not keys:
        # An empty file must not switch auth off silently.
        raise ConfigError(
            [f"ZEST_API_KEYS_FILE: {path} holds no key: write one key a line, or unset it"]
        )
    return keys


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost: it may resolve anywhere


def exposure_warning(
    host: str, port: int, policy: AccessPolicy, *, clients: bool = False
) -> str | None:
    """The warning to log when the server is reachable from elsewhere with no key required
    (`clients`: the routes file names clients, whose keys are required)."""
    if policy.api_keys or clients or is_loopback(host):
        return None
    return (
        f"zest is listening on {host}:{port} without API keys: anyone who can reach this port "
        "can use it; set ZEST_API_KEYS"
    )


def credential_of(headers: Mapping[str, str]) -> str | None:
    """The key a request presents: `Authorization: Bearer KEY`, else `x-api-key: KEY`.
    Raises AuthenticationError for an Authorization header of another scheme, or none (a
    bare key): what it holds is never quoted, it may be a key."""
    authorization = headers.get("authorization")
    if authorization is None:
        return headers.get("x-api-key")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise AuthenticationError(
            "the Authorization header must be 'Bearer <key>' (the word Bearer, a space, the "
            "key); other schemes and a bare key are refused: send 'Authorization: Bearer <key>' "
            "or 'x-api-key: <key>'"
        )
    return token.strip()


def _matches(credential: str | None, keys: Iterable[str]) -> bool:
    if credential is None:
        return False
    given = credential.encode()
    found = False
    for key in keys:  # compare with every key, in constant time, so timing tells nothing
        found |= secrets.compare_digest(given, key.encode())
    return found


def _client_of(credential: str | None, keys: ClientKeys) -> str | None:
    """The named client whose key digest the credential's is: compared with every one, in
    constant time, whichever matches."""
    if credential is None or not keys:
        return None
    given, found = key_digest(credential), None
    for digest, name in keys.digests:
        if secrets.compare_digest(given, digest):
            found = name
    return found


@dataclass(frozen=True)
class AccessPolicy:
    api_keys: tuple[str, ...] = ()
    admin_key: str = ""
    loopback: bool = True  # the server binds a loopback address

    @classmethod
    def from_settings(cls, settings: Settings) -> AccessPolicy:
        keys = keys_from_variable(settings.api_keys.get_secret_value())
        if settings.api_keys_file is not None:
            keys = tuple(dict.fromkeys(keys + read_key_file(settings.api_keys_file)))
        return cls(keys, settings.admin_key.get_secret_value().strip(), is_loopback(settings.host))

    def describe(self) -> str:
        """For the startup log: how many keys, never the keys."""
        api = f"{len(self.api_keys)} API key(s)" if self.api_keys else "off (no ZEST_API_KEYS)"
        admin = "set" if self.admin_key else "not set"
        return f"auth: {api}; admin key: {admin}"

    def authorize(
        self,
        credential: str | None,
        *,
        admin: bool,
        clients: ClientKeys | None = None,
        entries: Mapping[str, ClientConfig] | None = None,
        own_or_admin: bool = False,
    ) -> Caller:
        """The caller the credential names, or AuthenticationError (401) or
        PermissionDeniedError (403) unless allowed; `clients`: the named clients' keys;
        `own_or_admin`: a route a named client may call (about itself), else an admin route."""
        clients = clients or ClientKeys()
        client = _client_of(credential, clients)
        is_admin = self._is_admin(credential)
        admin = admin or (own_or_admin and client is None)
        if self.api_keys or clients:
            send = SEND_CLIENT_KEY if clients else SEND_KEY
            self._check_api_key(credential, client is not None or is_admin, send)
        if admin:
            self._check_admin_key(credential, keyed=bool(clients), client=client is not None)
        if is_admin:
            return ADMIN
        if client is not None:
            return Caller(client, (entries or {}).get(client))
        return ANONYMOUS

    def _is_admin(self, credential: str | None) -> bool:
        return bool(self.admin_key) and _matches(credential, [self.admin_key])

    def _check_api_key(self, credential: str | None, known: bool, send: str) -> None:
        if credential is None:
            raise AuthenticationError(f"missing API key: {send}")
        if not (_matches(credential, self.api_keys) or known):
            raise AuthenticationError(f"invalid API key: {send}")

    def _check_admin_key(self, credential: str | None, *, keyed: bool, client: bool) -> None:
        if not self.admin_key:
            self._check_open_admin(keyed)
            return
        if self._is_admin(credential):
            return
        if client or _matches(credential, self.api_keys):
            raise PermissionDeniedError(
                f"this is an admin route and an API key is not enough: {SEND_ADMIN_KEY}"
            )
        problem = "missing" if credential is None else "invalid"
        raise AuthenticationError(f"{problem} admin key: this is an admin route; {SEND_ADMIN_KEY}")

    def _check_open_admin(self, keyed: bool = False) -> None:
        """Without an admin key, admin routes are open only on a keyless loopback server."""
        if self.api_keys or keyed:
            why = "the server has API keys"
        elif not self.loopback:
            why = "the server listens beyond loopback"
        else:
            return
        raise PermissionDeniedError(
            f"admin routes need an admin key because {why}: set ZEST_ADMIN_KEY on the server "
            "and send it as 'Authorization: Bearer <admin key>'"
        )


def no_clients() -> tuple[ClientKeys, Mapping[str, ClientConfig]]:
    return ClientKeys(), {}


class AuthGuard:
    """The Litestar guard applying an AccessPolicy to every route handler of the app; the
    caller it finds goes in the request's state (http/_callers.py's CALLER)."""

    def __init__(self, policy: AccessPolicy, clients: Clients = no_clients) -> None:
        self.policy = policy
        self.clients = clients

    def __call__(
        self, connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
    ) -> None:
        if connection.scope.get("method") == "OPTIONS":
            return
        if connection.scope["path"].rstrip("/") in PUBLIC_PATHS or handler.opt.get("public"):
            return
        admin = bool(handler.opt.get("admin"))
        own = bool(handler.opt.get(OWN_OR_ADMIN))
        keys, entries = self.clients()
        credential = None  # read only where a key is needed: an open server ignores the header
        if self.policy.api_keys or keys or ((admin or own) and self.policy.admin_key):
            _one_credential(connection)
            credential = credential_of(connection.headers)
        caller = self.policy.authorize(
            credential, admin=admin, clients=keys, entries=entries, own_or_admin=own
        )
        connection.scope.setdefault("state", {})[CALLER] = caller


def _one_credential(connection: ASGIConnection[Any, Any, Any, Any]) -> None:
    """Two Authorization (or x-api-key) headers are ambiguous: a proxy may read one and zest
    the other. Such a request is refused, whatever the keys."""
    for name in ("authorization", "x-api-key"):
        if len(connection.headers.getall(name, [])) > 1:
            raise AuthenticationError(f"the request has more than one {name} header: send one key")
