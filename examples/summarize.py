"""Summarize text with the `summarization` task through the task-named endpoint (raw HTTP).

.venv/bin/python examples/summarize.py < some_text.txt
"""

import os
import sys

import httpx

# ZEST_URL: the server's root, with or without /v1 (as for every zest command).
ROOT = os.environ.get("ZEST_URL", "http://127.0.0.1:8000").rstrip("/").removesuffix("/v1")
base = f"{ROOT}/v1"
text = (
    sys.stdin.read()
    if not sys.stdin.isatty()
    else (
        "The committee met on Tuesday to review the budget. After two hours it approved the new "
        "library wing, postponed the road repairs to spring, and asked for a bus report."
    )
)
reply = httpx.post(
    f"{base}/tasks/summarization", json={"input": text, "max_tokens": 96}, timeout=120
)
reply.raise_for_status()
print(reply.json()["choices"][0]["message"]["content"])
print(f"[served by: {reply.headers['x-zest-route']}]", file=sys.stderr)
