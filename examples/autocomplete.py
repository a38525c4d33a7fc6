"""Complete code with the `autocomplete` task (a completion route: prompt in, continuation out).

.venv/bin/python examples/autocomplete.py "def fibonacci(n):"
"""

import os
import sys

from openai import OpenAI

# ZEST_URL: the server's root, with or without /v1 (as for every zest command).
ROOT = os.environ.get("ZEST_URL", "http://127.0.0.1:8000").rstrip("/").removesuffix("/v1")
client = OpenAI(base_url=f"{ROOT}/v1", api_key=os.environ.get("ZEST_API_KEY", "unused"))
prompt = " ".join(sys.argv[1:]) or "def fibonacci(n):"
reply = client.completions.create(model="autocomplete", prompt=prompt, max_tokens=48, temperature=0)
print(prompt + reply.choices[0].text)
