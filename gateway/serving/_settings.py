"""Deployment settings, in one place: the flags given on the command line (and the arguments
given in code), over the environment variables with the ZEST_ prefix, over the defaults.

`zest serve` and the other server-side commands build them with the flags they were given
(gateway.cli's settings_from); `create_app(runtime, settings)` hands them to the runtime and the
engines, so `Settings(privacy="strict")` in code arms everything, as ZEST_PRIVACY=strict does.
The client commands (chat, run, eval) read their few variables through gateway.cli's
ClientSettings instead, to start without pydantic or an engine.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, PositiveInt, SecretStr, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

__all__ = ["Settings"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ZEST_", extra="forbid")

    # None: ./routes.yaml if there, else the default shipped in the package (see zest.gateway.cli).
    routes: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Declare NPU/GPU as emulated on CPU threads, e.g. "npu=cpu:1,gpu=cpu:1".
    emulate_devices: str = ""
    # strict: no remote engine may be reached at all, whatever the routes say.
    privacy: Literal["standard", "strict"] = "standard"
    # Reload routes.yaml when the file changes (SIGHUP and POST /api/v1/admin/reload always do).
    watch: bool = True
    # Which replica this is, in the x-zest-replica header of every answer (a fleet's balancer
    # spreads requests over replicas); empty: this host's name and port.
    replica_name: str = ""
    # On SIGTERM: how long requests in flight may go on before they are ended with an error.
    shutdown_grace_s: float = Field(default=20.0, ge=0, le=3600)
    # Security (docs/security.md). Keys are SecretStr so that no repr or log shows them; the
    # lists are plain comma-separated strings (pydantic-settings would parse a list as JSON).
    api_keys: SecretStr = SecretStr("")  # empty: no auth on the API
    api_keys_file: Path | None = None  # more API keys, one a line (# comments allowed)
    admin_key: SecretStr = SecretStr("")
    max_body_bytes: PositiveInt = 8 * 1024 * 1024
    cors_origins: str = ""  # empty: CORS off
    # Host names the server answers to beyond its defaults (docs/security.md): a loopback bind
    # takes only loopback names, so that a page that rebinds its DNS name to 127.0.0.1 gets
    # nothing; `*`: any (behind a proxy that sends its own name).
    allowed_hosts: str = ""
    # zest's own cache (cache: sources, digests, converted models, tools); None: the XDG cache,
    # $XDG_CACHE_HOME/zest else ~/.cache/zest. The engines get it at start (use_zest_cache).
    cache: Path | None = None
    # Named clients' limits (docs/teams.md): where they are counted (empty: this process's
    # memory; redis://HOST:PORT/DB: one count for every replica), what a store that cannot be
    # reached means for limited clients (allow: served without their limits; deny: 503), and
    # how long a request waits on the store before that.
    limits_storage: str = ""
    limits_on_store_error: Literal["allow", "deny"] = "allow"
    limits_store_timeout_s: float = Field(default=2.0, gt=0, le=30)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Where a value comes from, first found wins: the arguments (the command line's flags,
        as settings_from passes them, or code's), then ZEST_ variables; else the default. No
        .env file and no secrets folder: nothing else is read."""
        return init_settings, env_settings

    @field_validator("routes", "api_keys_file", "cache", mode="before")
    @classmethod
    def _blank_is_not_given(cls, value: object) -> object:
        """ZEST_ROUTES= (set but empty) means not given, as `zest models list` reads it; as a
        path it would be the current folder, and a traceback reading it."""
        return None if isinstance(value, str) and not value.strip() else value

    def replica(self) -> str:
        """The name of this replica: replica_name, else host name:port (a pod's name in
        Kubernetes)."""
        return self.replica_name or f"{socket.gethostname()}:{self.port}"
