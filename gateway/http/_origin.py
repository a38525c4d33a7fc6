"""What a web page could make the browser send, refused: another Host, another Origin, a form.

A server that needs no key trusts whatever reaches it, and a browser on the machine reaches
it for any page it opens:
- DNS rebinding: a page at http://rebind.evil.example:8000/ whose name the attacker then points
  at 127.0.0.1 calls zest as its own origin; only the `Host` header still says
  rebind.evil.example. A loopback bind answers loopback names only (docs/security.md);
- cross-site requests: any page may POST to any address without asking first (no CORS
  preflight) if the body is a form's (urlencoded, multipart, text/plain) or there is none. The
  browser says where it comes from in `Origin`: a request that changes anything is taken only
  from this server's own pages and the origins CORS lists.
The probes answer whatever the Host: balancers send their own name, or none (HAProxy's check).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from zest.errors import (
    ConfigError,
    PermissionDeniedError,
    UnsupportedMediaTypeError,
    clipped,
    shown,
)
from zest.gateway.http._auth import PUBLIC_PATHS, is_loopback
from zest.gateway.serving import Settings

__all__ = ["BrowserGuard", "HostRule", "OriginRule", "split_host"]

CHANGES_STATE = frozenset({"POST", "PUT", "DELETE", "PATCH"})
# What an HTML form (or a no-cors fetch) may send to any site without a CORS preflight.
FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})
UNSPECIFIED = frozenset({"", "0.0.0.0", "::"})  # a bind to every interface
DEFAULT_PORTS = {"http": "80", "https": "443"}


def split_host(host: str) -> tuple[str, str]:
    """A `Host` value (or an origin's authority) as (name, port), lower-cased, without
    brackets or a final dot; the port is "" when none is given."""
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8000
        name, _, rest = host[1:].partition("]")
        return name, rest.removeprefix(":")
    if host.count(":") == 1:  # name:port (two colons or more: a bare IPv6 address)
        name, _, port = host.partition(":")
    else:
        name, port = host, ""
    return name.removesuffix("."), port


def _entries(value: str) -> tuple[str, ...]:
    """ZEST_ALLOWED_HOSTS: names, addresses, `.domain` (it and its subdomains) or `*`."""
    entries = tuple(entry.strip() for entry in value.split(",") if entry.strip())
    for entry in entries:
        if "/" in entry or " " in entry:
            raise ConfigError(
                [
                    f"ZEST_ALLOWED_HOSTS: {shown(entry)} is not a host name: write names or "
                    "addresses separated by commas (zest.example.com,10.0.0.5), without a "
                    "scheme or a path"
                ]
            )
    return entries


@dataclass(frozen=True)
class HostRule:
    """The Host names the server answers to: loopback names always, and `names`, `domains`
    (".example.com": it and every name under it); `any_host`: every name (`reason` says why)."""

    any_host: bool
    names: frozenset[str] = frozenset()
    domains: tuple[str, ...] = ()
    reason: str = ""

    @classmethod
    def from_settings(cls, settings: Settings) -> HostRule:
        """Raises ConfigError for a ZEST_ALLOWED_HOSTS entry that is not a host."""
        listed = _entries(settings.allowed_hosts)
        if "*" in listed:
            return cls(any_host=True, reason="ZEST_ALLOWED_HOSTS=*")
        loopback = is_loopback(settings.host)
        if not loopback and not listed:
            # Bound beyond loopback, the server is reached under names it cannot know (a
            # Service's, a balancer's, a pod's address): the keys guard it, not its name.
            return cls(any_host=True, reason="bound beyond loopback; ZEST_ALLOWED_HOSTS limits")
        names = {split_host(entry)[0] for entry in listed if not entry.startswith(".")}
        if settings.host not in UNSPECIFIED:
            names.add(split_host(settings.host)[0])
        if not loopback:
            names.add(socket.gethostname().lower())
        domains = tuple(entry.lower().removesuffix(".") for entry in listed if entry[0] == ".")
        return cls(False, frozenset(names | {domain[1:] for domain in domains}), domains)

    def allows(self, host: str) -> bool:
        if self.any_host:
            return True
        name = split_host(host)[0]
        if not name:  # no Host at all: not a loopback name either
            return False
        return is_loopback(name) or name in self.names or name.endswith(self.domains)

    def describe(self) -> str:
        """For the startup log: which Host names are answered."""
        if self.any_host:
            return f"hosts: any ({self.reason})"
        bases = {domain[1:] for domain in self.domains}
        others = sorted(name for name in self.names - bases if not is_loopback(name))
        listed = [*others, *self.domains]
        return "hosts: localhost, 127.0.0.0/8, ::1" + "".join(f", {name}" for name in listed)

    def check(self, values: list[str]) -> None:
        """Raise PermissionDeniedError (403 host_not_allowed) unless one allowed Host came."""
        if len(values) > 1:
            raise PermissionDeniedError(
                "the request has more than one Host header: send one", code="host_not_allowed"
            )
        host = values[0] if values else ""
        if self.allows(host):
            return
        given = f"the Host {shown(host)}" if host else "a request without a Host header"
        raise PermissionDeniedError(
            f"{given} is not a name of this server: zest answers only to loopback names "
            "(localhost, 127.0.0.1, [::1]), its bind address and ZEST_ALLOWED_HOSTS, so that no "
            "web page can reach it by pointing a name of its own at this machine (DNS "
            "rebinding); to use this name, add it to ZEST_ALLOWED_HOSTS on the server "
            "(comma-separated; * for any)",
            code="host_not_allowed",
        )


@dataclass(frozen=True)
class OriginRule:
    """The web pages whose requests may change the server's state: its own, and CORS's."""

    origins: frozenset[str]
    any_origin: bool = False

    @classmethod
    def from_list(cls, origins: str) -> OriginRule:
        """`origins`: ZEST_CORS_ORIGINS, comma-separated (`*`: any)."""
        listed = frozenset(_origin(origin) for origin in origins.split(",") if origin.strip())
        return cls(listed - {"*"}, "*" in listed)

    def allows(self, origin: str, host: str) -> bool:
        origin = _origin(origin)
        return self.any_origin or origin in self.origins or _same_origin(origin, host)

    def check(self, method: str, origin: str | None, host: str) -> None:
        """Raise PermissionDeniedError (403 origin_not_allowed) for a page of another origin."""
        if origin is None or self.allows(origin, host):
            return
        raise PermissionDeniedError(
            f"a {method} from the web page at {shown(origin)} is refused: that origin is not "
            "this server's and ZEST_CORS_ORIGINS does not list it; to let that page call zest, "
            "add its origin to ZEST_CORS_ORIGINS on the server",
            code="origin_not_allowed",
        )


def _origin(origin: str) -> str:
    return origin.strip().lower().rstrip("/")


def _same_origin(origin: str, host: str) -> bool:
    """Whether `origin` (lower-cased) is this server as the request's Host names it. Safe
    because the Host was checked first: a rebound name never gets this far."""
    try:
        parts = urlsplit(origin)
    except ValueError:  # "http://[::1": not an origin
        return False
    default = DEFAULT_PORTS.get(parts.scheme)
    if default is None or not parts.netloc or parts.path or parts.query or "@" in parts.netloc:
        return False  # "null" (a sandboxed or file:// page), or not an origin at all
    name, port = split_host(parts.netloc)
    host_name, host_port = split_host(host)
    return bool(name) and (name, port or default) == (host_name, host_port or default)


def _form_type(content_type: str | None) -> str | None:
    media = (content_type or "").partition(";")[0].strip().lower()
    return media if media in FORM_TYPES else None


def _reads_no_body(handler: BaseRouteHandler) -> bool:
    return handler.parsed_fn_signature.parameters.get("data") is None


class BrowserGuard:
    """The Litestar guard applying a HostRule and an OriginRule, before the keys' guard."""

    def __init__(self, hosts: HostRule, origins: OriginRule) -> None:
        self.hosts = hosts
        self.origins = origins

    def __call__(
        self, connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
    ) -> None:
        path = connection.scope["path"]
        if path.rstrip("/") in PUBLIC_PATHS:
            return  # the probes: balancers and kubelets send Hosts of their own, or none
        hosts = connection.headers.getall("host", [])
        self.hosts.check(hosts)
        method = str(connection.scope.get("method", "GET"))  # a websocket has none
        if method not in CHANGES_STATE:
            return
        self.origins.check(method, connection.headers.get("origin"), hosts[0] if hosts else "")
        # A body must be JSON where one is read (its reader says so); where none is, a form's
        # type is how a page triggers the endpoint blind.
        form = _form_type(connection.headers.get("content-type"))
        if form and _reads_no_body(handler):
            raise UnsupportedMediaTypeError(
                f"{method} {clipped(path)} takes no body, and Content-Type {shown(form)} is "
                "what any web page may send to any site unasked: send the request without a "
                "body (or as 'Content-Type: application/json')"
            )
