"""Where a setting comes from, in one place (Settings' sources): a flag given (or an argument in
code) over its ZEST_ variable over the default; nothing else is read (no .env file). zest's cache
folder reaches the engines from the settings, never from the engines reading ZEST_CACHE."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.gateway.test_readiness import runtime
from zest.engines import zest_cache_dir
from zest.errors import ConfigError
from zest.gateway.cli._settings import settings_from
from zest.gateway.http import create_app
from zest.gateway.serving import Settings

# create_app's handlers infer their dependencies (Litestar 2 warns of its 3.0).
pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)


@pytest.mark.parametrize(
    ("flag", "variable", "port"),
    [
        (9001, "9000", 9001),  # the flag over the variable
        (None, "9000", 9000),  # the variable over the default
        (None, None, 8000),  # the default
        (9001, None, 9001),
    ],
)
def test_a_flag_wins_over_its_variable_which_wins_over_the_default(
    monkeypatch: pytest.MonkeyPatch, flag: int | None, variable: str | None, port: int
) -> None:
    monkeypatch.delenv("ZEST_PORT", raising=False)
    if variable is not None:
        monkeypatch.setenv("ZEST_PORT", variable)
    assert settings_from(port=flag).port == port


def test_an_argument_in_code_wins_over_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEST_PRIVACY", "strict")
    assert Settings(privacy="standard").privacy == "standard"
    assert Settings().privacy == "strict"


def test_no_dotenv_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZEST_PORT", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("ZEST_PORT=9999\n")
    assert Settings().port == 8000


def test_a_bad_variable_is_named_with_its_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEST_PORT", "abc")
    with pytest.raises(ConfigError) as info:
        settings_from()
    assert info.value.problems == [
        "ZEST_PORT (or its flag): input should be a valid integer, unable to parse string as an "
        "integer, got 'abc'"
    ]


@pytest.mark.usefixtures("keep_zest_cache")
def test_the_commands_hand_zest_cache_to_the_engines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZEST_CACHE", str(tmp_path))
    assert settings_from().cache == tmp_path
    assert zest_cache_dir() == tmp_path


@pytest.mark.usefixtures("keep_zest_cache")
def test_create_app_hands_the_cache_setting_in_code_to_the_engines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZEST_CACHE", str(tmp_path / "variable"))
    create_app(runtime(strict=False), Settings(cache=tmp_path / "code"))
    assert zest_cache_dir() == tmp_path / "code"
