"""`zest route test`'s replay: a case decided by deterministic rules loads no model, and a
model-backed condition gets the replay's budget (its own timeout_s when the case expects the
on_error path), without a model: the classifier is a stand-in here."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from zest.engines import detect_inventory
from zest.gateway.cli import _route_test
from zest.gateway.cli._route_test import Case, Outcome, _replay, _ReplayRuntime
from zest.gateway.serving import _routing
from zest.router import ModelResult, load_routes

ROUTES = """\
version: 1
models:
  junk: {engine: llamacpp, source: junk.gguf}
routes:
  chat:
    kind: chat
    model: junk
    rules:
      - {id: private, when: {metadata: {key: consent, equals: denied}}, to: chat-local}
      - id: math
        when:
          classify: {via: classifier, labels: [math, other], label: math, prompt: "Subject?",
                     timeout_s: 0.001}
        to: chat-local
  chat-local: {kind: chat, model: junk}
  classifier: {kind: chat, model: junk}
"""


def case(name: str, request: dict[str, Any], rule: str, **expect: Any) -> Case:
    route = "chat" if rule == "default" else "chat-local"
    return Case.model_validate(
        {"name": name, "task": "chat", "request": request,
         "expect": {"rule": rule, "route": route, **expect}}
    )  # fmt: skip


def replay(tmp_path: Path, *cases: Case) -> list[Outcome]:
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES)
    runtime = _ReplayRuntime(load_routes(path), detect_inventory(""))
    runtime.oracle.replaying = True
    return asyncio.run(_replay(runtime, list(cases), _route_test.CONDITION_BUDGET_S))


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **extra}


def test_a_case_decided_by_deterministic_rules_loads_no_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: list[str] = []

    async def acquire(self: object, routes: object, model: str, *args: object) -> None:
        loads.append(model)
        raise AssertionError("nothing loads")

    monkeypatch.setattr(_ReplayRuntime, "acquire", acquire)
    [outcome] = replay(tmp_path, case("private", chat("hi", metadata={"consent": "denied"}),
                                      "private"))  # fmt: skip
    assert (outcome.result, loads) == ("pass", [])


def test_a_model_backed_condition_gets_the_replays_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The classifier answers after 50 ms, past the condition's 1 ms: the replay waits for it
    (its budget: CONDITION_BUDGET_S), a case expecting on_error does not (as served)."""
    waited: list[float] = []

    async def slow_classifier(query: object, condition: object) -> ModelResult:
        await asyncio.sleep(0.05)
        return ModelResult(label="math")

    real_wait_for = asyncio.wait_for

    async def wait_for(work: Any, timeout: float) -> Any:
        waited.append(timeout)
        return await real_wait_for(work, timeout)

    monkeypatch.setattr(_routing, "_classify", slow_classifier)
    monkeypatch.setattr(_routing.asyncio, "wait_for", wait_for)
    judged, as_served = replay(
        tmp_path,
        case("judged", chat("What is 6 times 7?"), "math"),
        case("as served", chat("What is 6 times 8?"), "default", on_error=True),
    )
    assert waited == [300.0, 0.001]
    assert (judged.result, judged.failures) == ("pass", [])
    assert as_served.result == "pass"
    assert as_served.failures == [
        ("routes.chat.rules.1.when.classify (via classifier)", "timed out after 0.001 s")
    ]
