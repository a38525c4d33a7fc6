"""The routes file a command reads when none is given, and `zest init`."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from zest.gateway.cli import main
from zest.gateway.cli._init import packaged_routes, routes_file
from zest.router import load_routes

REPO = Path(__file__).resolve().parents[3]


def test_the_packaged_default_is_the_repositorys_routes_yaml() -> None:
    assert packaged_routes().read_text() == (REPO / "routes.yaml").read_text()
    assert set(load_routes(packaged_routes()).config.routes) == {
        "chat",
        "autocomplete",
        "summarization",
    }


def test_a_given_file_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "routes.yaml").write_text("")
    assert routes_file(Path("other.yaml")) == Path("other.yaml")


def test_then_the_current_folders_routes_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "routes.yaml").write_text("")
    assert routes_file(None) == Path("routes.yaml")
    assert caplog.records == []


def test_else_the_packaged_default_and_it_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="zest"):
        assert routes_file(None) == packaged_routes()
    assert caplog.messages == [
        "no routes file given (--routes, ZEST_ROUTES) and no ./routes.yaml: using the packaged "
        f"default {packaged_routes()} (`zest init` writes it out for editing)"
    ]


def test_init_writes_the_default_out_and_refuses_to_overwrite_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    assert (tmp_path / "routes.yaml").read_text() == packaged_routes().read_text()
    assert capsys.readouterr().out == (
        "wrote routes.yaml: edit it, then `zest check routes.yaml` and `zest serve`\n"
    )
    (tmp_path / "routes.yaml").write_text("# mine\n")
    assert main(["init"]) == 1
    assert capsys.readouterr().err == (
        "zest: routes.yaml already exists: pass --force to overwrite it\n"
    )
    assert (tmp_path / "routes.yaml").read_text() == "# mine\n"
    assert main(["init", "--force"]) == 0
    assert (tmp_path / "routes.yaml").read_text() == packaged_routes().read_text()


def test_init_into_a_folder_or_a_new_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", str(tmp_path)]) == 0
    assert (tmp_path / "routes.yaml").exists()
    target = tmp_path / "conf" / "tasks.yaml"
    assert main(["init", str(target)]) == 0
    assert target.read_text() == packaged_routes().read_text()
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"wrote {target}: edit it, then `zest check {target}` and `zest serve --routes {target}`"
    )
