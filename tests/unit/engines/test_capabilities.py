"""Capabilities are data: each engine kind declares what it honours, and no engine refuses a
request for a capability it lacks (the planner has already left such an attempt out)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from zest.engines import engine_kind
from zest.router import Capabilities

ENGINES = Path(__file__).resolve().parents[3] / "engines"
# A refusal of a capability inside an engine: a 400 whose param is a field the planner checks
# (`n` past a model's slots is a bound of its configuration, not a capability of its kind).
REFUSAL = re.compile(
    r'BadRequestError\([^)]*param="(logprobs|logit_bias|response_format|tools|suffix)"', re.S
)


def test_no_engine_refuses_a_capability_it_lacks() -> None:
    """`response_format` refusals of a schema an engine's grammar cannot take are about the
    schema, not the capability: they name a part of it, and are allowed."""
    found = []
    for path in sorted(ENGINES.glob("*.py")):
        for match in REFUSAL.finditer(path.read_text(encoding="utf-8")):
            if match.group(1) != "response_format":
                found.append(f"{path.name}: refuses {match.group(1)}")
    assert found == []


@pytest.mark.parametrize(
    ("kind", "lacks"),
    [
        ("llamacpp", {"images"}),  # text-only: image parts are for a remote upstream
        ("onnx-genai", {"logprobs", "logit_bias", "split", "speculation", "embeddings", "images"}),
        ("remote", {"logprobs", "logit_bias", "split", "speculation"}),
    ],
)
def test_each_kind_declares_what_it_honours(kind: str, lacks: set[str]) -> None:
    capabilities = engine_kind(kind).capabilities
    assert isinstance(capabilities, Capabilities)
    declared = {name for name, value in vars(capabilities).items() if not value}
    assert declared == lacks
