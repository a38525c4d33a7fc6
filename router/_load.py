"""Reading routes.yaml: YAML, schema, cross-references, and errors that name file, key and fix."""

from __future__ import annotations

import difflib
import itertools
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from zest.errors import ConfigError
from zest.router._clients import client_problems
from zest.router._placement import parse_device
from zest.router._rules_check import file_phrase_problems, rule_problems, walk_conditions
from zest.router._salvage import Salvaged, name_problems, salvage_route, unknown_model
from zest.router._schema import (
    ENGINE_MODELS,
    ENGINES,
    PARTS,
    LlamaCppModel,
    RouteConfig,
    RoutesFile,
)
from zest.router._yaml import read_routes_file, safe_yaml

__all__ = ["LoadedRoutes", "check_routes", "load_routes", "parse_routes"]

_SERIALS = itertools.count(1)

# Keys refused with a reason rather than a spelling hint: a secret never belongs in the file.
_REFUSED_KEYS = {
    "api_key": "a key must not be written in routes.yaml: put it in an environment variable "
    "and name that variable with api_key_env",
}

# A client's key written in the file, under any of these names.
_KEY_NAMES = ("key", "api_key", "secret", "token")
_CLIENT_KEY_REFUSED = (
    "a client's key must not be written in routes.yaml: give its SHA-256 as key_sha256 "
    '(printf %s "$KEY" | sha256sum) or the name of an environment variable holding it as '
    "key_env"
)


@dataclass(frozen=True)
class LoadedRoutes:
    """A validated routes file and where it came from (relative model paths start there)."""

    config: RoutesFile
    path: Path  # resolved: links followed
    # The file as it was named (absolute, links kept): what a reload reads again. The target
    # of a link can change: a Kubernetes ConfigMap volume re-points `..data` at each update.
    named_path: Path | None = None
    # Unique to this load of the file in this process: what caches of a table's results are
    # keyed by (an id() could be reused by a later table once this one is gone).
    serial: int = field(default_factory=lambda: next(_SERIALS), compare=False)
    # check_routes on a file with problems: the models that routes left out for their schema
    # errors need alone (as preflight judges it), so that their files are judged as they will
    # be once those routes are fixed.
    needed_by_broken: frozenset[str] = frozenset()

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    @property
    def source(self) -> Path:
        """The path to read the file again by (its name, not the target it had)."""
        return self.named_path or self.path


def load_routes(path: str | Path) -> LoadedRoutes:
    """Read and validate a routes file; raise ConfigError listing every problem found."""
    loaded, problems = check_routes(path)
    if problems or loaded is None:
        raise ConfigError(problems)
    return loaded


def check_routes(path: str | Path) -> tuple[LoadedRoutes | None, list[str]]:
    """Every problem of a routes file, in one pass, and its sound part: the whole file when
    there is none, else the models and routes that have none of their own (what the model-file
    checks can still read), or None when too little of it validates. A file that is not YAML
    (or not a mapping) raises ConfigError."""
    path = Path(path)
    text = read_routes_file(path)
    checked = _checked_text(text, str(path))
    if checked.config is None:
        return None, checked.problems
    loaded = LoadedRoutes(
        config=checked.config,
        path=path.resolve(),
        named_path=path.absolute(),
        needed_by_broken=checked.needed_by_broken,
    )
    return loaded, checked.problems


def parse_routes(text: str, filename: str) -> RoutesFile:
    """Validate routes.yaml text; `filename` prefixes every error line."""
    checked = _checked_text(text, filename)
    if checked.problems or checked.config is None:
        raise ConfigError(checked.problems)
    return checked.config


@dataclass(frozen=True)
class _Checked:
    """A file's sound part (None: too little of it validates), every problem, and the models
    its routes with schema errors need alone."""

    config: RoutesFile | None
    problems: list[str]
    needed_by_broken: frozenset[str] = frozenset()


def _checked_text(text: str, filename: str) -> _Checked:
    try:
        return _checked(text, filename)
    except RecursionError:  # thousands of nested levels: deeper than the parser goes
        raise ConfigError(
            [f"{filename}: the YAML nests too deeply: a routes file nests a few levels"]
        ) from None


@dataclass(frozen=True)
class _Parts:
    """What of a file validated: its config (without the entries that did not), and the names
    of the models and routes it declares that did not (nothing refers to them soundly)."""

    config: RoutesFile
    broken_models: frozenset[str] = frozenset()
    broken_routes: frozenset[str] = frozenset()


def _checked(text: str, filename: str) -> _Checked:
    """The sound part of the file and every problem, in one pass: the schema's of every part
    at once, the cross-references of the parts that validated (not only once the whole file
    does), and the names the parts with schema errors refer to (router/_salvage.py)."""
    data = _parse_yaml(text, filename)
    try:
        parts: _Parts | None = _Parts(RoutesFile.model_validate(data))
        schema: list[str] = []
        errors: list[ErrorDetails] = []
    except ValidationError as exc:
        errors = exc.errors()
        schema = [_format_error(filename, err) for err in errors]
        parts = _validated_parts(data, errors)
    broken = _salvaged_routes(data, errors)
    names = {
        task: name_problems(task, salvaged, _declared(data, "models"), _declared(data, "routes"))
        for task, salvaged in broken.items()
    }
    needed = frozenset(
        s.route.model
        for s in broken.values()
        if not s.route.fallback or s.route.on_failure == "return_error"
    )
    if parts is None:
        found = [problem for problems in names.values() for problem in problems]
        return _Checked(None, schema + [f"{filename}: {problem}" for problem in found])
    sound, problems = _cross_reference_problems(parts, data, names)
    return _Checked(sound, schema + [f"{filename}: {problem}" for problem in problems], needed)


def _validated_parts(data: dict[str, Any], errors: list[ErrorDetails]) -> _Parts | None:
    """The file without what its schema errors are in: each model or route with an error is
    left out (named in broken_*), another top-level key with one falls back to its default.
    None when a table itself is wrong (not a mapping, a bad name, empty in the file)."""
    broken: dict[str, set[str]] = {"models": set(), "routes": set(), "clients": set()}
    dropped: set[str] = set()
    for err in errors:
        key = str(err["loc"][0]) if err["loc"] else ""
        if key in broken and len(err["loc"]) >= 2:
            broken[key].add(str(err["loc"][1]))
        elif key == "clients":  # no mapping: the table is left out, the rest is checked
            dropped.add(key)
        elif key in broken or not key:
            return None
        else:
            dropped.add(key)
    kept = {key: value for key, value in data.items() if key not in dropped}
    for table, names in broken.items():
        if names and table not in dropped:  # a client's errors leave the others checked
            kept[table] = {n: v for n, v in data[table].items() if str(n) not in names}
    kept["version"] = 1
    try:  # a table may be left empty: the other's entries are still checked
        config = RoutesFile.model_validate(kept, context={PARTS: True})
    except ValidationError:
        return None
    return _Parts(config, frozenset(broken["models"]), frozenset(broken["routes"]))


def _declared(data: dict[str, Any], table: str) -> list[str]:
    """The names a table of the file declares, valid or not (none when it is no mapping)."""
    entries = data.get(table)
    return [str(name) for name in entries] if isinstance(entries, dict) else []


def _salvaged_routes(data: dict[str, Any], errors: list[ErrorDetails]) -> dict[str, Salvaged]:
    """Each route with schema errors, as far as it validates without the keys they are in."""
    where: dict[str, list[tuple[int | str, ...]]] = {}
    for err in errors:
        loc = err["loc"]
        if len(loc) >= 2 and loc[0] == "routes":
            where.setdefault(str(loc[1]), []).append(loc[2:])
    salvaged = {}
    for task, locs in where.items():
        found = salvage_route(data["routes"].get(task), locs)
        if found is not None:
            salvaged[task] = found
    return salvaged


def _parse_yaml(text: str, filename: str) -> dict[str, Any]:
    data = safe_yaml(text, filename)
    if data is None:
        raise ConfigError([f"{filename}: the file is empty: start with 'version: 1'"])
    if not isinstance(data, dict):
        raise ConfigError(
            [f"{filename}: the top level must be a mapping with version, models and routes"]
        )
    return data


def _cross_reference_problems(
    parts: _Parts, data: dict[str, Any], names: dict[str, list[str]]
) -> tuple[RoutesFile, list[str]]:
    """The problems between the parts that validated, and the config of the sound routes
    (those with none), in the file's order with the `names` problems of its broken routes. A
    route that refers to a broken model or route has only its names checked: what it refers
    to is not known yet."""
    config = parts.config
    models, routes = _declared(data, "models"), _declared(data, "routes")
    problems: list[str] = []
    sound: dict[str, RouteConfig] = {}
    for task in routes:
        route = config.routes.get(task)
        if route is None:  # schema errors of its own
            problems += names.get(task, [])
            continue
        refers_to, routes_named = _references(route)
        if refers_to & parts.broken_models or routes_named & parts.broken_routes:
            problems += name_problems(task, Salvaged.whole(route), models, routes)
            continue
        found = _route_problems(config, f"routes.{task}", route)
        found += rule_problems(config, task, route)
        problems += found
        if not found:
            sound[task] = route
    problems += file_phrase_problems(config) + _preload_problems(config, parts.broken_models)
    callable_names = [*routes, *(model for model in models if config.exposes(model))]
    problems += client_problems(config.clients, callable_names)
    if problems or len(sound) < len(config.routes):
        config = config.model_copy(update={"routes": sound})
    return config, problems


def _references(route: RouteConfig) -> tuple[set[str], set[str]]:
    """The models and the routes a route names."""
    models = {route.model} | {entry.model for entry in route.fallback}
    routes: set[str] = set()
    for number, rule in enumerate(route.rules):
        routes.add(rule.to)
        for condition, _ in walk_conditions(rule.when, str(number)):
            if condition.queued_over is not None:
                routes.add(condition.queued_over.route)
            for via in (condition.similar_to, condition.classify):
                if via is not None:
                    routes.add(via.via)
    return models, routes


def _preload_problems(config: RoutesFile, broken: frozenset[str] = frozenset()) -> list[str]:
    preload = config.lifecycle.preload
    if preload == "routes":
        return []
    known = ", ".join(sorted(config.models))
    problems = []
    for number, model in enumerate(preload):
        at = f"lifecycle.preload.{number}"
        if model in broken:  # declared, with problems of its own
            continue
        if model not in config.models:
            problems.append(f"{at}: unknown model {model!r} (known: {known})")
        elif not config.models[model].local:
            problems.append(f"{at}: {model!r} is a remote model, nothing loads here: remove it")
    return problems


def _route_problems(config: RoutesFile, where: str, route: RouteConfig) -> list[str]:
    if route.model not in config.models:
        return [unknown_model(f"{where}.model", route.model, config.models)]
    problems = _placement_problems(
        config, route, where=where, at=where, model=route.model, device=route.device
    )
    for number, entry in enumerate(route.fallback):
        at = f"{where}.fallback.{number}"
        if entry.model not in config.models:
            problems.append(unknown_model(f"{at}.model", entry.model, config.models))
        else:
            problems += _placement_problems(
                config, route, where=where, at=at, model=entry.model, device=entry.device
            )
    return problems + _policy_problems(where, route)


def _placement_problems(
    config: RoutesFile, route: RouteConfig, *, where: str, at: str, model: str, device: str | None
) -> list[str]:
    """One attempt's model and device (at key path `at`) against the route's policies."""
    kind_problem = _kind_problem(config, route, at=at, model=model)
    if kind_problem:
        return [kind_problem]
    context = config.models[model].context_length
    if route.kind != "embedding" and context is not None and route.max_tokens >= context:
        return [
            f"{where}.max_tokens: {route.max_tokens} leaves no room for a prompt in the "
            f"context_length ({context}) of model {model!r}: lower max_tokens below {context}"
        ]
    if not config.models[model].local:
        problems = []
        if device not in (None, "auto"):
            problems.append(
                f"{at}.device: model {model!r} is remote and runs on no local device: "
                "remove the device key"
            )
        if route.privacy == "local_only":
            problems.append(
                f"{at}.model: {model!r} is a remote model, but {where}.privacy is local_only "
                "(the default): set privacy: allow_remote to let this route's prompts leave "
                "the machine, or use a local model"
            )
        return problems
    if route.allow_cpu or "cpu" not in (parse_device(device or "auto") or ()):
        return []
    if at == where:
        return [
            f"{at}.allow_cpu: false, but device {device!r} runs on cpu: the route could never "
            "run; set allow_cpu to true or choose another device"
        ]
    return [
        f"{at}.device: {device!r} runs on cpu, but {where}.allow_cpu is false: choose another "
        "device or set allow_cpu to true"
    ]


def _kind_problem(config: RoutesFile, route: RouteConfig, *, at: str, model: str) -> str | None:
    """An embedding route needs a model that embeds; a generating route one that generates."""
    entry = config.models[model]
    embeds = isinstance(entry, LlamaCppModel) and entry.options.embedding
    if route.kind == "embedding" and entry.local and not embeds:
        return (
            f"{at}.model: {model!r} is not an embedding model, and this is a kind: embedding "
            f"route: use a llamacpp model with options.embedding: true (or a remote model)"
        )
    if route.kind != "embedding" and embeds:
        return (
            f"{at}.model: {model!r} is an embedding model (options.embedding: true): it cannot "
            f"serve a {route.kind} route; route it with kind: embedding"
        )
    return None


def _policy_problems(where: str, route: RouteConfig) -> list[str]:
    problems = []
    if route.fallback and route.on_failure == "return_error":
        problems.append(
            f"{where}.fallback: on_failure is return_error, so no fallback would ever be "
            "tried: set on_failure: next or remove fallback"
        )
    if route.context.on_overflow == "fallback" and not route.fallback:
        problems.append(
            f"{where}.context.on_overflow: fallback, but the route has no fallback entries: "
            "add fallback or use trim or reject"
        )
    if route.kind != "chat" and route.system_prompt is not None:
        problems.append(
            f"{where}.system_prompt: a {route.kind} route has no messages to put it before, so "
            "it would be ignored: remove it, or make the route kind: chat"
        )
    if route.kind != "chat" and route.examples:
        problems.append(
            f"{where}.examples: a {route.kind} route has no messages to put examples before: "
            "remove them, or make the route kind: chat"
        )
    if route.kind == "embedding" and route.slo is not None:
        problems.append(
            f"{where}.slo: an embedding route streams no tokens, so it has no time to first "
            "token or decode rate to judge: remove the key"
        )
    if route.kind != "chat" and route.tools == "deny":
        problems.append(f"{where}.tools: only chat routes take tools: remove the key")
    if route.kind == "completion" and route.context.trim == "turns":
        problems.append(
            f"{where}.context.trim: turns needs a chat route (messages): use middle for "
            "completion routes"
        )
    return problems


def _format_error(filename: str, err: ErrorDetails) -> str:
    loc = _display_loc(err["loc"])
    path = ".".join(str(part) for part in loc) or "(top level)"
    return f"{filename}: {path}: {_describe(err, loc, err['loc'])}"


def _display_loc(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """Drop the discriminator tag pydantic inserts under models.<name>."""
    if len(loc) >= 3 and loc[0] == "models" and loc[2] in ENGINE_MODELS:
        return loc[:2] + loc[3:]
    return loc


def _describe(err: ErrorDetails, loc: tuple[int | str, ...], raw: tuple[int | str, ...]) -> str:
    kind, ctx = err["type"], err.get("ctx", {})
    if kind == "extra_forbidden" and loc[0] == "clients" and str(loc[-1]) in _KEY_NAMES:
        return f"{str(loc[-1])!r} is refused: {_CLIENT_KEY_REFUSED}"
    if kind == "extra_forbidden" and str(loc[-1]) in _REFUSED_KEYS:
        return f"{str(loc[-1])!r} is refused: {_REFUSED_KEYS[str(loc[-1])]}"
    if kind == "extra_forbidden":
        return _unknown_key_message(str(loc[-1]), _model_at(raw[:-1]))
    if kind == "missing":
        return f"missing required key {str(loc[-1])!r}: add it"
    if kind == "union_tag_invalid":
        return f"unknown engine {ctx.get('tag')!r} (known: {', '.join(ENGINES)})"
    if kind == "union_tag_not_found":
        return f"missing required key 'engine' (known engines: {', '.join(ENGINES)})"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        return f"invalid value {err['input']!r} (expected one of: {expected})"
    if kind == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    message = str(err["msg"])
    return f"{message[0].lower()}{message[1:]}, got {err['input']!r}"


def _unknown_key_message(key: str, model: type[BaseModel] | None) -> str:
    """The key's closest allowed name and the list of them, as the file spells them (a
    field's alias: `not`, never the attribute `not_`)."""
    fields = model.model_fields.items() if model else ()
    allowed = sorted(info.alias or name for name, info in fields)
    message = f"unknown key {key!r}"
    close = difflib.get_close_matches(key, allowed, n=1)
    if close:
        message += f": did you mean {close[0]!r}?"
    if allowed:
        message += f" (allowed: {', '.join(allowed)})"
    return message


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The pydantic model that validates the mapping at `loc` (raw pydantic loc, tags included)."""
    current: Any = RoutesFile
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = _field_named(current, str(part))
            current = _unwrap(field.annotation) if field else None
        elif typing.get_origin(current) in (tuple, list):  # the part is an index
            current = _unwrap(typing.get_args(current)[0])
        elif typing.get_origin(current) is dict:
            current = _unwrap(typing.get_args(current)[1])
            if parts and str(parts[0]) in ENGINE_MODELS:  # the discriminator tag
                current = ENGINE_MODELS[str(parts.pop(0))]
        else:
            return None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _field_named(model: type[BaseModel], name: str) -> FieldInfo | None:
    """The field a key of the file names: by its alias (`not`) or its name."""
    for attribute, info in model.model_fields.items():
        if name in (info.alias, attribute):
            return info
    return None


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated/Optional; a discriminated union of models becomes None (tag decides)."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return members[0] if len(members) == 1 else None
    return annotation
