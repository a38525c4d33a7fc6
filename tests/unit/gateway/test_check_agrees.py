"""What `zest check` says of a rule is what the server does with the requests it sends: the
warning's status for an image rule is the status the plan of the target answers."""

from __future__ import annotations

import re

import pytest

from tests.unit.router.test_rules_config import HEAD
from zest.errors import RequestError
from zest.gateway.serving._planning import plan_for
from zest.router import Device, Needs, parse_routes, rule_warnings, tightened

ROUTES = parse_routes(
    HEAD
    + """  chat:
    kind: chat
    model: small
    privacy: allow_remote
    rules:
      - {id: local, when: {has_images: true}, to: chat-local}
      - {id: remote, when: {has_images: true}, to: chat-up}
  private:
    kind: chat
    model: small
    rules: [{id: remote, when: {has_images: true}, to: chat-up}]
""",
    "routes.yaml",
)
CPU = {"cpu": Device("cpu", frozenset({"llamacpp", "onnx-genai"}), "test")}


def answered(task: str, number: int) -> int:
    """The status of an image request that `task`'s rule `number` sends to its target."""
    caller = ROUTES.routes[task]
    to = caller.rules[number].to
    target = tightened(ROUTES.routes[to], caller, task)
    try:
        plan_for(ROUTES, CPU, to, target, prompt_tokens=8, load=None, strict_privacy=False,
                 needs=Needs(images=True))  # fmt: skip
    except RequestError as exc:
        return exc.status_code
    return 200


@pytest.mark.parametrize(("task", "number"), [("chat", 0), ("chat", 1), ("private", 0)])
def test_an_image_rules_warning_names_the_status_the_server_answers(task: str, number: int) -> None:
    at = f"routes.{task}.rules.{number}.to: "
    said = [w for w in rule_warnings(ROUTES) if w.startswith(at) and "(has_images)" in w]
    status = answered(task, number)
    if status == 200:
        assert said == []
    else:
        [warning] = said
        assert re.findall(r"\b(400|503)\b", warning) == [str(status)]
