"""Stream an answer from the `chat` task with the official openai client.

make serve            # in one terminal
.venv/bin/python examples/chat.py "Why is the sky blue?"
"""

import sys

from _gateway import API_KEY, ROOT
from openai import OpenAI, Timeout

client = OpenAI(
    base_url=f"{ROOT}/v1",
    api_key=API_KEY,
    timeout=Timeout(None, connect=10),  # see _gateway.py
)
question = " ".join(sys.argv[1:]) or "Why is the sky blue?"
stream = client.chat.completions.create(
    model="chat",  # a task name from routes.yaml
    messages=[{"role": "user", "content": question}],
    max_tokens=128,
    stream=True,
    stream_options={"include_usage": True},
)
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        print(chunk.choices[0].delta.content, end="", flush=True)
    if chunk.usage:
        usage = chunk.usage
        print(f"\n[{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens]")
