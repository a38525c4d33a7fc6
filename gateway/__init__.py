"""HTTP: the Litestar app (OpenAI-compatible and task endpoints), settings and the CLI."""

from gateway._app import create_app
from gateway._runtime import Runtime
from gateway._settings import Settings

__all__ = ["Runtime", "Settings", "create_app"]
