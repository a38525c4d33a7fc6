"""GET /metrics (Prometheus text) and GET /v1/stats (the last request, Lemonade's fields), and
the per-request record: the observer a generation endpoint hands to the request path, which the
error handlers end when an error answers the request."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get

from zest.gateway.http._body import REQUESTED_TASK
from zest.gateway.http._callers import caller_of
from zest.gateway.http._dialect import dialect_of
from zest.gateway.http._metrics import CONTENT_TYPE, Metrics, RequestRecord

__all__ = [
    "METRICS",
    "last_stats",
    "prometheus_metrics",
    "provide_record",
    "record_failure",
    "stats_history",
]

# Where a generation request keeps its record: the error handlers find it there.
_RECORD = "zest_record"
# Where the app keeps its Metrics (app.state): a record is begun where no dependency ran.
METRICS = "zest_metrics"


@get("/metrics", media_type=CONTENT_TYPE)
async def prometheus_metrics(metrics: Metrics) -> Response[bytes]:
    return Response(metrics.scrape(), media_type=CONTENT_TYPE)


@get("/stats")
async def last_stats(metrics: Metrics) -> dict[str, Any]:
    """The last finished request: TTFT, decode rate, tokens (all null before the first)."""
    return metrics.stats()


@get("/stats/history")
async def stats_history(metrics: Metrics) -> dict[str, Any]:
    """The last ten minutes in ten-second buckets: requests finished, TTFT p50, decode
    tokens/s, deepest queue (what the web page charts)."""
    metrics.sample_queue()
    return metrics.timeline.buckets()


async def provide_record(request: Request[Any, Any, Any], metrics: Metrics) -> RequestRecord:
    """A generation request's record, started as the request arrives (a dependency)."""
    return _begin(request, metrics)


def _begin(request: Request[Any, Any, Any], metrics: Metrics) -> RequestRecord:
    task, dialect = request.path_params.get("task"), dialect_of(request.scope).name
    record = metrics.begin(task, dialect, request.headers)
    record.client = caller_of(request).name
    request.state[_RECORD] = record
    return record


def _keeps_a_record(request: Request[Any, Any, Any]) -> bool:
    handler = request.scope.get("route_handler")
    return handler is not None and "record" in handler.parsed_fn_signature.parameters


def record_failure(request: Request[Any, Any, Any], error: BaseException) -> None:
    """An error answered instead of a generation: it ends the request's record (begun here
    when its body failed to read, which Litestar does before the dependencies)."""
    record = request.state.get(_RECORD)
    metrics = request.app.state.get(METRICS)
    if record is None and isinstance(metrics, Metrics) and _keeps_a_record(request):
        record = _begin(request, metrics)
    if isinstance(record, RequestRecord):
        named = request.state.get(REQUESTED_TASK)
        if isinstance(named, str):  # a 400 counts against the task its body named
            record.task_named(named)
        record.failed(error)
