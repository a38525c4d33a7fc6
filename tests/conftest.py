"""Fixtures shared by the engine and e2e suites: the real upstream and the proxy before it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.upstream import Proxy, Upstream, start_upstream, stop_upstream


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    """llama_cpp.server serving the bundled SmolLM2 (n_ctx 2048) on a free loopback port."""
    running = start_upstream(tmp_path_factory.mktemp("upstream") / "llama_cpp.server.log")
    yield running
    stop_upstream(running)


@pytest.fixture(scope="session")
def upstream_proxy(upstream: Upstream) -> Iterator[Proxy]:
    """The counting proxy in front of the upstream, for the whole session."""
    running = Proxy(upstream.v1)
    running.start()
    yield running
    running.stop()


@pytest.fixture
def proxy(upstream_proxy: Proxy) -> Iterator[Proxy]:
    """The proxy with its counts cleared and its default (forwarding) behaviour."""
    upstream_proxy.reset()
    yield upstream_proxy
    upstream_proxy.reset()
