"""The app's security settings in Litestar's terms: the guards (what a web page could send,
then the keys), CORS, the body size limit."""

from __future__ import annotations

from dataclasses import dataclass

from litestar.config.cors import CORSConfig

from zest.gateway.http._auth import AccessPolicy, AuthGuard, Clients, no_clients
from zest.gateway.http._origin import BrowserGuard, HostRule, OriginRule
from zest.gateway.serving import Settings

__all__ = ["EXPOSED_HEADERS", "HttpSecurity", "body_too_large_message", "cors_config"]

# What a browser app may read of an answer: what served the request, and when to retry.
EXPOSED_HEADERS = [
    "x-request-id",
    "x-zest-route",
    "x-zest-rule",
    "x-zest-plan",
    "x-zest-fallbacks",
    "x-zest-trimmed",
    "x-zest-pipeline",
    "x-zest-ignored",
    "x-zest-affinity",
    "x-zest-replica",
    "x-zest-cache",
    "retry-after",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
]


def cors_config(origins: str) -> CORSConfig | None:
    """CORS for the comma-separated `origins` (`*` for any); none configured: CORS stays off."""
    allowed = [origin.strip() for origin in origins.split(",") if origin.strip()]
    if not allowed:
        return None
    return CORSConfig(
        allow_origins=allowed,
        # Any request header: the origins are the guard, and clients send their own (the
        # OpenAI JavaScript SDK's x-stainless-*, openai-organization, ...).
        allow_headers=["*"],
        expose_headers=EXPOSED_HEADERS,
    )


def body_too_large_message(limit: int | None) -> str:
    size = f"{limit} bytes" if limit is not None else "the server's limit"
    return (
        f"the request body is larger than {size}: send a smaller body, "
        "or raise the limit with ZEST_MAX_BODY_BYTES on the server"
    )


@dataclass(frozen=True)
class HttpSecurity:
    policy: AccessPolicy
    cors: CORSConfig | None
    max_body_bytes: int
    hosts: HostRule
    origins: OriginRule

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpSecurity:
        """Raises ConfigError when ZEST_API_KEYS_FILE cannot be read or holds no key, or
        ZEST_ALLOWED_HOSTS holds something that is not a host."""
        return cls(
            AccessPolicy.from_settings(settings),
            cors_config(settings.cors_origins),
            settings.max_body_bytes,
            HostRule.from_settings(settings),
            OriginRule.from_list(settings.cors_origins),
        )

    @property
    def guards(self) -> list[BrowserGuard | AuthGuard]:
        """What a web page could send is refused first (403), then the keys are checked."""
        return self.guards_with(no_clients)

    def guards_with(self, clients: Clients) -> list[BrowserGuard | AuthGuard]:
        """The guards, the named clients' keys among the keys (`clients`: the table's)."""
        return [BrowserGuard(self.hosts, self.origins), AuthGuard(self.policy, clients)]
