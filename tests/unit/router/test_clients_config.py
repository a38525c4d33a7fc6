"""routes.yaml's clients: what the schema refuses (never a key in the file), what is checked
against the rest of the file, the keys read from the environment at serve time, and a route as
a client gets it (privacy only tightens)."""

from __future__ import annotations

import hashlib

import pytest

from zest.errors import ConfigError
from zest.router import parse_routes, resolve_client_keys, route_for_client

DIGEST = hashlib.sha256(b"sk-team-a").hexdigest()
HEAD = """\
version: 1
models:
  small: {engine: llamacpp, source: small.gguf}
  upstream: {engine: remote, base_url: "http://127.0.0.1:9/v1", model: big}
routes:
  chat: {kind: chat, model: small}
  open: {kind: chat, model: upstream, privacy: allow_remote, fallback: [{model: small}]}
clients:
"""


def problems(clients: str) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        parse_routes(HEAD + clients, "routes.yaml")
    return [problem.removeprefix("routes.yaml: ") for problem in refused.value.problems]


def test_a_valid_table_loads_with_its_defaults() -> None:
    config = parse_routes(
        HEAD + f"  a: {{key_sha256: '{DIGEST.upper()}', tasks: [chat]}}\n"
        "  b: {key_env: TEAM_B_KEY, tasks: '*', privacy: local_only, priority: 5,\n"
        "      limits: {requests_per_minute: 60, tokens_per_day: 100000}}\n",
        "routes.yaml",
    )
    a, b = config.clients["a"], config.clients["b"]
    assert a.key_sha256 == DIGEST  # lower-cased
    assert (a.may_call("chat"), a.may_call("open")) == (True, False)
    assert (b.may_call("open"), b.privacy, b.priority) == (True, "local_only", 5)
    assert (b.limits.requests_per_minute, b.limits.tokens_per_minute) == (60, None)
    assert (a.limits.any, b.limits.any) == (False, True)


def test_a_key_in_the_file_is_refused_with_how_to_give_it() -> None:
    assert problems("  a: {key: sk-team-a, tasks: [chat]}\n") == [
        "clients.a.key: 'key' is refused: a client's key must not be written in routes.yaml: "
        'give its SHA-256 as key_sha256 (printf %s "$KEY" | sha256sum) or the name of an '
        "environment variable holding it as key_env",
    ]
    assert problems("  a: {tasks: [chat]}\n") == [
        "clients.a: give the client's key once: key_sha256 (its SHA-256) or key_env (the name "
        "of the environment variable holding it), never the key itself",
    ]
    assert problems("  a: {key_sha256: sk-team-a, tasks: [chat]}\n") == [
        "clients.a.key_sha256: key_sha256 must be the key's SHA-256, 64 hex digits in quotes, "
        'not the key (9 characters): write what `printf %s "$KEY" | sha256sum` prints, or '
        "name an environment variable holding the key with key_env"
    ]
    assert problems("  a: {key_env: sk-team-a-secret, tasks: [chat]}\n") == [
        "clients.a.key_env: key_env must name an environment variable (such as TEAM_A_KEY), "
        "not hold the key: got a value of 16 characters that is not a variable name"
    ]


def test_privacy_only_tightens_and_tasks_are_listed_or_all() -> None:
    assert problems("  a: {key_env: A, tasks: [chat], privacy: allow_remote}\n") == [
        "clients.a.privacy: a client's privacy only tightens: local_only keeps its requests "
        "local whatever the route allows; remove the key to let each route's privacy decide"
    ]
    assert problems("  a: {key_env: A, tasks: ['*', chat]}\n") == [
        "clients.a.tasks: '*' stands for every task: write tasks: '*' alone"
    ]


def test_every_problem_of_the_table_in_one_pass() -> None:
    """A client with a schema error leaves the others checked against the routes."""
    assert problems(
        f"  a: {{key_sha256: '{DIGEST}', tasks: [chat, chta]}}\n"
        f"  b: {{key_sha256: '{DIGEST}', tasks: '*'}}\n"
        "  c: {key_env: SAME, tasks: [chat]}\n"
        "  d: {key_env: SAME, tasks: [zzz]}\n"
        "  admin: {key_env: ADMIN_CLIENT, tasks: '*'}\n"
        "  e: {key_env: E, tasks: [chat], limits: {requests_per_minute: 0}}\n"
    ) == [
        "clients.e.limits.requests_per_minute: input should be greater than or equal to 1, got 0",
        "clients.a.tasks.1: unknown task 'chta': did you mean 'chat'?",
        "clients.b.key_sha256: the same key as clients.a: give each client its own key (a key "
        "names one client)",
        "clients.d.tasks.0: unknown task 'zzz' (known: chat, open)",
        "clients.d.key_env: the same variable as clients.c: give each client a variable of its "
        "own holding its own key",
        "clients.admin: 'admin' is what zest calls the admin key: give the client another name",
    ]


def test_keys_are_read_from_the_environment_and_each_names_one_client() -> None:
    config = parse_routes(
        HEAD + f"  a: {{key_sha256: '{DIGEST}', tasks: [chat]}}\n"
        "  b: {key_env: TEAM_B_KEY, tasks: [chat]}\n"
        "  c: {key_env: TEAM_C_KEY, tasks: [chat]}\n",
        "routes.yaml",
    )
    keys, found = resolve_client_keys(config.clients, {"TEAM_B_KEY": " sk-b\n", "TEAM_C_KEY": ""})
    assert found == [
        "clients.c.key_env: the environment variable TEAM_C_KEY is empty: set it to the "
        "client's key where zest serves, or give the key's SHA-256 as key_sha256"
    ]
    assert keys.digests == (
        (bytes.fromhex(DIGEST), "a"),
        (hashlib.sha256(b"sk-b").digest(), "b"),  # a secret file's newline is no part of it
    )
    _, found = resolve_client_keys(config.clients, {"TEAM_B_KEY": "sk-team-a", "TEAM_C_KEY": "x"})
    assert found == [
        "clients.b.key_env: the same key as clients.a: give each client its own key (a key "
        "names one client)"
    ]
    _, found = resolve_client_keys(config.clients, {"TEAM_C_KEY": "x"})
    assert found[0].startswith("clients.b.key_env: the environment variable TEAM_B_KEY is not set")


def test_a_route_as_a_client_gets_it() -> None:
    config = parse_routes(
        HEAD + "  held: {key_env: A, tasks: '*', privacy: local_only, priority: 7}\n"
        "  free: {key_env: B, tasks: '*'}\n",
        "routes.yaml",
    )
    chat, open_route = config.routes["chat"], config.routes["open"]
    free = config.clients["free"]
    assert route_for_client(open_route, "free", free) is open_route  # nothing to change: no copy
    held = route_for_client(open_route, "held", config.clients["held"])
    assert (held.privacy, held.priority, held.privacy_floor_of) == ("local_only", 7, "held")
    assert open_route.privacy == "allow_remote"  # the table's route is untouched
    kept = route_for_client(chat, "held", config.clients["held"], priority=False)
    assert kept is chat  # local_only already, no priority asked: the route itself
