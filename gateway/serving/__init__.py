"""What serves a request apart from HTTP: the runtime (routes in force, inventory, engine
pool), a request's walk through its plan, explain, hot reload, timeouts and settings."""

from zest.gateway.serving._anthropic import CountTokensRequest, MessagesRequest
from zest.gateway.serving._clients import ADMIN, ANONYMOUS, Caller, ClientGate, format_reset
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
from zest.gateway.serving._judge import prompt_to_judge
from zest.gateway.serving._mcp_inputs import (
    ChatToolInput,
    EmbeddingToolInput,
    PromptToolInput,
    ToolInput,
    input_schema,
    tool_input_of,
)
from zest.gateway.serving._model_files import ModelFile, model_file, remove_model_file
from zest.gateway.serving._ollama_models import (
    ModelCard,
    apply_keep_alive,
    load_task,
    model_card,
    model_cards,
    running_cards,
    unload_task,
)
from zest.gateway.serving._ollama_options import KeepAlive
from zest.gateway.serving._ollama_requests import (
    OllamaChatRequest,
    OllamaEmbeddingsRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
    OllamaModelRequest,
    OllamaPullRequest,
)
from zest.gateway.serving._preflight import Preflight, preflight
from zest.gateway.serving._pull import Bar, Bars, Pulled, disk_size, pull
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
    "ADMIN",
    "ANONYMOUS",
    "IGNORED_FIELDS",
    "Bar",
    "Bars",
    "Caller",
    "ChatMessage",
    "ChatRequest",
    "ChatToolInput",
    "ClientGate",
    "CompletionRequest",
    "CountTokensRequest",
    "Drain",
    "Embedded",
    "EmbeddingRequest",
    "EmbeddingToolInput",
    "ExplainRequest",
    "Generation",
    "KeepAlive",
    "MessagesRequest",
    "ModelCard",
    "ModelFile",
    "OllamaChatRequest",
    "OllamaEmbedRequest",
    "OllamaEmbeddingsRequest",
    "OllamaGenerateRequest",
    "OllamaModelRequest",
    "OllamaPullRequest",
    "Preflight",
    "PromptToolInput",
    "Pulled",
    "Reloader",
    "RequestEvents",
    "ResponseText",
    "ResponsesRequest",
    "Runtime",
    "SamplingFields",
    "Settings",
    "TaskRequest",
    "ToolAnswer",
    "ToolInput",
    "apply_keep_alive",
    "build_prompt",
    "close_all",
    "decide_request",
    "describe_inventory",
    "disk_size",
    "embed_inputs",
    "explain_request",
    "explain_task",
    "format_explanation",
    "format_reset",
    "input_schema",
    "load_task",
    "model_card",
    "model_cards",
    "model_file",
    "preflight",
    "prompt_to_judge",
    "pull",
    "remove_model_file",
    "request_scope",
    "route_request",
    "running_cards",
    "start_choices",
    "start_generation",
    "tool_input_of",
    "tool_use_for",
    "unload_task",
]
