"""Summarize text with the `summarization` task through the task-named endpoint (raw HTTP).

make serve            # in one terminal
.venv/bin/python examples/summarize.py < examples/evals/README.md
"""

import sys

import httpx
from _gateway import API_KEY, ROOT

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
    f"{base}/tasks/summarization",
    json={"input": text, "max_tokens": 96},
    headers={"authorization": f"Bearer {API_KEY}"},
    timeout=120,
)
reply.raise_for_status()
print(reply.json()["choices"][0]["message"]["content"])
print(f"[served by: {reply.headers['x-zest-route']}]", file=sys.stderr)
