"""Needs `make serve ROUTES=examples/routes/embeddings.yaml` (its embedding model comes from
`make embedding-model`, which `make test` runs).

A small retrieval example: embed a few documents with the `embed` task, then answer a question
from the closest one with the `chat` task, streamed.

make serve ROUTES=examples/routes/embeddings.yaml     # in one terminal
.venv/bin/python examples/retrieve.py "How do I reset my password?"
"""

import sys

from _gateway import API_KEY, ROOT
from openai import OpenAI, Timeout

client = OpenAI(
    base_url=f"{ROOT}/v1",
    api_key=API_KEY,
    timeout=Timeout(None, connect=10),  # see _gateway.py
)
DOCUMENTS = [
    "To reset your password, open Settings, choose Account and press Reset password.",
    "Invoices are sent on the first day of each month to the billing e-mail address.",
    "The office is closed on public holidays; support answers e-mail within a day.",
]
question = " ".join(sys.argv[1:]) or "How do I reset my password?"

vectors = client.embeddings.create(model="embed", input=[*DOCUMENTS, question]).data
*documents, asked = [v.embedding for v in vectors]
scores = [sum(a * b for a, b in zip(doc, asked, strict=True)) for doc in documents]  # normalised
best = max(range(len(DOCUMENTS)), key=scores.__getitem__)
print(f"[closest: document {best}, similarity {scores[best]:.2f}]")
answer = client.chat.completions.create(
    model="chat",
    messages=[
        {"role": "system", "content": f"Answer from this document: {DOCUMENTS[best]}"},
        {"role": "user", "content": question},
    ],
    temperature=0,
    stream=True,  # the answer prints as the model writes it
)
for chunk in answer:
    for choice in chunk.choices:
        print(choice.delta.content or "", end="", flush=True)
print()
