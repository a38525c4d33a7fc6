"""Complete code with the `autocomplete` task (a completion route: prompt in, continuation out).

.venv/bin/python examples/autocomplete.py "def fibonacci(n):"
"""

import os
import sys

from openai import OpenAI

client = OpenAI(base_url=os.environ.get("ZEST_URL", "http://127.0.0.1:8000/v1"), api_key="unused")
prompt = " ".join(sys.argv[1:]) or "def fibonacci(n):"
reply = client.completions.create(model="autocomplete", prompt=prompt, max_tokens=48, temperature=0)
print(prompt + reply.choices[0].text)
