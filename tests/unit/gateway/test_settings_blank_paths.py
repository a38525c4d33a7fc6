"""A path variable set but empty (ZEST_ROUTES=, ZEST_API_KEYS_FILE=) is not given: the default
applies, as `zest models list` has always read it, instead of the current folder."""

from __future__ import annotations

import pytest

from zest.gateway.serving import Settings


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_path_variable_is_not_given(monkeypatch: pytest.MonkeyPatch, blank: str) -> None:
    monkeypatch.setenv("ZEST_ROUTES", blank)
    monkeypatch.setenv("ZEST_API_KEYS_FILE", blank)
    settings = Settings()
    assert (settings.routes, settings.api_keys_file) == (None, None)


def test_a_path_given_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEST_ROUTES", "examples/routes.yaml")
    assert str(Settings().routes) == "examples/routes.yaml"
