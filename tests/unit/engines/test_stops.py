"""Stop sequences across token boundaries: nothing of a stop sequence reaches the client."""

from __future__ import annotations

from zest.engines import StopMatcher


def run(stops: tuple[str, ...], pieces: list[str]) -> tuple[str, bool]:
    matcher = StopMatcher(stops)
    out = "".join(matcher.feed(p) for p in pieces)
    return out + matcher.flush(), matcher.stopped


def test_without_stops_everything_passes() -> None:
    assert run((), ["a", "b"]) == ("ab", False)


def test_a_stop_inside_one_piece() -> None:
    assert run(("END",), ["abcENDdef"]) == ("abc", True)


def test_a_stop_split_over_pieces_is_held_back_then_cut() -> None:
    matcher = StopMatcher(("\n\n",))
    assert matcher.feed("line\n") == "line"
    assert matcher.feed("\nmore") == ""
    assert matcher.stopped


def test_a_false_start_is_released() -> None:
    assert run(("END",), ["x E", "N", "d"]) == ("x ENd", False)


def test_held_text_is_released_at_the_end() -> None:
    assert run(("END",), ["abc", "EN"]) == ("abcEN", False)


def test_the_earliest_of_several_stops_wins() -> None:
    assert run(("b", "a"), ["xab"]) == ("x", True)


def test_nothing_after_a_stop() -> None:
    matcher = StopMatcher(("!",))
    matcher.feed("hi!")
    assert matcher.feed("more") == ""
    assert matcher.flush() == ""


def test_the_matcher_names_the_stop_that_ended_the_text() -> None:
    """Anthropic's stop_sequence says which of the request's stops ended the answer."""
    matcher = StopMatcher(("END", "\n\n", "STOP"))
    assert matcher.matched is None
    assert matcher.feed("abc\n") == "abc"
    assert matcher.feed("\nEND") == ""
    assert matcher.matched == "\n\n"  # it completed first
    ended = StopMatcher(("b", "ab"))
    assert ended.feed("xab") == "x"
    assert ended.matched == "ab"  # at equal ends, the longer stop
    never = StopMatcher(("END",))
    never.feed("abc")
    never.flush()
    assert never.matched is None
