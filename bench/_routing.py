"""`zest bench --phases routing`: what choosing a route by a request's content costs.

- The deterministic decision: `decide`, the one decision the server, explain and `zest route
  test` run, over 1, 10 and 100 rules of every kind but the model-backed ones, for a realistic
  chat request that none matches (so every rule is evaluated: the slowest decision a table of
  that size makes). Each decision builds the request's RouteInput afresh, as each request does.
- The model-backed ones, in process: a runtime over the bench model (a classify via a chat
  route, its answer constrained to the labels) and the cached MiniLM embedding model (a
  similar_to), each decision made by the server's own route_request. Cold: a text not seen
  before, so the model runs (a first, untimed decision loads the models and embeds the
  phrases); cached: the same text again.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from zest.bench._workload import percentile, question

__all__ = ["TARGET_P50_MS", "deterministic_rules", "routing"]

RULE_COUNTS = (1, 10, 100)
TARGET_P50_MS = 0.2  # at 100 rules (issue 24)
EMBEDDING_MODEL = "cache:all-minilm-l6-v2-f16.gguf"
# A user message of ~650 characters, and the metadata a client of a multi-tenant app sends.
MESSAGE = (
    "Our harbour town's bakery wants a weekly newsletter. Last week the ovens were repaired, "
    "two apprentices joined, and the rye loaf sold out every morning. "
) * 4 + "Could you draft a friendly opening paragraph for this week's issue?"
METADATA = {"tenant": "acme", "region": "eu-west", "plan": "team"}
PHRASES = (
    "my python code raises an exception",
    "how do I fix this stack trace",
    "write a function that sorts a list",
)


def _rule_when(n: int) -> dict[str, Any]:
    """The n-th rule's condition: six shapes in turn, none of which the bench request meets
    (in the last two, the first condition holds and the second does not)."""
    shapes: list[dict[str, Any]] = [
        {"metadata": {"key": "tenant", "any": [f"tenant-{n}", f"trial-{n}"]}},
        {"keywords_any": [f"stack trace {n}", f"error code {n}", f"```lang{n}"]},
        {"regex": rf"\bTICKET-{n}\d+\b"},
        {"any": [{"keywords_all": [f"invoice {n}", "refund"]}, {"max_chars": 10 + n}]},
        {"min_chars": 1 + n, "has_tools": True},
        {"metadata": {"key": "region", "exists": True}, "not": {"has_images": False}},
    ]
    return shapes[n % len(shapes)]


def deterministic_rules(count: int) -> tuple[Any, ...]:
    """A table of `count` rules, a tuple as a loaded routes file holds it (so `decide` compiles
    it once, as the server's)."""
    from zest.router import Rule

    return tuple(
        Rule.model_validate({"id": f"rule-{n}", "when": _rule_when(n), "to": "other"})
        for n in range(count)
    )


def _decision_times(count: int, rounds: int) -> dict[str, Any]:
    from zest.router import Decision, RouteInput, decide

    rules = deterministic_rules(count)
    times = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        decision = decide("chat", rules, RouteInput(MESSAGE, METADATA))
        times.append((time.perf_counter_ns() - start) / 1e6)
        if not isinstance(decision, Decision) or not decision.default_used:
            raise RuntimeError(f"routing bench: a rule matched the request: {decision}")
    return {"rules": count, "p50_ms": percentile(times, 50), "p99_ms": percentile(times, 99)}


def routing(model: Path, threads: int, folder: Path, rounds: int) -> dict[str, Any]:
    """The deterministic decision's p50/p99 at each rule count, then similar_to and classify
    decisions cold and cached (similar_to skipped, saying why, without the embedding model)."""
    found: dict[str, Any] = {
        "deterministic": [_decision_times(n, 2000) for n in RULE_COUNTS],
        "message_chars": len(MESSAGE),
    }
    embedding = _embedding_model()
    if isinstance(embedding, str):
        found["similar_to_skipped"] = embedding
    routes = _routes_file(model, threads, folder, embedding)
    found.update(asyncio.run(_model_backed(routes, rounds, similar=embedding is not None)))
    return found


def _embedding_model() -> Path | str:
    """The MiniLM GGUF in zest's cache, or why similar_to cannot be measured."""
    from zest.engines import resolve_source

    try:
        return resolve_source(EMBEDDING_MODEL, Path())
    except Exception as exc:  # any reason: the phase goes on without similar_to
        return f"no embedding model ({exc}); make embedding-model converts it"


def _routes_file(model: Path, threads: int, folder: Path, embedding: Path | str) -> Path:
    """`classified` routes by a classify via the chat route `classifier`; `similar` by a
    similar_to via the embedding route `embed` (where the model is)."""
    models = f"  bench: {{engine: llamacpp, source: {model}, options: {{n_threads: {threads}}}}}\n"
    routes = (
        "  classifier: {kind: chat, model: bench, max_tokens: 16}\n"
        "  classified:\n    kind: chat\n    model: bench\n    rules:\n"
        "      - id: code\n        to: classifier\n        when:\n          classify:\n"
        "            via: classifier\n            labels: [code, other]\n"
        '            prompt: "Is the message about programming? Answer code or other."\n'
        "            label: code\n            timeout_s: 120\n"
    )
    if isinstance(embedding, Path):
        options = f"{{n_threads: {threads}, embedding: true}}"
        models += f"  minilm: {{engine: llamacpp, source: {embedding}, options: {options}}}\n"
        routes += (
            "  embed: {kind: embedding, model: minilm}\n"
            "  similar:\n    kind: chat\n    model: bench\n"
            f"    phrases: {{code: {list(PHRASES)}}}\n"
            "    rules:\n      - id: code\n        to: classifier\n        when:\n"
            "          similar_to: {via: embed, label: code, min_score: 0.99, timeout_s: 120}\n"
        )
    path = folder / "routing-routes.yaml"
    path.write_text(f"version: 1\nmodels:\n{models}routes:\n{routes}")
    return path


async def _model_backed(routes: Path, rounds: int, *, similar: bool) -> dict[str, Any]:
    from zest.engines import detect_inventory
    from zest.gateway.serving import Runtime
    from zest.router import load_routes

    runtime = Runtime(load_routes(routes), detect_inventory())
    found: dict[str, Any] = {}
    try:
        if similar:
            found["similar_to"] = await _cold_and_cached(runtime, "similar", rounds * 10)
        found["classify"] = await _cold_and_cached(runtime, "classified", rounds * 3)
    finally:
        await runtime.close()
    return found


async def _cold_and_cached(runtime: Any, task: str, rounds: int) -> dict[str, Any]:
    """Decisions of `task` over new texts (its model runs), then over one text again."""
    await _decide(runtime, task, question())  # loads the models, embeds the phrases
    cold = [await _timed(runtime, task, question()) for _ in range(rounds)]
    again = question()
    await _decide(runtime, task, again)
    cached = [await _timed(runtime, task, again) for _ in range(rounds)]
    return {
        "rounds": rounds,
        "cold_p50_ms": percentile(cold, 50),
        "cold_p95_ms": percentile(cold, 95),
        "cached_p50_ms": percentile(cached, 50),
        "cached_p95_ms": percentile(cached, 95),
    }


async def _timed(runtime: Any, task: str, text: str) -> float:
    start = time.perf_counter()
    await _decide(runtime, task, text)
    return (time.perf_counter() - start) * 1000


async def _decide(runtime: Any, task: str, text: str) -> Any:
    """The server's own decision for a chat request of `task`; a condition that failed (a
    time-out, a model error) would measure its failure, not the model: the phase stops."""
    from zest.gateway.serving import ChatMessage, ChatRequest, route_request

    messages = [ChatMessage(role="user", content=text)]
    body = ChatRequest(model=task, messages=messages)
    routed = await route_request(runtime, task, "chat", body, {"messages": messages})
    trace = routed.decision.trace if routed.decision is not None else ()
    errors = [entry.error for entry in trace if entry.error]
    if errors:
        raise RuntimeError(f"routing bench: {task}'s condition failed: {errors[0]}")
    return routed
