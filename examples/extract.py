"""Needs `make serve ROUTES=examples/routes/extraction.yaml` (not the default routes.yaml).

Structured extraction: the `extract_invoice` task of examples/routes/extraction.yaml answers in
its JSON Schema (routes.yaml carries it: the client sends plain text).

make serve ROUTES=examples/routes/extraction.yaml     # in one terminal
.venv/bin/python examples/extract.py "Invoice 12 from ACME: 3 bolts at 2.50, total 7.50 EUR"
"""

import json
import sys

from _gateway import API_KEY, ROOT
from openai import OpenAI, Timeout

client = OpenAI(
    base_url=f"{ROOT}/v1",
    api_key=API_KEY,
    timeout=Timeout(None, connect=10),  # see _gateway.py
)
text = " ".join(sys.argv[1:]) or "Invoice 12 from ACME: 3 bolts at 2.50, total 7.50 EUR"
answer = client.chat.completions.create(
    model="extract_invoice",  # the task: its schema comes from routes.yaml
    messages=[{"role": "user", "content": text}],
)
invoice = json.loads(answer.choices[0].message.content or "")
print(json.dumps(invoice, indent=2))
