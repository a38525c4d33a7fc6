"""Prompt lookup's drafts (pure): the tokens that followed the longest n-gram the history ends
with, bounded by the room left and by what recent drafts earned; and drawing that stops at the
first disagreement or the sequence's end."""

from __future__ import annotations

from zest.engines._base import GenerationJob
from zest.engines._output import SequenceOutput
from zest.engines._speculation import PromptLookup, take_tokens


def test_the_draft_is_what_followed_the_longest_match() -> None:
    lookup = PromptLookup([1, 2, 3, 4, 5, 9, 2, 3, 7], tokens=8, ngram=3)
    lookup.append(2)
    lookup.append(3)
    # "2 3" last followed by 7 (the latest occurrence wins); no 3-gram "x 2 3" matches "7 2 3".
    assert lookup.draft(8) == [7, 2, 3]
    lookup.append(4)  # "2 3 4" occurred at the start: 5, 9, 2, ... follow
    assert lookup.draft(3) == [5, 9, 2]


def test_no_match_of_two_tokens_or_more_drafts_nothing() -> None:
    lookup = PromptLookup([1, 2, 3], tokens=8, ngram=3)
    lookup.append(3)  # "3 3" never occurred; a lone "3" is not enough
    assert lookup.draft(8) == []
    assert PromptLookup([1, 2, 1, 2], tokens=8, ngram=3).draft(0) == []


def test_the_draft_grows_while_drafts_hold_and_shrinks_when_they_break() -> None:
    lookup = PromptLookup(list(range(50)) * 2, tokens=8, ngram=3)
    assert len(lookup.draft(8)) == 8
    lookup.record(8, 2)
    assert lookup.size == 3
    lookup.record(3, 3)
    assert lookup.size == 6
    lookup.record(6, 6)
    assert lookup.size == 8  # never past `tokens`


def output(max_tokens: int) -> SequenceOutput:
    job = GenerationJob.greedy((1,), max_tokens=max_tokens)
    return SequenceOutput(job, lambda t: f"<{t}>".encode(), lambda t: t == 0)


def test_drawing_keeps_the_draft_while_it_agrees() -> None:
    drawn = iter([5, 6, 9, 4])
    sent: list[str] = []
    taken = take_tokens(lambda _: next(drawn), output(10), 0, [5, 6, 7], sent.append)
    assert (taken.drawn, taken.matched, taken.token) == ((5, 6, 9), 2, 9)
    assert sent == ["<5>", "<6>", "<9>"]


def drawing(*tokens: int):  # type: ignore[no-untyped-def]
    """A sampler that draws `tokens` in turn, whatever the row."""
    pending = iter(tokens)
    return lambda _index: next(pending)


def test_a_whole_draft_earns_one_more_token_and_the_end_stops_drawing() -> None:
    whole = take_tokens(drawing(5, 6, 8), output(10), 0, [5, 6], lambda _: None)
    assert (whole.drawn, whole.matched) == ((5, 6, 8), 2)
    ended = take_tokens(drawing(5, 0, 7), output(10), 0, [5, 0, 7], lambda _: None)
    assert ended.drawn == (5, 0)  # the end-of-generation token ends it
    limited = output(2)
    capped = take_tokens(drawing(5, 6, 7), limited, 0, [5, 6, 7], lambda _: None)
    assert (capped.drawn, limited.finish) == ((5, 6), "length")
