"""Rules in routes.yaml, checked at load: each mistake names the file, the key path and the fix."""

from __future__ import annotations

import pytest

from zest.errors import ConfigError
from zest.router import parse_routes
from zest.router._rules_check import rule_warnings

HEAD = """version: 1
models:
  small: {engine: llamacpp, source: /m/small.gguf}
  emb: {engine: llamacpp, source: /m/emb.gguf, options: {embedding: true}}
  up: {engine: remote, base_url: "http://127.0.0.1:9/v1", model: m}
routes:
  chat-local: {kind: chat, model: small}
  chat-coder: {kind: chat, model: small}
  chat-up: {kind: chat, model: up, privacy: allow_remote}
  autocomplete: {kind: completion, model: small}
  embed: {kind: embedding, model: emb}
"""


def problems(chat: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_routes(HEAD + chat, "routes.yaml")
    return caught.value.problems


def loads(chat: str) -> None:
    parse_routes(HEAD + chat, "routes.yaml")


GOOD = """  chat:
    kind: chat
    model: small
    phrases: {code: ["fix my python error", "stack trace"]}
    rules:
      - id: private
        when: {metadata: {key: consent, equals: denied}}
        to: chat-local
        outputs: {reason: privacy}
      - id: code
        when:
          any:
            - keywords_any: ["def ", "```"]
            - similar_to: {via: embed, label: code, min_score: 0.6}
        to: chat-coder
      - id: long
        when: {min_prompt_tokens: 3000}
        to: chat-local
"""


def test_the_issue_example_loads() -> None:
    loads(GOOD)


def test_an_unknown_target_suggests_the_close_one() -> None:
    chat = GOOD.replace("to: chat-coder", "to: chat-codr")
    assert problems(chat) == [
        "routes.yaml: routes.chat.rules.1.to: unknown route 'chat-codr': did you mean 'chat-coder'?"
    ]


def test_a_target_of_another_kind_is_refused() -> None:
    chat = GOOD.replace("to: chat-coder", "to: autocomplete")
    assert problems(chat) == [
        "routes.yaml: routes.chat.rules.1.to: route 'autocomplete' is a completion route and "
        "'chat' a chat one: a rule sends requests to a route of the same kind"
    ]


def test_similar_to_needs_an_embedding_route_and_phrases_for_its_label() -> None:
    chat = GOOD.replace("via: embed, label: code", "via: chat-local, label: kode")
    assert problems(chat) == [
        "routes.yaml: routes.chat.rules.1.when.any.1.similar_to.via: route 'chat-local' is a "
        "chat route: this condition needs a embedding route",
        "routes.yaml: routes.chat.rules.1.when.any.1.similar_to.label: no phrases for label "
        "'kode' (labels with phrases: code): declare them under phrases: {kode: [...]}",
    ]


def test_an_unknown_condition_kind_is_refused_with_a_hint() -> None:
    chat = GOOD.replace("keywords_any:", "keyword_any:")
    (problem,) = problems(chat)
    assert problem.startswith("routes.yaml: routes.chat.rules.1.when.any.0.keyword_any: unknown")
    assert "did you mean 'keywords_any'?" in problem


def test_condition_kinds_are_listed_as_the_file_spells_them() -> None:
    """`not`, never pydantic's attribute `not_`: in the list, in the hint, and under it."""
    chat = GOOD.replace("when: {min_prompt_tokens: 3000}", "when: {nto: {min_chars: 3}}")
    chat = chat.replace("when: {metadata:", "when: {not: {min_char: 3}, metadata:")
    kinds = (
        "all, any, classify, has_images, has_tools, keywords_all, keywords_any, max_chars, "
        "max_prompt_tokens, metadata, min_chars, min_prompt_tokens, not, queued_over, regex, "
        "similar_to"
    )
    assert problems(chat) == [
        "routes.yaml: routes.chat.rules.0.when.not.min_char: unknown key 'min_char': did you "
        f"mean 'min_chars'? (allowed: {kinds})",
        "routes.yaml: routes.chat.rules.2.when.nto: unknown key 'nto': did you mean 'not'? "
        f"(allowed: {kinds})",
    ]


def test_a_bad_regex_names_the_construct() -> None:
    chat = GOOD.replace('keywords_any: ["def ", "```"]', 'regex: "(a)\\\\1"')
    (problem,) = problems(chat)
    assert "routes.chat.rules.1.when.any.0.regex" in problem
    assert "invalid escape sequence" in problem


def test_empty_phrases_are_refused() -> None:
    chat = GOOD.replace(
        'phrases: {code: ["fix my python error", "stack trace"]}', "phrases: {code: []}"
    )
    assert (
        "routes.yaml: routes.chat.phrases.code: give the label at least one non-empty phrase"
        in problems(chat)
    )


def test_rule_ids_are_unique() -> None:
    chat = GOOD.replace("id: long", "id: code")
    assert problems(chat) == [
        "routes.yaml: routes.chat.rules.2.id: 'code' is used by an earlier rule: ids are unique"
    ]


def test_a_target_with_rules_and_one_that_sends_data_out_are_warned_of() -> None:
    chat = GOOD.replace("to: chat-local\n        outputs", "to: chat-up\n        outputs")
    chat += """  chat2:
    kind: chat
    model: small
    rules: [{id: tools, when: {has_tools: true}, to: chat}]
"""
    config = parse_routes(HEAD + chat, "routes.yaml")
    assert rule_warnings(config) == [
        "routes.chat.rules.0.to: route 'chat-up' allows remote attempts, but 'chat' is "
        "local_only: requests it sends there keep local_only, so those attempts are skipped "
        "for them",
        "routes.chat2.rules.0.to: route 'chat' has rules of its own, which a request routed "
        "here by 'chat2' does not follow (one hop)",
    ]


def test_an_image_rule_whose_target_cannot_read_images_is_warned_of() -> None:
    chat = """  chat:
    kind: chat
    model: small
    privacy: allow_remote
    rules:
      - {id: local, when: {has_images: true}, to: chat-local}
      - {id: remote, when: {has_images: true}, to: chat-up}
      - {id: other, when: {has_images: false}, to: chat-local}
  private:
    kind: chat
    model: small
    rules: [{id: remote, when: {has_images: true}, to: chat-up}]
"""
    warnings = rule_warnings(parse_routes(HEAD + chat, "routes.yaml"))
    # As the server answers: no attempt that can read images, 400; one privacy leaves out, 503.
    assert [w for w in warnings if "(has_images)" in w] == [
        "routes.chat.rules.0.to: route 'chat-local' has no remote model, and zest's own engines "
        "read no images: every request this rule sends there (has_images) is refused (400)",
        "routes.private.rules.0.to: the remote model of route 'chat-up' is left out for the "
        "requests 'private' sends (local_only), and zest's own engines read no images: every "
        "request this rule sends there (has_images) is answered 503 (no attempt left to serve "
        "it)",
    ]


def classifying(labels: str, classifier: str = "") -> str:
    """A chat route classifying by `labels` with a completion route of its own (`classifier`:
    more of its keys)."""
    return f"""  classifier: {{kind: completion, model: small{classifier}}}
  chat:
    kind: chat
    model: small
    rules:
      - id: code
        when:
          classify: {{via: classifier, labels: {labels}, label: code, prompt: "Code? {{input}}"}}
        to: chat-coder
"""


def test_a_label_the_classifier_route_may_cut_is_refused_naming_the_fix() -> None:
    """issue 32: a label longer than the classifier route's max_tokens allows is cut, and the
    condition errs on every request: `zest check` says so, with the number to raise it to."""
    loads(classifying("[code, prose]", ", max_tokens: 7"))  # '"prose"' is 7 bytes
    assert problems(classifying("[code, other]", ", max_tokens: 6")) == [
        "routes.yaml: routes.chat.rules.0.when.classify.labels.1: label 'other' may take the "
        'classifier up to 7 tokens (its answer is the label as JSON, "other", a token a byte '
        "at worst), over the max_tokens of route 'classifier' (6): a label cut short is an error "
        "(on_error decides); raise routes.classifier.max_tokens to 7, or shorten the label"
    ]


def test_a_label_holding_a_stop_of_the_classifier_route_is_refused() -> None:
    chat = classifying('[code, "other code"]', ", sampling: {stop: [' c']}")
    assert problems(chat) == [
        "routes.yaml: routes.chat.rules.0.when.classify.labels.1: label 'other code' holds ' c', "
        "a stop sequence of route 'classifier': its answer would end inside the label; rename "
        "the label, or remove the stop from routes.classifier.sampling.stop"
    ]


def test_a_label_is_at_most_64_characters() -> None:
    loads(classifying(f"[code, {'x' * 64}]", ", max_tokens: 66"))
    [problem] = problems(classifying(f"[code, {'x' * 65}]", ", max_tokens: 67"))
    assert problem.endswith(
        "labels.1 is 65 characters, over zest's limit of 64: a label names a class; shorten "
        "it (the prompt can say what each class means)"
    ), problem
