"""routes.yaml pins: `sha256:` (a model's digest) and `revision:` (hf: sources only)."""

from __future__ import annotations

import pytest

from zest.errors import ConfigError
from zest.router import RemoteModel, parse_routes

DIGEST = "0123456789abcdef" * 4
ROUTES = """\
version: 1
models:
  smollm2: {engine: llamacpp, source: SOURCE, PIN}
  onnx: {engine: onnx-genai, source: cache:m, sha256: DIGEST}
routes:
  chat: {kind: chat, model: smollm2}
""".replace("DIGEST", DIGEST.upper())


def parsed(pin: str, source: str = "m.gguf") -> dict[str, object]:
    config = parse_routes(ROUTES.replace("SOURCE", source).replace("PIN", pin), "routes.yaml")
    local = {m: model for m, model in config.models.items() if not isinstance(model, RemoteModel)}
    return {m: (model.sha256, model.revision) for m, model in local.items()}


def problems(pin: str, source: str = "m.gguf") -> list[str]:
    with pytest.raises(ConfigError) as info:
        parsed(pin, source)
    return info.value.problems


def test_a_pin_is_kept_in_lower_case_on_file_and_folder_models() -> None:
    assert parsed(f"sha256: {DIGEST}") == {"smollm2": (DIGEST, None), "onnx": (DIGEST, None)}


def test_an_hf_source_takes_a_revision_beside_its_pin() -> None:
    found = parsed(f"sha256: {DIGEST}, revision: v1.2", source="hf:org/repo/m.gguf")
    assert found["smollm2"] == (DIGEST, "v1.2")


@pytest.mark.parametrize(
    "digest",
    [DIGEST[:-1], DIGEST + "0", DIGEST[:-1] + "g", "sha256:" + DIGEST[7:], "''"],
)
def test_a_pin_that_is_not_64_hex_digits_names_key_and_fix(digest: str) -> None:
    value = "" if digest == "''" else digest
    assert problems(f"sha256: {digest}") == [
        f"routes.yaml: models.smollm2.sha256: {value!r} is not a SHA-256 ({len(value)} "
        "characters): write the 64 hex digits that `sha256sum FILE` prints for the model "
        "file (`zest models list` shows them), or remove the key"
    ]


def test_a_pin_yaml_reads_as_a_number_says_to_quote_it() -> None:
    digits = "1" * 64
    assert problems(f"sha256: {digits}") == [
        f"routes.yaml: models.smollm2.sha256: sha256 must be text, got {int(digits)}: write the "
        "64 hex digits in quotes (sha256: '…')"
    ]
    assert parsed(f"sha256: '{digits}'")["smollm2"] == (digits, None)


def test_a_revision_on_a_path_source_says_to_remove_it() -> None:
    assert problems(f"sha256: {DIGEST}, revision: v1") == [
        "routes.yaml: models.smollm2.revision: revision is for hf:ORG/REPO/FILE sources, and "
        "source is 'm.gguf': remove revision"
    ]
