"""Structured outputs on llama.cpp: a job's response_format as a GBNF grammar, sampled per
sequence (the grammar sampler leads the sequence's chain, so only tokens that keep the output
valid JSON of the schema can be drawn, whatever the model's size)."""

from __future__ import annotations

import functools
import json
from typing import Any

from zest.engines._base import GenerationJob
from zest.errors import BadRequestError, clipped, shown

__all__ = ["check_grammar", "grammar_of", "new_grammar_sampler"]

_ROOT = b"root"
_LOOSE_CHAR = 'char ::= [^"\\\\] |'
_JSON_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |'


def check_grammar(job: GenerationJob, lib: Any, vocab: Any) -> None:
    """Refuse, before the job is admitted, a response_format llama.cpp cannot constrain to."""
    grammar = grammar_of(job)
    if grammar is not None:  # parsed once here, on the caller's thread: a 400 holds nothing
        lib.llama_sampler_free(new_grammar_sampler(lib, vocab, grammar))


def grammar_of(job: GenerationJob) -> str | None:
    """The GBNF of the job's response_format (None: free text); a schema llama.cpp cannot
    constrain to is a 400 naming what it could not take."""
    constraint = job.response_format.constraint() if job.response_format else None
    if constraint is None:
        return None
    schema = json.dumps(constraint, sort_keys=True)
    try:
        grammar = _gbnf(schema)
    except (AssertionError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise BadRequestError(
            f"response_format: llama.cpp cannot constrain the output to this JSON Schema "
            f"({_reason(exc)}): remove or simplify that part of the schema",
            param="response_format",
        ) from exc
    return grammar


def _reason(exc: Exception) -> str:
    """What the converter could not take, in words (never the name of its exception)."""
    if isinstance(exc, RecursionError):
        return "it nests too deeply"
    if isinstance(exc, KeyError) and exc.args:
        return f"a part lacks {shown(exc.args[0])}"
    return clipped(str(exc), 200) or "a part it does not support"


@functools.lru_cache(maxsize=64)
def _gbnf(schema: str) -> str:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    grammar = str(json_schema_to_gbnf(schema))
    # The converter's string character admits control characters, which JSON forbids raw in
    # strings (json.loads refuses a newline inside one): exclude them as llama.cpp's json.gbnf.
    return grammar.replace(_LOOSE_CHAR, _JSON_CHAR)


def new_grammar_sampler(lib: Any, vocab: Any, grammar: str) -> Any:
    """A grammar sampler to lead a sequence's chain. llama.cpp answers NULL, never an
    exception, for a grammar it cannot parse."""
    sampler = lib.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), _ROOT)
    if not sampler:
        raise BadRequestError(
            "response_format: llama.cpp could not parse the grammar made of this JSON Schema: "
            "simplify the schema",
            param="response_format",
        )
    return sampler
