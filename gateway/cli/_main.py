"""The `zest` command line: serve, check, explain, alerts, models, eval and bench."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zest.errors import ConfigError, ZestError
from zest.gateway.cli._init import ROUTES_HELP, routes_file

if TYPE_CHECKING:
    from zest.engines import ModelFacts
    from zest.router import LoadedRoutes, ModelConfig

__all__ = ["main"]

log = logging.getLogger("zest")

# The module of each command defined elsewhere, and its function that adds the command's
# parser. `zest chat`, `run` and `eval` are clients of a running gateway: building only the
# command asked for keeps the server, the router and the engines (numpy, llama_cpp) out of
# their start (tests/unit/cli/test_client_start.py).
_COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("_serve", "add_serve_command"),
    "alerts": ("_alerts", "add_alerts_command"),
    "init": ("_init", "add_init_command"),
    "models": ("_models", "add_models_command"),
    "eval": ("_eval", "add_eval_command"),
    "route": ("_route_test", "add_route_command"),
    "chat": ("_chat", "add_chat_commands"),
    "run": ("_chat", "add_chat_commands"),
    "bench": ("_bench_command", "add_bench_command"),
    "system-info": ("_system_info", "add_system_info_command"),
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser(_command_of(argv)).parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `zest explain chat | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141  # as a process ended by SIGPIPE
    except ConfigError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    except ZestError as exc:
        print(f"zest: {exc}", file=sys.stderr)
        return 1


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zest-gateway")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _command_of(argv: Sequence[str]) -> str | None:
    """The command named, when it is one defined in its own module: then only it is built."""
    named = next((arg for arg in argv if not arg.startswith("-")), None)
    return named if named in _COMMANDS else None


def _adder(command: str) -> Callable[[Any], None]:
    module, function = _COMMANDS[command]
    adder: Callable[[Any], None] = getattr(import_module(f"zest.gateway.cli.{module}"), function)
    return adder


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zest", description="Declarative routing gateway for local LLMs."
    )
    parser.add_argument("--version", action="version", version=f"zest {_version()}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    if only is not None:
        _adder(only)(commands)
        return parser
    _adder("serve")(commands)

    check = commands.add_parser(
        "check",
        help="validate a routes file against its model files (as serve and reload do) and "
        "print its routes",
    )
    check.add_argument("file", nargs="?", type=Path, help=ROUTES_HELP)
    check.add_argument(
        "--no-models",
        action="store_true",
        help="check the file alone, without reading the model files (e.g. on a machine "
        "without them)",
    )
    check.set_defaults(func=_check)
    explain = commands.add_parser("explain", help="show the plan for a task without running it")
    explain.add_argument("task", help="a task name of the routes file")
    explain.add_argument(
        "--prompt-tokens",
        type=int,
        default=0,
        metavar="N",
        help="plan for a prompt of N tokens (auto routes depend on it)",
    )
    explain.add_argument("--routes", type=Path, help=ROUTES_HELP)
    explain.add_argument(
        "--request",
        type=Path,
        metavar="BODY.json",
        help="decide this request body by the task's rules (decision and trace), then show "
        "the plan of the route chosen, for its prompt",
    )
    explain.add_argument("--json", action="store_true", help="print the plan as JSON")
    explain.set_defaults(func=_explain)
    for command in ("alerts", "init", "models", "eval", "route", "chat"):  # chat adds run
        _adder(command)(commands)

    _adder("bench")(commands)
    _adder("system-info")(commands)
    return parser


def _explain(args: argparse.Namespace) -> int:
    from zest.engines import detect_inventory
    from zest.gateway.cli._settings import settings_from
    from zest.gateway.serving import explain_task, format_explanation, preflight
    from zest.router import load_routes

    settings = settings_from(routes=args.routes)
    routes = load_routes(routes_file(settings.routes))
    if args.request is not None:
        from zest.gateway.cli._explain_request import explain_request_file

        explained = explain_request_file(routes, settings, args.task, args.request)
        print(json.dumps(explained, indent=2) if args.json else format_explanation(explained))
        return 1 if "error" in explained else 0
    inventory = detect_inventory(settings.emulate_devices)
    facts = preflight(routes, inventory.devices, pins=False).facts  # the contexts models get
    contexts = {
        model_id: routes.config.models[model_id].context_length or found.max_context
        for model_id, found in facts.items()
    }
    explained = explain_task(
        routes.config,
        inventory,
        args.task,
        args.prompt_tokens,
        strict_privacy=settings.privacy == "strict",
        contexts=contexts,
        device_bytes={model_id: found.device_bytes for model_id, found in facts.items()},
    )
    print(json.dumps(explained, indent=2) if args.json else format_explanation(explained))
    return 1 if "error" in explained else 0


def _check(args: argparse.Namespace) -> int:
    from zest.gateway.cli._settings import checked_or_raise, settings_from

    settings = settings_from(routes=args.file)
    path = routes_file(settings.routes)
    loaded, checked = checked_or_raise(
        path, settings, models=not args.no_models, refuse_unloadable=True
    )
    for warning in checked.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    facts, pins = checked.facts, checked.pins
    _print_routes(loaded)
    if facts:
        print()
        _print_models(loaded, facts, pins)
    config = loaded.config
    scope = "the file alone" if args.no_models else "the file and its model files"
    print(
        f"\n{loaded.path}: OK ({_count(len(config.routes), 'route')}, "
        f"{_count(len(config.models), 'model')}; checked {scope})"
    )
    return 0


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _print_models(loaded: LoadedRoutes, facts: dict[str, ModelFacts], pins: dict[str, str]) -> None:
    """Each local model's context, the KV cache one load of it reserves (docs/serving.md,
    Sizing) and its verified pin."""
    from zest.gateway.cli._tables import print_table

    rows = []
    for model_id, found in facts.items():
        model = loaded.config.models[model_id]
        context = model.context_length or found.max_context
        kv = "n/a" if found.kv_bytes is None else f"{found.kv_bytes / 2**20:,.0f} MiB"
        pin = f"{pins[model_id][:12]} verified" if model_id in pins else "-"
        rows.append((model_id, model.engine, str(context or "n/a"), kv, pin, found.where))
    print_table(("MODEL", "ENGINE", "CONTEXT", "KV RESERVED", "SHA256 PIN", "FROM"), rows)


def _print_routes(loaded: LoadedRoutes) -> None:
    from zest.gateway.cli._tables import print_table
    from zest.router import REMOTE_DEVICE

    config = loaded.config
    rows = []
    for task, route in config.routes.items():
        model = config.models[route.model]
        device = route.device if model.local else REMOTE_DEVICE.name  # no local device
        cells = (task, route.kind, route.model, model.engine, device, str(route.max_tokens))
        rows.append((*cells, _source(model)))
    headers = ("TASK", "KIND", "MODEL", "ENGINE", "DEVICE", "MAX_TOKENS", "SOURCE")
    print_table(headers, rows)


def _source(model: ModelConfig) -> str:
    from zest.router import RemoteModel

    if isinstance(model, RemoteModel):
        return f"{model.base_url} ({model.model})"
    return model.source
