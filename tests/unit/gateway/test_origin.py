"""Which Host names and web page origins the server takes (DNS rebinding, cross-site requests).
The guard in an app is checked in test_security_app.py, the real server in a real browser in
tests/e2e/test_browser_attacks.py."""

from __future__ import annotations

import socket

import pytest

from zest.errors import ConfigError, PermissionDeniedError
from zest.gateway.http._origin import HostRule, OriginRule, split_host
from zest.gateway.serving import Settings


@pytest.mark.parametrize(
    ("host", "split"),
    [
        ("127.0.0.1:8000", ("127.0.0.1", "8000")),
        ("LocalHost", ("localhost", "")),
        ("localhost.:80", ("localhost", "80")),
        ("[::1]:8000", ("::1", "8000")),
        ("[::1]", ("::1", "")),
        ("::1", ("::1", "")),
        ("rebind.evil.example:8000", ("rebind.evil.example", "8000")),
        ("", ("", "")),
    ],
)
def test_a_host_value_is_split_into_name_and_port(host: str, split: tuple[str, str]) -> None:
    assert split_host(host) == split


def rule(**settings: str) -> HostRule:
    return HostRule.from_settings(Settings(**settings))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:8000", "127.0.0.1", "127.8.9.10:1", "localhost:8000", "LOCALHOST", "[::1]:8000"],
)
def test_a_loopback_bind_answers_loopback_names_whatever_the_port(host: str) -> None:
    assert rule().allows(host)
    assert rule().describe() == "hosts: localhost, 127.0.0.0/8, ::1"


@pytest.mark.parametrize(
    "host",
    [
        "rebind.evil.example:8000",
        "rebind.evil.example",
        "localhost.evil.example",
        "127.0.0.1.evil.example",
        "evil.localhost.example:8000",
        "10.0.0.5:8000",
        "0.0.0.0:8000",
        "",  # no Host header: not a loopback name
        ":8000",
    ],
)
def test_a_loopback_bind_refuses_every_other_name(host: str) -> None:
    assert not rule().allows(host)


def test_zest_allowed_hosts_adds_names_and_domains_port_ignored() -> None:
    hosts = rule(allowed_hosts="zest.example.com:443, .internal.example ,10.0.0.5")
    for host in ("zest.example.com", "zest.example.com:8000", "10.0.0.5:8000", "localhost"):
        assert hosts.allows(host), host
    for host in ("a.internal.example:8000", "internal.example", "b.a.internal.example"):
        assert hosts.allows(host), host
    for host in ("example.com", "evilinternal.example", "zest.example.com.evil", "10.0.0.6"):
        assert not hosts.allows(host), host
    assert hosts.describe() == (
        "hosts: localhost, 127.0.0.0/8, ::1, 10.0.0.5, zest.example.com, .internal.example"
    )


def test_a_star_allows_any_host() -> None:
    hosts = rule(allowed_hosts="*")
    assert hosts.allows("rebind.evil.example:8000")
    assert hosts.allows("")
    assert hosts.describe() == "hosts: any (ZEST_ALLOWED_HOSTS=*)"


def test_bound_beyond_loopback_any_host_is_taken_unless_zest_allowed_hosts_limits_it() -> None:
    """A fleet's replicas are reached by a Service's name, a balancer's, a pod's address."""
    everywhere = rule(host="0.0.0.0")
    assert everywhere.allows("zest.default.svc.cluster.local:8000")
    assert everywhere.allows("10.1.2.3:8000")
    assert everywhere.describe() == (
        "hosts: any (bound beyond loopback; ZEST_ALLOWED_HOSTS limits)"
    )
    limited = rule(host="0.0.0.0", allowed_hosts="zest.example.com")
    assert limited.allows("zest.example.com:8000")
    assert limited.allows(socket.gethostname() + ":8000")  # the machine's own name
    assert limited.allows("127.0.0.1:8000")  # on the machine itself
    assert not limited.allows("rebind.evil.example:8000")
    bound = rule(host="192.168.1.10", allowed_hosts="zest.lan")
    assert bound.allows("192.168.1.10:8000")
    assert not bound.allows("192.168.1.11:8000")


def test_a_bind_to_a_name_answers_that_name() -> None:
    assert rule(host="localhost").allows("localhost:8000")
    assert not rule(host="localhost").allows("rebind.evil.example")


@pytest.mark.parametrize("value", ["http://zest.example.com", "zest.example.com/v1", "a b"])
def test_an_allowed_host_that_is_not_a_host_stops_the_start(value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        rule(allowed_hosts=value)
    assert refused.value.problems[0].endswith(
        "is not a host name: write names or addresses separated by commas "
        "(zest.example.com,10.0.0.5), without a scheme or a path"
    )


def test_a_refused_host_says_what_to_set() -> None:
    with pytest.raises(PermissionDeniedError) as refused:
        rule().check(["rebind.evil.example:8000"])
    assert refused.value.code == "host_not_allowed"
    assert refused.value.status_code == 403
    assert refused.value.message == (
        "the Host 'rebind.evil.example:8000' is not a name of this server: zest answers only "
        "to loopback names (localhost, 127.0.0.1, [::1]), its bind address and "
        "ZEST_ALLOWED_HOSTS, so that no web page can reach it by pointing a name of its own at "
        "this machine (DNS rebinding); to use this name, add it to ZEST_ALLOWED_HOSTS on the "
        "server (comma-separated; * for any)"
    )
    with pytest.raises(PermissionDeniedError) as missing:
        rule().check([])
    assert missing.value.message.startswith(
        "a request without a Host header is not a name of this server"
    )
    with pytest.raises(PermissionDeniedError) as two:
        rule(allowed_hosts="*").check(["127.0.0.1", "127.0.0.1"])
    assert two.value.message == "the request has more than one Host header: send one"


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000"),  # the server's own page
        ("http://LOCALHOST:8000", "localhost:8000"),
        ("http://[::1]:8000", "[::1]:8000"),
        ("http://localhost", "localhost:80"),
        ("https://zest.example.com", "zest.example.com"),  # behind a TLS proxy keeping Host
        ("https://app.example", "127.0.0.1:8000"),  # listed in ZEST_CORS_ORIGINS
        ("https://app.example/", "127.0.0.1:8000"),
    ],
)
def test_the_server_s_own_pages_and_cors_origins_may_change_state(origin: str, host: str) -> None:
    assert OriginRule.from_list("https://app.example").allows(origin, host)


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        ("http://127.0.0.1:9999", "127.0.0.1:8000"),  # another port is another origin
        ("http://localhost:8000", "127.0.0.1:8000"),
        ("http://127.0.0.1", "127.0.0.1:8000"),
        ("null", "127.0.0.1:8000"),  # a sandboxed frame or a file:// page
        ("file://", "127.0.0.1:8000"),
        ("http://127.0.0.1:8000/x", "127.0.0.1:8000"),
        ("http://user@127.0.0.1:8000", "127.0.0.1:8000"),
        ("http://[::1", "[::1]:8000"),  # not even a URL
        ("ftp://127.0.0.1:8000", "127.0.0.1:8000"),
        ("https://evil.example", "127.0.0.1:8000"),
        ("", "127.0.0.1:8000"),
    ],
)
def test_other_origins_may_not(origin: str, host: str) -> None:
    assert not OriginRule.from_list("https://app.example").allows(origin, host)


def test_a_star_lets_any_origin_change_state() -> None:
    assert OriginRule.from_list("*").allows("null", "127.0.0.1:8000")


def test_a_refused_origin_says_what_to_set() -> None:
    with pytest.raises(PermissionDeniedError) as refused:
        OriginRule.from_list("").check("POST", "http://127.0.0.1:9999", "127.0.0.1:8000")
    assert refused.value.code == "origin_not_allowed"
    assert refused.value.message == (
        "a POST from the web page at 'http://127.0.0.1:9999' is refused: that origin is not "
        "this server's and ZEST_CORS_ORIGINS does not list it; to let that page call zest, "
        "add its origin to ZEST_CORS_ORIGINS on the server"
    )
    OriginRule.from_list("").check("POST", None, "127.0.0.1:8000")  # no Origin: not a page
