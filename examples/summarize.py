"""Summarize text with the `summarization` task through the task-named endpoint (raw HTTP),
streamed: the summary prints as the model writes it, and a refusal prints the server's own
error (its status and message) and exits 1.

make serve            # in one terminal
.venv/bin/python examples/summarize.py < examples/evals/README.md
"""

import json
import sys

import httpx
from _gateway import API_KEY, ROOT

text = (
    sys.stdin.read()
    if not sys.stdin.isatty()
    else (
        "The committee met on Tuesday to review the budget. After two hours it approved the new "
        "library wing, postponed the road repairs to spring, and asked for a bus report."
    )
)
# No cap on the answer's time: it streams, and the route's timeouts (routes.yaml) bound it
# on the server. Only connecting is bounded.
timeout = httpx.Timeout(None, connect=10)
with httpx.stream(
    "POST",
    f"{ROOT}/v1/tasks/summarization",
    json={"input": text, "max_tokens": 96, "stream": True},
    headers={"authorization": f"Bearer {API_KEY}"},
    timeout=timeout,
) as reply:
    if reply.status_code != 200:
        reply.read()
        try:
            message = reply.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):  # not zest's error body (a proxy's page)
            message = reply.text
        sys.exit(f"zest answered {reply.status_code}: {message}")
    served_by = reply.headers["x-zest-route"]
    for line in reply.iter_lines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line.removeprefix("data: "))
        if "error" in event:  # the stream failed after it began: it ends with the error
            sys.exit(f"\nthe summary stopped: {event['error']['message']}")
        for choice in event["choices"]:
            print(choice["delta"].get("content") or "", end="", flush=True)
print()
print(f"[served by: {served_by}]", file=sys.stderr)
