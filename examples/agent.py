"""A tool-calling agent loop with the official openai client: the model asks for tools, the
loop runs them and sends the results back, until the model answers (or the turns run out).

make serve            # in one terminal
.venv/bin/python examples/agent.py "What is 12.5 plus 30?"
"""

import json
import sys
from typing import Any

from _gateway import API_KEY, ROOT
from openai import OpenAI, Timeout

client = OpenAI(
    base_url=f"{ROOT}/v1",
    api_key=API_KEY,
    timeout=Timeout(None, connect=10),  # see _gateway.py
)
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers and return their sum",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    }
]


def run_tool(name: str, arguments: str) -> str:
    """The tools this agent has (the constrained answer guarantees the arguments' shape)."""
    args = json.loads(arguments)
    if name == "add":
        return str(args["a"] + args["b"])
    return f"unknown tool {name}"


messages: Any = [{"role": "user", "content": " ".join(sys.argv[1:]) or "What is 12.5 plus 30?"}]
for turn in range(3):
    reply = client.chat.completions.create(
        model="chat",
        messages=messages,
        tools=TOOLS,
        tool_choice="required" if turn == 0 else "auto",  # call once, then answer or call
        parallel_tool_calls=False,
        temperature=0,
        max_tokens=128,
    )
    message = reply.choices[0].message
    messages.append(message.model_dump(exclude_none=True))
    if not message.tool_calls:
        print(message.content)
        break
    for call in message.tool_calls:
        result = run_tool(call.function.name, call.function.arguments)
        print(f"[tool] {call.function.name}({call.function.arguments}) = {result}")
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
