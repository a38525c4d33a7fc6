"""Who calls: the named clients of the routes table in force, found by the digest of the key a
request presents (docs/teams.md). The guard (http/_auth.py) puts the caller in the request's
state; every front door hands it to the request path (`caller_of`), the access line names it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping
from typing import Any

from zest.gateway.serving import ANONYMOUS, Caller, Runtime
from zest.router import ClientConfig, ClientKeys, LoadedRoutes, resolve_client_keys

__all__ = ["CALLER", "CLIENT_DIRECTORY", "ClientDirectory", "caller_in", "caller_name", "caller_of"]

log = logging.getLogger("zest.gateway")
CALLER = "zest_caller"  # the request state's key (scope["state"])
CLIENT_DIRECTORY = "zest_clients"  # the app state's key of the ClientDirectory


class ClientDirectory:
    """The clients' key digests of the routes table in force, read once per table (its
    key_env variables from this process's environment: a start and a reload have checked
    they are set)."""

    def __init__(self, runtime: Runtime, environ: Mapping[str, str] | None = None) -> None:
        self.runtime = runtime
        self.environ = os.environ if environ is None else environ
        self._serial: int | None = None
        self._keys = ClientKeys()

    def current(self) -> tuple[ClientKeys, Mapping[str, ClientConfig]]:
        routes = self.runtime.routes
        if routes.serial != self._serial:
            self._keys = self._resolve(routes)
            self._serial = routes.serial
        return self._keys, routes.config.clients

    def _resolve(self, routes: LoadedRoutes) -> ClientKeys:
        keys, problems = resolve_client_keys(routes.config.clients, self.environ)
        for problem in problems:  # checked at start and reload: only a changed environment
            log.error("%s: %s (the client cannot call until this is fixed)", routes.path, problem)
        return keys


def caller_of(request: Any) -> Caller:
    """The caller the guard found for a request (a request no key was asked of: anonymous)."""
    return caller_in(request.scope)


def caller_in(scope: Mapping[str, Any]) -> Caller:
    """The caller the guard put in an ASGI scope's state (an app mounted below the guard, as
    MCP's transport, reads it there)."""
    state = scope.get("state")
    caller = state.get(CALLER) if isinstance(state, dict) else None
    return caller if isinstance(caller, Caller) else ANONYMOUS


def caller_name(scope: MutableMapping[str, Any]) -> str:
    """The caller's name for the access line: `-` when the guard did not look (a probe)."""
    state = scope.get("state")
    caller = state.get(CALLER) if isinstance(state, dict) else None
    return caller.name if isinstance(caller, Caller) else "-"
