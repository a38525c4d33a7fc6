"""Properties of stop matching: the same answer whatever the chunk boundaries of the text."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from zest.engines import StopMatcher

FAST = settings(max_examples=200, deadline=None)

ALPHABET = "ab\n"
stop = st.text(alphabet=ALPHABET, min_size=1, max_size=4)
stops = st.lists(stop, min_size=0, max_size=3, unique=True).map(tuple)
text = st.text(alphabet=ALPHABET, max_size=40)


def run(stops: tuple[str, ...], pieces: list[str]) -> tuple[str, bool]:
    matcher = StopMatcher(stops)
    out = "".join(matcher.feed(piece) for piece in pieces)
    return out + matcher.flush(), matcher.stopped


def expected(stops: tuple[str, ...], text: str) -> tuple[str, bool]:
    """The text up to the stop that completes first as the text is generated, and whether
    there was one. Written independently of StopMatcher: grow the text one character at a
    time and stop at the first prefix that ends with a stop sequence."""
    for end in range(1, len(text) + 1):
        ending = [s for s in stops if text[:end].endswith(s)]
        if ending:
            return text[: end - len(max(ending, key=len))], True
    return text, False


@st.composite
def chunked(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A text and one way to cut it into pieces (empty pieces included)."""
    whole = draw(text)
    cuts = sorted(draw(st.lists(st.integers(min_value=0, max_value=len(whole)), max_size=12)))
    bounds = [0, *cuts, len(whole)]
    return whole, [whole[a:b] for a, b in itertools.pairwise(bounds)]


@FAST
@given(stops, chunked())
def test_any_chunking_gives_the_text_up_to_the_first_stop(
    stops: tuple[str, ...], case: tuple[str, list[str]]
) -> None:
    # One stop inside another ("b" in "abc") included: the first to complete wins.
    whole, pieces = case
    assert run(stops, pieces) == expected(stops, whole)


@FAST
@given(stops, chunked())
def test_nothing_of_a_stop_reaches_the_client_whatever_the_stops(
    stops: tuple[str, ...], case: tuple[str, list[str]]
) -> None:
    whole, pieces = case
    matcher = StopMatcher(stops)
    sent = ""
    for piece in pieces:
        sent += matcher.feed(piece)
        assert whole.startswith(sent)
        assert not any(s in sent for s in stops)
    sent += matcher.flush()
    assert whole.startswith(sent)
    assert not any(s in sent for s in stops)
    assert matcher.stopped == any(s in whole for s in stops)
    if not matcher.stopped:
        assert sent == whole


@FAST
@given(stops, text)
def test_one_piece_and_one_character_at_a_time_agree(stops: tuple[str, ...], whole: str) -> None:
    assert run(stops, [whole]) == run(stops, list(whole))


def test_a_stop_inside_another_is_decided_when_it_completes_whatever_the_chunks() -> None:
    assert run(("abc", "b"), ["abc"]) == run(("abc", "b"), ["ab", "c"]) == ("a", True)
