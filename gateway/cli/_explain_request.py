"""`zest explain TASK --request body.json`: the routing decision for that request, its trace,
then the plan of the route it chose, as POST /v1/explain answers them.

The runtime is the server's, never started: deterministic conditions load nothing (a token
count reads a tokenizer), a model-backed one loads the route it names, in this process.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from zest.errors import CommandError, RequestError
from zest.gateway.serving import Runtime, Settings, explain_request
from zest.router import LoadedRoutes

__all__ = ["explain_request_file"]


def explain_request_file(
    routes: LoadedRoutes, settings: Settings, task: str, path: Path
) -> dict[str, Any]:
    request = _read_request(path)
    from zest.engines import detect_inventory

    runtime = Runtime(
        routes,
        detect_inventory(settings.emulate_devices),
        strict_privacy=settings.privacy == "strict",
    )
    return asyncio.run(_explain(runtime, task, request, path))


async def _explain(
    runtime: Runtime, task: str, request: dict[str, Any], path: Path
) -> dict[str, Any]:
    try:
        return await explain_request(runtime, task, request)
    except RequestError as exc:
        raise CommandError(f"{path}: {exc.message}") from None
    finally:
        await runtime.close()


def _read_request(path: Path) -> dict[str, Any]:
    try:
        request = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CommandError(f"{path}: not a JSON request body: {exc}") from None
    if not isinstance(request, dict):
        raise CommandError(f"{path}: not a JSON object: send the body a client would send")
    return request
