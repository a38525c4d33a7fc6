"""Structured outputs on llama.cpp: a job's response_format as a GBNF grammar, sampled per
sequence (the grammar sampler leads the sequence's chain, so only tokens that keep the output
valid JSON of the schema can be drawn, whatever the model's size).

The grammar is made and checked in a child process before the job is admitted
(engines/_grammar_check.py); the serving threads only ever parse a grammar that check passed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from zest.engines._base import GenerationJob
from zest.engines._grammar_check import GRAMMARS
from zest.errors import BadRequestError

__all__ = ["new_grammar_sampler", "with_checked_grammar"]

_ROOT = b"root"


async def with_checked_grammar(job: GenerationJob) -> GenerationJob:
    """`job` carrying the checked grammar of its response_format (itself for free text); a
    schema llama.cpp cannot constrain to is a 400 naming why, before anything is held."""
    constraint = job.response_format.constraint() if job.response_format else None
    if constraint is None or job.grammar is not None:
        return job
    return replace(job, grammar=await GRAMMARS.grammar(constraint))


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
