"""What an engine kind can honour, and what one request asks of the engine that serves it.

Capabilities are data: each engine kind declares one record (engines/), and the planner leaves
out an attempt whose engine cannot honour the request, with its reason, exactly as it leaves
out an attempt for privacy or a missing device. So a request gets the same answer whichever
attempt it would have reached, and `explain` shows why an attempt was skipped. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["Capabilities", "Needs"]


@dataclass(frozen=True)
class Capabilities:
    """What an engine kind honours. The default honours nothing beyond plain generation."""

    logprobs: bool = False
    logit_bias: bool = False
    structured_output: bool = False  # response_format json_object / json_schema
    tools: bool = False
    fill_in_middle: bool = False  # a completion's `suffix` (the model must have FIM tokens too)
    multiple_choices: bool = False  # n > 1
    split: bool = False  # prefill and decode on two devices (the hybrid pipeline)
    speculation: bool = False  # a route's `speculative` decoding
    embeddings: bool = False
    images: bool = False  # image parts in the messages (a remote upstream's to read)


# How a missing capability is named to the client: the request field that asks for it.
_ASKED_BY = {
    "logprobs": "logprobs",
    "logit_bias": "logit_bias",
    "structured_output": "response_format",
    "tools": "tools",
    "fill_in_middle": "suffix",
    "multiple_choices": "n",
    "images": "images",
}


@dataclass(frozen=True)
class Needs:
    """The capabilities one request asks for (split, speculation and embeddings are asked by
    the route, never by a request, and are planned elsewhere)."""

    logprobs: bool = False
    logit_bias: bool = False
    structured_output: bool = False
    tools: bool = False
    fill_in_middle: bool = False
    multiple_choices: bool = False
    images: bool = False

    def missing(self, capabilities: Capabilities) -> tuple[str, ...]:
        """The request fields asking for what `capabilities` lacks, in declaration order."""
        return tuple(
            _ASKED_BY[f.name]
            for f in fields(self)
            if getattr(self, f.name) and not getattr(capabilities, f.name)
        )
