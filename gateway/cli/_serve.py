"""`zest serve`: check the routes file, bind, serve with uvicorn, and shut down gracefully.

The first SIGTERM or SIGINT drains (Runtime.shut_down: new requests 503 with Retry-After,
readiness 503, what runs may finish within ZEST_SHUTDOWN_GRACE_S, the rest ends with an error
event) and the process then exits 0; a second ends what still runs at once; a third exits
without waiting for anything.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn

from zest.errors import CommandError
from zest.gateway.cli._init import ROUTES_HELP, routes_file
from zest.gateway.cli._settings import checked_or_raise, settings_from

if TYPE_CHECKING:
    from zest.gateway.serving import Runtime

__all__ = ["add_serve_command"]

log = logging.getLogger("zest")


def add_serve_command(commands: Any) -> None:
    serve = commands.add_parser("serve", help="serve the routes file over HTTP")
    serve.add_argument("file", nargs="?", type=Path, help=ROUTES_HELP)
    serve.add_argument(
        "--routes", type=Path, help="the routes file (the same as the positional file)"
    )
    serve.add_argument("--host", help="address to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to bind (default: 8000)")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    serve.add_argument(
        "--replica-name",
        help="this replica's name in the x-zest-replica header (default: host name:port)",
    )
    serve.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from zest.engines import detect_inventory
    from zest.gateway.http import (
        AccessLog,
        AccessPolicy,
        HostRule,
        create_app,
        exposure_warning,
    )
    from zest.gateway.serving import Drain, Runtime

    settings = settings_from(
        routes=_routes_given(args),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        replica_name=args.replica_name,
    )
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)-7s %(name)s: %(message)s"
    )
    policy = AccessPolicy.from_settings(settings)  # a bad ZEST_API_KEYS_FILE fails here, early
    log.info(policy.describe())
    log.info(HostRule.from_settings(settings).describe())  # a bad ZEST_ALLOWED_HOSTS fails here
    # Every problem of the file and its model files at once, as zest check lists them.
    routes, checked = checked_or_raise(routes_file(settings.routes), settings)
    clients = routes.config.clients
    if warning := exposure_warning(settings.host, settings.port, policy, clients=bool(clients)):
        log.warning(warning)
    if clients:
        log.info("named clients: %s (routes.yaml clients)", ", ".join(clients))
    for warning in checked.warnings:  # refused: never starts
        log.warning("%s", warning)
    runtime = Runtime(  # create_app applies the rest of the settings (privacy, cache)
        routes,
        detect_inventory(settings.emulate_devices),
        drain=Drain(grace_s=settings.shutdown_grace_s),
    )
    _log_start(runtime)
    fatal: list[str] = []
    config = uvicorn.Config(
        AccessLog(create_app(runtime, settings)),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        log_config=None,
        # zest's own access line (AccessLog): also for requests whose client left first.
        access_log=False,
        # After the drain only finished answers remain to flush.
        timeout_graceful_shutdown=5,
    )
    server = GracefulServer(config, runtime)

    def stop(message: str) -> None:  # the warm start cannot serve a route: stop, exit 1
        fatal.append(message)
        server.should_exit = True

    runtime.on_fatal = stop
    listening = _bind(settings.host, settings.port)  # before saying "serving on"
    log.info(
        "serving on http://%s:%d/v1 (OpenAI-compatible) and /api/v1; models load in the "
        "background (GET /api/v1/ready)",
        settings.host,
        settings.port,
    )
    server.run(sockets=[listening])
    if fatal:
        print(f"zest: {fatal[0]}", file=sys.stderr)
        return 1
    return 0


def _routes_given(args: argparse.Namespace) -> Path | None:
    """The routes file, given as `zest check` takes it (FILE) or by --routes."""
    if args.file is not None and args.routes is not None and args.file != args.routes:
        raise CommandError(
            f"two routes files given ({args.file} and --routes {args.routes}): give one"
        )
    routes: Path | None = args.file or args.routes
    return routes


def _log_start(runtime: Runtime) -> None:
    log.info("routes %s: %s", runtime.routes.path, ", ".join(runtime.routes.config.routes))
    for device in runtime.devices.values():
        log.info(
            "device %s: %s; detected by %s; engines: %s",
            device.label,
            device.detail,
            device.detected_by,
            ", ".join(sorted(device.engines)) or "none",
        )


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so a busy port is a clear error, not uvicorn's exit 3."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP by name: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets
    # whose proto says TCP, and accepted sockets take the listener's. With proto 0, a streamed
    # token written while the headers were unacknowledged waited for the client's delayed ACK:
    # the first tokens came ~40 ms late, several at once (issue 25).
    listening = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((host, port))
    except OSError as exc:
        listening.close()
        reason = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise CommandError(
            f"cannot listen on {host}:{port}: {reason}: stop what uses the port, or pick "
            "another with --port (or ZEST_PORT)"
        ) from None
    listening.listen(2048)
    listening.set_inheritable(True)
    return listening


# The uvicorn versions GracefulServer was written for: it overrides Server.startup and
# Server.handle_exit, which are not public API (uvicorn has no public hook that runs at the
# first signal, before it stops accepting: its lifespan shutdown comes after). pyproject.toml
# requires exactly this range; tests/unit/cli/test_uvicorn_range.py checks that it does, that
# the installed uvicorn is in it and that both methods still have the shapes overridden here.
# Widen it only after checking them (and tests/e2e's shutdown tests) on the new version.
UVICORN_RANGE = ">=0.30,<0.56"


class GracefulServer(uvicorn.Server):
    """uvicorn's server with zest's shutdown. uvicorn would stop accepting at the first
    signal, cut streams after its timeout without an error event and re-raise the signal
    (exit status -15); here the signal starts the drain, and the exit is 0 (UVICORN_RANGE:
    the versions whose internals this relies on)."""

    def __init__(self, config: uvicorn.Config, runtime: Runtime) -> None:
        super().__init__(config)
        self.runtime = runtime
        self._signals = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """A signal handler: it only schedules work on the event loop (thread-safe)."""
        self._signals += 1
        if self._loop is None or self._signals >= 3:
            self.force_exit = self._signals >= 3
            self.should_exit = True
            return
        step = self._drain if self._signals == 1 else self.runtime.drain.interrupt_all
        self._loop.call_soon_threadsafe(step)

    def _drain(self) -> None:
        self._draining = asyncio.ensure_future(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        try:
            await self.runtime.shut_down()
        finally:
            self.should_exit = True
