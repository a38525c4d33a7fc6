"""Structured extraction: the `extract_invoice` task of examples/routes/extraction.yaml answers
in its JSON Schema (routes.yaml carries it: the client sends plain text).

.venv/bin/zest serve --routes examples/routes/extraction.yaml     # in one terminal
.venv/bin/python examples/extract.py "Invoice 12 from ACME: 3 bolts at 2.50, total 7.50 EUR"
"""

import json
import os
import sys

from openai import OpenAI

# ZEST_URL: the server's root, with or without /v1 (as for every zest command).
ROOT = os.environ.get("ZEST_URL", "http://127.0.0.1:8000").rstrip("/").removesuffix("/v1")
client = OpenAI(base_url=f"{ROOT}/v1", api_key=os.environ.get("ZEST_API_KEY", "unused"))
text = " ".join(sys.argv[1:]) or "Invoice 12 from ACME: 3 bolts at 2.50, total 7.50 EUR"
answer = client.chat.completions.create(
    model="extract_invoice",  # the task: its schema comes from routes.yaml
    messages=[{"role": "user", "content": text}],
)
invoice = json.loads(answer.choices[0].message.content or "")
print(json.dumps(invoice, indent=2))
