"""The MCP server at /mcp (Streamable HTTP, tools only), built on the official `mcp` SDK: its
low-level Server answers tools/list and tools/call, its StreamableHTTPSessionManager speaks
the transport, and a Litestar ASGI handler mounts it into the app, so the app's guards (Host,
Origin, keys) and drain apply to it as to every endpoint.

Each routes.yaml task is a tool (gateway/http/_mcp_tools.py): a call becomes the request
/v1/chat/completions builds, and its failure an isError result with zest's message. The SDK
weighs 2 s of imports: it is imported, off the event loop, by the first request to /mcp, and
its session manager then runs until the app stops. A reload that changes the tools tells the
clients (notifications/tools/list_changed: on a session's stream for clients of the
handshake era, through subscriptions/listen for those of the 2026 one).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import secrets
import weakref
from typing import TYPE_CHECKING, Any

from litestar import asgi
from litestar.handlers import ASGIRouteHandler
from litestar.types import Receive, Scope, Send

from zest.errors import ServiceUnavailableError
from zest.gateway.http._dialect import DIALECT, Dialect
from zest.gateway.http._mcp_screen import screened
from zest.gateway.http._mcp_tools import McpTools
from zest.gateway.http._metrics import Metrics
from zest.gateway.serving import Runtime
from zest.router import LoadedRoutes

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

__all__ = ["MCP", "McpMount", "mcp_error"]

log = logging.getLogger("zest.gateway")
MAX_SESSIONS = 256  # sessions open at once; one more is a 503 until one ends
SESSION_IDLE_S = 30 * 60  # a session nobody used this long is closed (the SDK's default)
# JSON-RPC error codes of an HTTP refusal: the server's own range, then invalid request.
_RPC_CODES = {401: -32001, 403: -32003, 404: -32004, 429: -32029, 503: -32003}


def mcp_error(status: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """An error answered at /mcp before the SDK reads the request (a key, a Host, an Origin,
    a drain): a JSON-RPC error without an id, as the SDK answers its own refusals, with
    zest's message and code."""
    error = body.get("error", {})
    code = _RPC_CODES.get(status, -32600 if status < 500 else -32603)
    data = {key: error[key] for key in ("type", "code") if error.get(key) is not None}
    return status, {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": code, "message": error.get("message", "error"), "data": data},
    }


MCP = Dialect("mcp", mcp_error)


class McpMount:
    """The /mcp endpoint: the SDK's server and session manager, started on first use."""

    def __init__(self, runtime: Runtime, metrics: Metrics, max_body_bytes: int) -> None:
        self.tools = McpTools(runtime, metrics)
        self.max_body_bytes = max_body_bytes
        self._manager: Any = None
        self._bus: Any = None
        self._started: asyncio.Future[None] | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()
        self._listed = self.tools.fingerprint()

    def handler(self) -> ASGIRouteHandler:
        """The Litestar handler mounting the transport at /mcp (GET, POST and DELETE)."""

        @asgi("/mcp", is_mount=True, copy_scope=True, opt={DIALECT: MCP})
        async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
            checked = await screened(scope, receive, self.max_body_bytes)  # type: ignore[arg-type]
            await self._ready()
            await self._manager.handle_request(scope, checked, _with_request_id(send))

        return mcp_endpoint

    async def _ready(self) -> None:
        """Start the SDK's session manager once, for the app's lifetime (the first caller
        starts it; the others wait)."""
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            self._task = asyncio.ensure_future(self._serve(self._started))
        try:
            await asyncio.shield(self._started)
        except Exception as exc:
            raise ServiceUnavailableError(
                f"the MCP server could not start: {exc}: see the server log"
            ) from exc

    async def _serve(self, started: asyncio.Future[None]) -> None:
        try:
            self._manager = await asyncio.to_thread(self._build)
            async with self._manager.run():
                started.set_result(None)
                await self._stop.wait()
        except Exception as exc:
            log.exception("the MCP server failed")
            if not started.done():
                started.set_exception(exc)

    def _build(self) -> Any:
        """The SDK's server and session manager (in a thread: the imports take seconds)."""
        subscriptions = importlib.import_module("mcp.server.subscriptions")
        manager = importlib.import_module("mcp.server.streamable_http_manager")
        self._bus = subscriptions.InMemorySubscriptionBus()
        server = self._server(subscriptions.ListenHandler(self._bus))
        return manager.StreamableHTTPSessionManager(
            app=server,
            max_request_body_size=self.max_body_bytes,
            max_sessions=MAX_SESSIONS,
            session_idle_timeout=SESSION_IDLE_S,
            security_settings=None,  # the app's guards check Host and Origin, as everywhere
        )

    def _server(self, listen: Any) -> Server[Any]:
        from mcp.server.lowlevel import NotificationOptions, Server
        from mcp.types import NotificationParams

        class ZestServer(Server[Any]):
            """Says that its tools change (a reload), to clients of the handshake era."""

            def create_initialization_options(
                self, notification_options: Any = None, *args: Any, **kwargs: Any
            ) -> Any:
                options = notification_options or NotificationOptions()
                options.tools_changed = True
                return super().create_initialization_options(options, *args, **kwargs)

        server = ZestServer(
            "zest",
            version="1",
            instructions="Each tool is a task of the zest gateway (routes.yaml): call it with "
            "messages (chat tasks) or a prompt (completion tasks); list_tasks lists them.",
            on_list_tools=self.tools.list_tools,
            on_call_tool=self.tools.call_tool,
            on_subscriptions_listen=listen,
        )
        server.add_notification_handler(
            "notifications/initialized", NotificationParams, self._joined
        )
        return server

    async def _joined(self, ctx: Any, params: Any) -> None:
        """A session of the handshake era is initialized: it is told when the tools change.
        Its connection is held weakly: an ended session drops out on its own."""
        connection = getattr(ctx.session, "_connection", None)  # the SDK keeps it private
        if connection is not None:
            self._connections.add(connection)

    async def routes_changed(self, routes: LoadedRoutes) -> None:
        """After a reload: tell the clients if the tools changed (their names, descriptions,
        kinds, or where they run)."""
        listed = self.tools.fingerprint()
        if listed == self._listed:
            return
        self._listed = listed
        if self._manager is None:
            return  # nobody has connected yet
        from mcp.server.subscriptions import ToolsListChanged

        await self._bus.publish(ToolsListChanged())
        for connection in list(self._connections):
            await connection.send_tool_list_changed()
        log.info("MCP: the tools changed with the routes: %s", ", ".join(routes.config.routes))

    async def close(self) -> None:
        """Stop the session manager (its sessions end) when the app stops."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task


def _with_request_id(send: Send) -> Any:
    """The SDK's answers carry a request id too (the access line and the client's logs
    name it), as every answer of zest does."""
    request_id = ("req_" + secrets.token_hex(8)).encode()

    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", ()), (b"x-request-id", request_id)]
            message = {**message, "headers": headers}
        await send(message)

    return sending
