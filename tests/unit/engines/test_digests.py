"""Model digests: a file's SHA-256, a folder's manifest, the cache by path, size and mtime, and
the check of a routes.yaml pin (files written here, in a temporary folder)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from zest.engines import DigestCache, ModelDigest, model_location, verify_model
from zest.engines._digests import model_sha256
from zest.errors import ModelDigestMismatchError
from zest.router import LlamaCppModel, OnnxGenaiModel, RemoteModel


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def cache(tmp_path: Path) -> DigestCache:
    return DigestCache(tmp_path / "cache" / "digests.json")


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + bytes(range(256)) * 9000)  # a little over 2 MiB: three chunks
    return path


def rewrite_keeping_size_and_mtime(path: Path, data: bytes) -> None:
    """New bytes under the same size and mtime: only a cache hit still answers the old digest."""
    before = path.stat()
    assert len(data) == before.st_size
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_file_digest_is_its_sha256_and_is_recorded(model: Path, cache: DigestCache) -> None:
    assert cache.sha256(model) == sha256(model.read_bytes())
    stat = model.stat()
    assert json.loads(cache.path.read_text()) == {
        str(model.resolve()): {
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
            "sha256": sha256(model.read_bytes()),
        }
    }


def test_an_unchanged_size_and_mtime_is_a_hit_across_restarts(
    model: Path, cache: DigestCache
) -> None:
    first = cache.sha256(model)
    rewrite_keeping_size_and_mtime(model, bytes(model.stat().st_size))
    assert DigestCache(cache.path).sha256(model) == first  # a new process: the file's entry


def test_a_changed_mtime_reads_the_file_again(model: Path, cache: DigestCache) -> None:
    first = cache.sha256(model)
    rewrite_keeping_size_and_mtime(model, bytes(model.stat().st_size))
    stat = model.stat()
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert cache.sha256(model) == sha256(bytes(stat.st_size)) != first


def test_a_changed_size_reads_the_file_again(model: Path, cache: DigestCache) -> None:
    cache.sha256(model)
    stat = model.stat()
    model.write_bytes(b"GGUF")
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime, other size
    assert cache.sha256(model) == sha256(b"GGUF")


def test_a_symlink_is_cached_as_the_file_it_points_to(
    model: Path, cache: DigestCache, tmp_path: Path
) -> None:
    link = tmp_path / "link.gguf"
    link.symlink_to(model)
    assert cache.sha256(link) == cache.sha256(model)
    assert list(json.loads(cache.path.read_text())) == [str(model.resolve())]


def test_a_damaged_cache_file_is_read_as_empty_and_replaced(
    model: Path, cache: DigestCache
) -> None:
    cache.path.parent.mkdir()
    cache.path.write_text("{not json")
    assert cache.sha256(model) == sha256(model.read_bytes())
    assert list(json.loads(cache.path.read_text())) == [str(model.resolve())]


def test_entries_of_files_gone_are_dropped(model: Path, cache: DigestCache, tmp_path: Path) -> None:
    other = tmp_path / "other.gguf"
    other.write_bytes(b"other")
    cache.sha256(other)
    other.unlink()
    cache.sha256(model)
    assert list(json.loads(cache.path.read_text())) == [str(model.resolve())]


def test_an_unwritable_cache_still_answers(
    model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    cache = DigestCache(blocked / "digests.json")
    assert cache.sha256(model) == sha256(model.read_bytes())
    assert "digests are not kept" in caplog.text


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An onnx-genai-like model folder, with a subfolder and a symlinked file."""
    root = tmp_path / "onnx"
    (root / "sub").mkdir(parents=True)
    (root / "genai_config.json").write_text('{"model": {}}')
    (root / "model.onnx").write_bytes(b"weights" * 1000)
    (root / "sub" / "tokenizer.json").write_text("{}")
    (tmp_path / "outside.data").write_bytes(b"data")
    (root / "model.onnx.data").symlink_to(tmp_path / "outside.data")
    return root


def test_a_folder_digest_is_the_sha256_of_its_sorted_manifest(
    folder: Path, cache: DigestCache
) -> None:
    names = ["genai_config.json", "model.onnx", "model.onnx.data", "sub/tokenizer.json"]
    manifest = "".join(f"{sha256((folder / n).read_bytes())}  {n}\n" for n in names)
    assert model_sha256(folder, cache) == sha256(manifest.encode())


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs GNU coreutils")
def test_a_folder_digest_is_what_the_documented_shell_line_prints(
    folder: Path, cache: DigestCache
) -> None:
    line = "find -L . -type f -printf '%P\\0' | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum"
    printed = subprocess.run(
        line, shell=True, cwd=folder, capture_output=True, text=True, check=True
    ).stdout
    assert printed.split()[0] == model_sha256(folder, cache)


def test_a_folder_model_whose_source_names_its_config_is_the_folder(
    folder: Path, tmp_path: Path
) -> None:
    config = OnnxGenaiModel(engine="onnx-genai", source=str(folder / "genai_config.json"))
    assert model_location(config, tmp_path) == folder
    gguf = LlamaCppModel(engine="llamacpp", source="onnx/genai_config.json")
    assert model_location(gguf, tmp_path) == folder / "genai_config.json"


def pinned(source: Path, digest: str | None) -> LlamaCppModel:
    return LlamaCppModel(engine="llamacpp", source=str(source), sha256=digest)


def test_a_matching_pin_is_verified(model: Path, cache: DigestCache) -> None:
    digest = sha256(model.read_bytes())
    found = verify_model("m", pinned(model, digest.upper()), model.parent, cache)
    assert found == ModelDigest(digest, pinned=True)


def test_an_unpinned_model_gets_its_digest_too(model: Path, cache: DigestCache) -> None:
    found = verify_model("m", pinned(model, None), model.parent, cache)
    assert found == ModelDigest(sha256(model.read_bytes()), pinned=False)


def test_a_wrong_pin_is_refused_with_both_digests(model: Path, cache: DigestCache) -> None:
    actual, wrong = sha256(model.read_bytes()), "0" * 64
    with pytest.raises(ModelDigestMismatchError) as info:
        verify_model("m", pinned(model, wrong), model.parent, cache)
    assert str(info.value) == (
        f"model 'm': {model} is not the pinned model: expected sha256 {wrong}, the file has "
        f"{actual}: re-download the model, or fix models.m.sha256"
    )
    assert (info.value.status_code, info.value.code) == (503, "model_digest_mismatch")
    assert (info.value.expected, info.value.actual) == (wrong, actual)


def test_a_file_replaced_after_verifying_is_refused(model: Path, cache: DigestCache) -> None:
    """The cache does not hide a new file: its mtime changed, so it is read again."""
    config = pinned(model, sha256(model.read_bytes()))
    verify_model("m", config, model.parent, cache)
    model.write_bytes(b"GGUF another model")
    with pytest.raises(ModelDigestMismatchError):
        verify_model("m", config, model.parent, cache)


def test_a_remote_model_has_no_digest(cache: DigestCache) -> None:
    remote = RemoteModel(engine="remote", base_url="http://127.0.0.1:9/v1", model="m")
    assert verify_model("up", remote, Path("/"), cache) is None


MAIN, V1 = "a" * 40, "b" * 40


def test_a_pinned_hf_source_is_checked_at_its_revision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: DigestCache
) -> None:
    """huggingface_hub's cache laid out by hand: refs/v1 names the snapshot the pin covers."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    repo = tmp_path / "models--org--repo"
    (repo / "refs").mkdir(parents=True)
    for ref, commit in (("main", MAIN), ("v1", V1)):
        (repo / "refs" / ref).write_text(commit)
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "m.gguf").write_bytes(f"GGUF {ref}".encode())
    config = LlamaCppModel(
        engine="llamacpp", source="hf:org/repo/m.gguf", revision="v1", sha256=sha256(b"GGUF v1")
    )
    assert verify_model("m", config, tmp_path, cache) == ModelDigest(sha256(b"GGUF v1"), True)
    on_main = config.model_copy(update={"revision": None})
    with pytest.raises(ModelDigestMismatchError, match=f"the file has {sha256(b'GGUF main')}"):
        verify_model("m", on_main, tmp_path, cache)
