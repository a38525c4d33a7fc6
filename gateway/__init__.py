"""HTTP: the Litestar app (OpenAI-compatible and task endpoints), settings and the CLI."""

from zest.gateway.http import create_app
from zest.gateway.serving import Runtime, Settings

__all__ = ["Runtime", "Settings", "create_app"]
