"""A GGUF file's metadata, read without llama.cpp and without its tensors: what `zest check`
and a reload need to know about a model before anything loads (trained context, chat template,
the KV cache's size per token).

Only the header and the key/value section are read (mapped, not copied). A file that is not
GGUF, or whose header is cut short, is a clear error; a native parser is never asked to read a
file nobody has checked.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["GgufError", "GgufFacts", "read_gguf_facts", "read_gguf_metadata"]

_MAGIC = b"GGUF"
_STRING, _ARRAY = 8, 9
# Scalar value types: struct format by type id (GGUF v2/v3, little-endian).
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q"}
_SCALARS[12] = "d"
# Arrays of these are skipped, not decoded: tokenizer vocabularies hold ~10^5 entries.
_KEPT_ARRAYS = ("head_count_kv", "head_count")


class GgufError(ValueError):
    """The file is not a GGUF model zest can read."""


@dataclass(frozen=True)
class GgufFacts:
    """What a GGUF model declares, for checks made before it loads."""

    architecture: str
    context_length: int | None  # the context the model was trained on (n_ctx_train)
    has_chat_template: bool
    # Bytes of f16 K and V per token of context, all layers (None: the header does not say).
    kv_bytes_per_token_f16: int | None
    embeds: bool  # declares a pooling type: an embedding model

    def kv_bytes(self, cells: int, bytes_per_element: float) -> int | None:
        """The KV cache of `cells` tokens at `bytes_per_element` (2.0 for f16)."""
        if self.kv_bytes_per_token_f16 is None:
            return None
        return int(self.kv_bytes_per_token_f16 / 2 * bytes_per_element * cells)


class _Reader:
    def __init__(self, data: mmap.mmap | bytes) -> None:
        self.data, self.at = data, 0

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise GgufError("the file ends inside its header: it is cut short or not GGUF")
        (value,) = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += size
        return value

    def string(self) -> str:
        length = self.unpack("Q")
        if self.at + length > len(self.data):
            raise GgufError("the file ends inside its header: it is cut short or not GGUF")
        raw = bytes(self.data[self.at : self.at + length])
        self.at += length
        return raw.decode("utf-8", "replace")

    def skip_string(self) -> None:
        length = self.unpack("Q")  # read first: `self.at += ...` would load `at` before it moves
        self.at += length

    def value(self, kind: int, keep: bool) -> Any:
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            return self._array(keep)
        if kind not in _SCALARS:
            raise GgufError(f"unknown GGUF value type {kind}: the file is damaged or newer")
        return self.unpack(_SCALARS[kind])

    def _array(self, keep: bool) -> list[Any] | None:
        kind, count = self.unpack("I"), self.unpack("Q")
        if kind in _SCALARS and not keep:
            self.at += struct.calcsize(_SCALARS[kind]) * count
            return None
        step: Callable[[], Any] = (
            self.skip_string if kind == _STRING and not keep else (lambda: self.value(kind, keep))
        )
        values = [step() for _ in range(count)]
        return values if keep else None


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """The key/value metadata of a GGUF file (large arrays are left out as None)."""
    with path.open("rb") as file:
        try:
            data = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            raise GgufError("the file is empty, not a GGUF model") from None
    with data:
        return _parse(data)


def _parse(data: mmap.mmap | bytes) -> dict[str, Any]:
    if bytes(data[:4]) != _MAGIC:
        raise GgufError("the file does not start with GGUF's magic bytes: it is not a GGUF model")
    reader = _Reader(data)
    reader.at = 4
    version = reader.unpack("I")
    if version not in (2, 3):
        raise GgufError(f"GGUF version {version} is not one llama.cpp reads (2 or 3)")
    reader.unpack("Q")  # tensor count
    metadata: dict[str, Any] = {}
    for _ in range(reader.unpack("Q")):
        key = reader.string()
        keep = key.endswith(_KEPT_ARRAYS) or not key.startswith("tokenizer.ggml.")
        metadata[key] = reader.value(reader.unpack("I"), keep)
    return metadata


def read_gguf_facts(path: Path) -> GgufFacts:
    """The facts checks need, from the file's metadata."""
    return facts_of(read_gguf_metadata(path))


def facts_of(metadata: dict[str, Any]) -> GgufFacts:
    arch = str(metadata.get("general.architecture", ""))

    def number(key: str) -> int | None:
        value = metadata.get(f"{arch}.{key}")
        if isinstance(value, list):  # per-layer values: the largest bounds the cache
            value = max(value, default=None)
        return int(value) if isinstance(value, int | float) else None

    return GgufFacts(
        architecture=arch,
        context_length=number("context_length"),
        has_chat_template=bool(metadata.get("tokenizer.chat_template")),
        kv_bytes_per_token_f16=_kv_bytes_per_token(number),
        embeds=number("pooling_type") not in (None, 0),
    )


def _kv_bytes_per_token(number: Callable[[str], int | None]) -> int | None:
    layers, width, heads = (
        number("block_count"),
        number("embedding_length"),
        number("attention.head_count"),
    )
    if not (layers and width and heads):
        return None
    heads_kv = number("attention.head_count_kv") or heads
    key_length = number("attention.key_length") or width // heads
    value_length = number("attention.value_length") or width // heads
    return layers * heads_kv * (key_length + value_length) * 2
