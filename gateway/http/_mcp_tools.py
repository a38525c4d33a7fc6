"""The routes table's tasks as MCP tools, and a tool call as the request every endpoint builds:
tools/list reads the table in force (a reload changes it), tools/call starts the task's
generation (or embedding) and answers its text; a failure is an isError result with the
message zest would answer. One more tool, list_tasks, lists the tasks with their kind, model
and device."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from typing import Any

from pydantic import ValidationError

from zest.errors import RequestError, UnknownTaskError, shown
from zest.gateway.http._body_errors import validation_error
from zest.gateway.http._callers import caller_in
from zest.gateway.http._metrics import Metrics, RequestRecord
from zest.gateway.http._responses import zest_extension
from zest.gateway.serving import (
    Caller,
    ChatToolInput,
    EmbeddingToolInput,
    PromptToolInput,
    Runtime,
    embed_inputs,
    input_schema,
    start_generation,
    tool_input_of,
)
from zest.router import REMOTE_DEVICE, RouteConfig, RoutesFile

__all__ = ["LIST_TASKS", "McpTools"]

log = logging.getLogger("zest.gateway")
LIST_TASKS = "list_tasks"  # the listing tool (zest_list_tasks if a task has that name)


class McpTools:
    """tools/list and tools/call over the runtime's routes table."""

    def __init__(self, runtime: Runtime, metrics: Metrics) -> None:
        self.runtime, self.metrics = runtime, metrics

    def listing_name(self, config: RoutesFile) -> str:
        return f"zest_{LIST_TASKS}" if LIST_TASKS in config.routes else LIST_TASKS

    def fingerprint(self) -> str:
        """What the tools are, to tell whether a reload changed them."""
        return json.dumps([tool.model_dump(mode="json") for tool in self._tools()])

    async def list_tools(self, ctx: Any, params: Any) -> Any:
        """The tools the caller may call: a named client sees only its tasks."""
        from mcp.types import ListToolsResult

        return ListToolsResult(tools=self._tools(_caller_of(ctx)))

    def _tools(self, caller: Caller | None = None) -> list[Any]:
        from mcp.types import Tool, ToolAnnotations

        config = self.runtime.routes.config
        tools = [
            Tool(
                name=task,
                description=route.description or f"The {task} task ({route.kind}).",
                input_schema=input_schema(route),
                annotations=ToolAnnotations(
                    read_only_hint=True, destructive_hint=False, open_world_hint=_remote(route)
                ),
            )
            for task, route in _callable(config, caller).items()
        ]
        listing = Tool(
            name=self.listing_name(config),
            description="The tasks of this zest gateway: each one's kind, model and device.",
            input_schema={"type": "object", "properties": {}, "additionalProperties": False},
            annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True),
        )
        return [*tools, listing]

    async def call_tool(self, ctx: Any, params: Any) -> Any:
        """A tool's answer; any failure is an isError result saying what zest would."""
        config = self.runtime.routes.config  # the table of this call, to its end
        name, arguments = params.name, params.arguments or {}
        caller = _caller_of(ctx)
        if name == self.listing_name(config):
            return _result(_listing(config, caller))
        record = self.metrics.begin(name, "mcp")
        record.client = caller.name
        try:
            return await self._call(name, arguments, config, record, caller)
        except RequestError as exc:
            record.failed(exc)  # a record ends once: a failure it saw already stays
            log.info("MCP tool %s failed: %s", shown(name), exc)
            return _failed(exc)
        except asyncio.CancelledError:
            record.closed()  # the client went away
            raise

    async def _call(
        self,
        name: str,
        arguments: dict[str, Any],
        config: RoutesFile,
        record: RequestRecord,
        caller: Caller,
    ) -> Any:
        route = config.routes.get(name)
        if route is None:
            known = ", ".join([*_callable(config, caller), self.listing_name(config)])
            raise UnknownTaskError(f"unknown tool {shown(name)}: use one of {known} (tools/list)")
        given = _read(tool_input_of(route), arguments)
        if isinstance(given, EmbeddingToolInput):
            done = await embed_inputs(
                self.runtime, name, [given.input], events=record, caller=caller
            )
            record.finish("ok")
            vector = list(done.result.vectors[0])
            return _result({"embedding": vector, "dimensions": len(vector)})
        return await self._generate(name, given, record, caller)

    async def _generate(
        self,
        name: str,
        given: ChatToolInput | PromptToolInput,
        record: RequestRecord,
        caller: Caller,
    ) -> Any:
        chat = isinstance(given, ChatToolInput)
        gen = await start_generation(
            self.runtime,
            name,
            kind="chat" if chat else "completion",
            body=given.sampling(),
            request_id="req_" + secrets.token_hex(8),
            messages=given.chat() if isinstance(given, ChatToolInput) else None,
            prompt=given.prompt if isinstance(given, PromptToolInput) else None,
            events=record,
            caller=caller,
        )
        text, finish, produced = "", "stop", 0
        try:
            async for delta in gen.deltas():
                text += delta.text
                if delta.finish_reason is not None:
                    finish, produced = delta.finish_reason, delta.completion_tokens
        finally:
            await gen.aclose()
        answer = {
            "text": text,
            "finish_reason": finish,
            "usage": {"prompt_tokens": gen.prompt_tokens, "completion_tokens": produced},
            "zest": zest_extension(gen),
        }
        return _result(answer, text=text)


def _read(model: type[Any], arguments: dict[str, Any]) -> Any:
    """The call's arguments as the task's kind takes them: a 400's message when not."""
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        raise validation_error(exc, model) from None


def _remote(route: RouteConfig) -> bool:
    """Whether the task's text may leave the machine (a hint to the client)."""
    return route.privacy == "allow_remote"


def _caller_of(ctx: Any) -> Caller:
    """The caller the app's guard found for the HTTP request that carried this message."""
    return caller_in(getattr(getattr(ctx, "request", None), "scope", {}) or {})


def _callable(config: RoutesFile, caller: Caller | None) -> dict[str, RouteConfig]:
    """The routes a caller may call (None: all, for the fingerprint of the tools)."""
    client = caller.client if caller is not None else None
    if client is None:
        return dict(config.routes)
    return {task: route for task, route in config.routes.items() if client.may_call(task)}


def _listing(config: RoutesFile, caller: Caller) -> dict[str, Any]:
    tasks = [
        {
            "name": task,
            "kind": route.kind,
            "model": route.model,
            # A remote model runs on no local device: say where it goes instead.
            "device": route.device if config.models[route.model].local else REMOTE_DEVICE.name,
            "description": route.description,
        }
        for task, route in _callable(config, caller).items()
    ]
    return {"tasks": tasks}


def _result(structured: dict[str, Any], *, text: str | None = None) -> Any:
    from mcp.types import CallToolResult, TextContent

    shown_text = json.dumps(structured, ensure_ascii=False) if text is None else text
    return CallToolResult(
        content=[TextContent(type="text", text=shown_text)], structured_content=structured
    )


def _failed(error: RequestError) -> Any:
    """zest's error as a tool result: its message for the model, its body for the client."""
    from mcp.types import CallToolResult, TextContent

    body = error.to_body()
    return CallToolResult(
        content=[TextContent(type="text", text=error.message)],
        structured_content={**body, "status": error.status_code},
        is_error=True,
    )
