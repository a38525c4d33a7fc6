"""Fixtures shared by the suites: the real upstream and the proxy before it (engine and e2e),
and zest's cache folder as the test process sees it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.upstream import Proxy, Upstream, start_upstream, stop_upstream


def pytest_configure(config: pytest.Config) -> None:
    """The test process takes zest's cache folder from $ZEST_CACHE as zest's commands do (their
    Settings.cache), so that a test resolving cache: finds what the server it starts finds."""
    from zest.engines import use_zest_cache, zest_cache_of_environment

    use_zest_cache(zest_cache_of_environment())


@pytest.fixture
def keep_zest_cache() -> Iterator[None]:
    """A test may set zest's cache folder (use_zest_cache, Settings.cache): put it back after."""
    from zest.engines import _sources

    before = _sources._ZEST_CACHE.folder
    yield
    _sources.use_zest_cache(before)


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
