"""cache:NAME sources: zest's own cache folder, found through ZEST_CACHE like the Makefile does."""

from __future__ import annotations

from pathlib import Path

import pytest

from zest.engines import resolve_source
from zest.errors import ModelFileMissingError


def test_a_cache_source_is_a_folder_under_zest_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZEST_CACHE", str(tmp_path))
    (tmp_path / "models" / "m").mkdir(parents=True)
    assert resolve_source("cache:m", Path("/elsewhere")) == tmp_path / "models" / "m"


def test_without_zest_cache_the_xdg_cache_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ZEST_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "zest" / "models" / "m").mkdir(parents=True)
    assert resolve_source("cache:m", Path("/elsewhere")) == tmp_path / "zest" / "models" / "m"


def test_a_missing_cache_entry_says_how_to_make_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZEST_CACHE", str(tmp_path))
    with pytest.raises(ModelFileMissingError) as info:
        resolve_source("cache:m", Path("/elsewhere"))
    assert str(info.value) == (
        f"model cache:m: not in zest's cache ({tmp_path}/models/m): `make onnx-model` "
        "(python -m zest.engines.convert) puts the bundled SmolLM2 ONNX model there; "
        "`zest models pull FILE_OR_URL --name m` puts others there, "
        "or point source at their folder"
    )
    assert info.value.code == "model_not_available"
