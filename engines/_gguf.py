"""A GGUF file's metadata, read without llama.cpp and without its tensors: what `zest check`
and a reload need to know about a model before anything loads (trained context, chat template,
the KV cache's size per token).

Only the header and the key/value section are read (mapped, not copied). A file that is not
GGUF, or whose header is cut short, is a clear error; a native parser is never asked to read a
file nobody has checked. `check_gguf_tensors` also reads the tensor table, to tell a file cut
short after its header (an interrupted download), or whose tensors are not where its header
says, without reading any weight.
"""

from __future__ import annotations

import math
import mmap
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["GgufError", "GgufFacts", "check_gguf_tensors", "read_gguf_facts", "read_gguf_metadata"]

_MAGIC = b"GGUF"
_STRING, _ARRAY = 8, 9
# Scalar value types: struct format by type id (GGUF v2/v3, little-endian).
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q"}
_SCALARS[12] = "d"
# Arrays of these are skipped, not decoded: tokenizer vocabularies hold ~10^5 entries.
_KEPT_ARRAYS = ("head_count_kv", "head_count")
# ggml tensor types: (elements per block, bytes per block), as ggml's type traits (the llama.cpp
# that llama-cpp-python 0.3.36 vendors). A type not listed (a newer one) is sized as no bytes and
# ends the check of the offsets: the check stays a lower bound, never a false alarm.
_TENSOR_TYPES = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
    15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18),
    21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4),
    27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66),
    39: (32, 17), 40: (64, 36), 41: (128, 18), 42: (64, 18),
}  # fmt: skip
_MAX_DIMS, _MAX_NAME = 4, 64  # GGML_MAX_DIMS, GGML_MAX_NAME (a name is shorter)
_DAMAGED = "the file is damaged (llama.cpp would refuse it): fetch it again"
_DEFAULT_ALIGNMENT = 32  # of the tensor data, unless general.alignment says otherwise


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
    with _mapped(path) as data:
        return _parse(data)[0]


def check_gguf_tensors(path: Path) -> None:
    """Raise GgufError when the file's tensors are not where its header says, as llama.cpp's
    GGUF reader and model loader check them, without reading any weight: each entry of the
    tensor table well formed (a name under 64 bytes and given once, at most 4 dimensions,
    none negative, rows of whole blocks), each tensor's data right after the one before it
    (padded to the alignment), and all of it inside the file: a file cut short after its
    header (an interrupted download) reads as a model, but cannot load."""
    with _mapped(path) as data:
        metadata, reader, count = _parse(data)
        alignment = _alignment(metadata)
        tensors = _tensor_table(reader, count)
        start = -(-reader.at // alignment) * alignment  # the data section, aligned
        end = 0
        expected_at: int | None = 0  # where the next tensor starts (None: not known)
        for tensor in tensors:
            size = tensor.size
            end = max(end, tensor.offset + (size or 0))
            if expected_at is None:
                continue  # after a type of unknown size: the bound alone
            if tensor.offset != expected_at:
                raise GgufError(
                    f"tensor {tensor.name!r} starts at byte {tensor.offset:,} of the data, "
                    f"where the tensors before it end at byte {expected_at:,}: {_DAMAGED}"
                )
            expected_at = None if size is None else expected_at + -(-size // alignment) * alignment
        if start + end > len(data):
            raise GgufError(
                f"the file is cut short: its {count} tensors end at byte {start + end:,} but it "
                f"holds {len(data):,} bytes (an interrupted download?): fetch it again"
            )


@dataclass(frozen=True)
class _Tensor:
    name: str
    offset: int  # from the start of the data section
    size: int | None  # bytes; None: a type this table does not know


def _alignment(metadata: dict[str, Any]) -> int:
    alignment = metadata.get("general.alignment", _DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise GgufError(f"general.alignment {alignment!r} is not a power of 2: {_DAMAGED}")
    return alignment


def _tensor_table(reader: _Reader, count: int) -> list[_Tensor]:
    """The tensor table's entries, each checked as llama.cpp's reader checks it."""
    tensors, seen = [], set()
    for number in range(count):
        name = reader.string()
        if len(name.encode("utf-8", "surrogateescape")) >= _MAX_NAME:
            raise GgufError(f"tensor {number} has a name of {_MAX_NAME} bytes or more: {_DAMAGED}")
        if name in seen:
            raise GgufError(f"tensor {name!r} is listed twice: {_DAMAGED}")
        seen.add(name)
        dims = reader.unpack("I")
        if dims > _MAX_DIMS:
            raise GgufError(f"tensor {name!r} has {dims} dimensions (at most 4): {_DAMAGED}")
        shape = [reader.unpack("q") for _ in range(dims)]
        if any(n < 0 for n in shape) or math.prod(shape) >= 2**63:
            raise GgufError(f"tensor {name!r} has a shape of {shape} elements: {_DAMAGED}")
        kind, offset = reader.unpack("I"), reader.unpack("Q")
        tensors.append(_Tensor(name, offset, _size(name, kind, shape)))
    return tensors


def _size(name: str, kind: int, shape: list[int]) -> int | None:
    """A tensor's bytes (None: a type not in the table); GgufError when its rows are not whole
    blocks of its type."""
    if kind not in _TENSOR_TYPES:
        return None
    per_block, block_bytes = _TENSOR_TYPES[kind]
    row = shape[0] if shape else 1
    if row % per_block:
        raise GgufError(
            f"tensor {name!r} has rows of {row} elements, not whole blocks of {per_block} (its "
            f"type, {kind}): {_DAMAGED}"
        )
    return math.prod(shape) // per_block * block_bytes


def _mapped(path: Path) -> mmap.mmap:
    with path.open("rb") as file:
        try:
            return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            raise GgufError("the file is empty, not a GGUF model") from None


def _parse(data: mmap.mmap | bytes) -> tuple[dict[str, Any], _Reader, int]:
    """The metadata, a reader at the tensor table that follows it, and the tensor count."""
    if bytes(data[:4]) != _MAGIC:
        raise GgufError("the file does not start with GGUF's magic bytes: it is not a GGUF model")
    reader = _Reader(data)
    reader.at = 4
    version = reader.unpack("I")
    if version not in (2, 3):
        raise GgufError(f"GGUF version {version} is not one llama.cpp reads (2 or 3)")
    tensors = reader.unpack("Q")
    metadata: dict[str, Any] = {}
    for _ in range(reader.unpack("Q")):
        key = reader.string()
        keep = key.endswith(_KEPT_ARRAYS) or not key.startswith("tokenizer.ggml.")
        metadata[key] = reader.value(reader.unpack("I"), keep)
    return metadata, reader, tensors


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
