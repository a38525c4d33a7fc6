"""What serves a request apart from HTTP: the runtime (routes in force, inventory, engine
pool), a request's walk through its plan, explain, hot reload, timeouts and settings."""

from zest.gateway.serving._decision import (
    ExplainRequest,
    decide_request,
    explain_request,
)
from zest.gateway.serving._drain import Drain
from zest.gateway.serving._embedding import Embedded, embed_inputs
from zest.gateway.serving._events import RequestEvents
from zest.gateway.serving._explain import (
    describe_inventory,
    explain_task,
    format_explanation,
)
from zest.gateway.serving._generation import (
    Generation,
    build_prompt,
    close_all,
    route_request,
    start_choices,
    start_generation,
)
from zest.gateway.serving._held import request_scope
from zest.gateway.serving._preflight import Preflight, preflight
from zest.gateway.serving._reload import (
    Reloader,
)
from zest.gateway.serving._requests import (
    IGNORED_FIELDS,
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    SamplingFields,
    TaskRequest,
)
from zest.gateway.serving._responses_api import ResponsesRequest
from zest.gateway.serving._runtime import (
    Runtime,
)
from zest.gateway.serving._settings import (
    Settings,
)
from zest.gateway.serving._tool_text import ResponseText
from zest.gateway.serving._tools import (
    ToolAnswer,
    tool_use_for,
)

__all__ = [
    "IGNORED_FIELDS",
    "ChatMessage",
    "ChatRequest",
    "CompletionRequest",
    "Drain",
    "Embedded",
    "EmbeddingRequest",
    "ExplainRequest",
    "Generation",
    "Preflight",
    "Reloader",
    "RequestEvents",
    "ResponseText",
    "ResponsesRequest",
    "Runtime",
    "SamplingFields",
    "Settings",
    "TaskRequest",
    "ToolAnswer",
    "build_prompt",
    "close_all",
    "decide_request",
    "describe_inventory",
    "embed_inputs",
    "explain_request",
    "explain_task",
    "format_explanation",
    "preflight",
    "request_scope",
    "route_request",
    "start_choices",
    "start_generation",
    "tool_use_for",
]
