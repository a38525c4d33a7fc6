"""Named clients in routes.yaml (`clients:`): who calls, with which key, which tasks, under which
limits and privacy floor. Validated with the rest of the file; nothing here reads a key.

A client's key is never written in the file: it is given as its SHA-256 (`key_sha256`, what
`printf %s "$KEY" | sha256sum` prints) or as the name of an environment variable the server
reads at start (`key_env`). `resolve_client_keys` turns the table into digests, given the
environment (its caller passes it: the router reads nothing but the file).
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "ALL_TASKS",
    "RESERVED_CLIENT_NAMES",
    "ClientConfig",
    "ClientKeys",
    "ClientLimits",
    "client_problems",
    "key_digest",
    "resolve_client_keys",
]

ALL_TASKS = "*"
# What the metrics, the access line and GET /v1/usage call a caller that is no named client: a
# key of ZEST_API_KEYS (or none, on an open server), and the admin key.
RESERVED_CLIENT_NAMES = ("anonymous", "admin")
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
HOW_TO_DIGEST = 'printf %s "$KEY" | sha256sum'


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClientLimits(_Strict):
    """A client's limits; a limit not set does not limit. Tokens are prompt + completion."""

    requests_per_minute: int | None = Field(default=None, ge=1, le=10_000_000)
    tokens_per_minute: int | None = Field(default=None, ge=1, le=10_000_000_000)
    # Requests of this client running at once on one replica (its slots die with it).
    concurrent: int | None = Field(default=None, ge=1, le=100_000)
    tokens_per_day: int | None = Field(default=None, ge=1, le=10_000_000_000_000)

    @property
    def any(self) -> bool:
        limits = (self.requests_per_minute, self.tokens_per_minute, self.concurrent)
        return self.tokens_per_day is not None or any(limit is not None for limit in limits)


class ClientConfig(_Strict):
    """One app team's caller: its key (as a digest or a variable's name), what it may call."""

    # The SHA-256 of the key, as 64 hex digits (printf %s "$KEY" | sha256sum).
    key_sha256: str | None = None
    # ...or the NAME of an environment variable holding the key on the server.
    key_env: str | None = None
    # The tasks (or exposed model ids) it may call; "*": all of them.
    tasks: Literal["*"] | tuple[str, ...]
    # local_only: none of its requests ever reaches a remote model, whatever the route allows
    # (privacy only tightens: a client cannot loosen a route's).
    privacy: Literal["local_only"] | None = None
    # Added to the route's priority in the admission queue (higher first).
    priority: int = Field(default=0, ge=-100, le=100)
    limits: ClientLimits = ClientLimits()
    description: str = ""

    @field_validator("key_sha256", mode="before")
    @classmethod
    def _check_digest(cls, digest: object) -> object:
        if digest is None:
            return None
        if not isinstance(digest, str) or not _SHA256.match(digest):
            size = f"{len(digest)} characters" if isinstance(digest, str) else "not text"
            raise ValueError(
                f"key_sha256 must be the key's SHA-256, 64 hex digits in quotes, not the key "
                f"({size}): write what `{HOW_TO_DIGEST}` prints, or name an environment "
                "variable holding the key with key_env"
            )
        return digest.lower()

    @field_validator("key_env")
    @classmethod
    def _check_env(cls, name: str | None) -> str | None:
        if name is not None and not _ENV_NAME.match(name):
            raise ValueError(
                f"key_env must name an environment variable (such as TEAM_A_KEY), not hold "
                f"the key: got a value of {len(name)} characters that is not a variable name"
            )
        return name

    @field_validator("privacy", mode="before")
    @classmethod
    def _only_tightens(cls, privacy: object) -> object:
        if privacy == "allow_remote":
            raise ValueError(
                "a client's privacy only tightens: local_only keeps its requests local "
                "whatever the route allows; remove the key to let each route's privacy decide"
            )
        return privacy

    @field_validator("tasks", mode="before")
    @classmethod
    def _check_tasks(cls, tasks: object) -> object:
        if isinstance(tasks, list | tuple):
            if ALL_TASKS in tasks:
                raise ValueError("'*' stands for every task: write tasks: '*' alone")
            if not tasks:
                raise ValueError(
                    "no task: list the tasks the client may call, or '*' for all of them"
                )
        return tasks

    @model_validator(mode="after")
    def _one_key(self) -> ClientConfig:
        if (self.key_sha256 is None) == (self.key_env is None):
            raise ValueError(
                "give the client's key once: key_sha256 (its SHA-256) or key_env (the name of "
                "the environment variable holding it), never the key itself"
            )
        return self

    def may_call(self, task: str) -> bool:
        return self.tasks == ALL_TASKS or task in self.tasks


def key_digest(key: str) -> bytes:
    """The SHA-256 of a key as presented (surrounding spaces are no part of it)."""
    return hashlib.sha256(key.strip().encode()).digest()


@dataclass(frozen=True)
class ClientKeys:
    """Each named client's key digest: what a presented key is compared against."""

    digests: tuple[tuple[bytes, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.digests)


def client_problems(clients: Mapping[str, ClientConfig], tasks: Collection[str]) -> list[str]:
    """The table against the rest of the file: `tasks`, the names a client may call (the
    file's routes and exposed models); a name reserved for callers that are not clients; two
    clients with the same key."""
    problems = []
    digests: dict[str, str] = {}
    variables: dict[str, str] = {}
    for name, client in clients.items():
        where = f"clients.{name}"
        if name in RESERVED_CLIENT_NAMES:
            problems.append(
                f"{where}: {name!r} is what zest calls "
                f"{'the admin key' if name == 'admin' else 'a caller that is no named client'}: "
                "give the client another name"
            )
        if client.tasks != ALL_TASKS:
            for number, task in enumerate(client.tasks):
                if task not in tasks:
                    problems.append(
                        f"{where}.tasks.{number}: unknown task {task!r}{_did_you_mean(task, tasks)}"
                    )
        problems += _same_key(where, client, digests, variables)
    return problems


def _same_key(
    where: str, client: ClientConfig, digests: dict[str, str], variables: dict[str, str]
) -> list[str]:
    """A key (or a variable) a client before this one already has: `digests` and `variables`
    collect them."""
    if client.key_sha256 is not None:
        if (first := digests.setdefault(client.key_sha256, where)) != where:
            return [
                f"{where}.key_sha256: the same key as {first}: give each client its own key "
                "(a key names one client)"
            ]
    elif (
        client.key_env is not None
        and (first := variables.setdefault(client.key_env, where)) != where
    ):
        return [
            f"{where}.key_env: the same variable as {first}: give each client a variable "
            "of its own holding its own key"
        ]
    return []


def resolve_client_keys(
    clients: Mapping[str, ClientConfig], environ: Mapping[str, str]
) -> tuple[ClientKeys, list[str]]:
    """Each client's key digest, its key_env read from `environ` (the server's environment);
    the problems: a variable unset or empty, two clients whose keys are the same."""
    found: list[tuple[bytes, str]] = []
    owners: dict[bytes, str] = {}
    problems = []
    for name, client in clients.items():
        where = f"clients.{name}"
        if client.key_sha256 is not None:
            digest, at = bytes.fromhex(client.key_sha256), f"{where}.key_sha256"
        else:
            variable = client.key_env or ""
            at = f"{where}.key_env"
            value = environ.get(variable, "")
            if not value.strip():
                state = "is not set" if variable not in environ else "is empty"
                problems.append(
                    f"{at}: the environment variable {variable} {state}: set it to the "
                    "client's key where zest serves, or give the key's SHA-256 as key_sha256"
                )
                continue
            digest = key_digest(value)
        if (first := owners.setdefault(digest, where)) != where:
            problems.append(
                f"{at}: the same key as {first}: give each client its own key "
                "(a key names one client)"
            )
            continue
        found.append((digest, name))
    return ClientKeys(tuple(found)), problems


def _did_you_mean(name: str, known: Collection[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    if close:
        return f": did you mean {close[0]!r}?"
    return f" (known: {', '.join(sorted(known))})"
