"""Reading a running server's /metrics with prometheus_client's own parser."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def scrape(url: str, key: str | None = None) -> list[Sample]:
    """`key`: a server with keys needs one for /metrics too."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    reply = httpx.get(url, timeout=30, headers=headers)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == CONTENT_TYPE
    return [s for family in text_string_to_metric_families(reply.text) for s in family.samples]


def total(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels`."""
    return sum(
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )
