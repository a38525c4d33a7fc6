"""Complete code with the `autocomplete` task (a completion route: prompt in, continuation out).

make serve            # in one terminal
.venv/bin/python examples/autocomplete.py "def fibonacci(n):"
"""

import sys

from _gateway import API_KEY, ROOT
from openai import OpenAI, Timeout

client = OpenAI(
    base_url=f"{ROOT}/v1",
    api_key=API_KEY,
    timeout=Timeout(None, connect=10),  # see _gateway.py
)
prompt = " ".join(sys.argv[1:]) or "def fibonacci(n):"
reply = client.completions.create(model="autocomplete", prompt=prompt, max_tokens=48, temperature=0)
print(prompt + reply.choices[0].text)
