"""Properties of keep_alive durations and Retry-After: round-trips, and garbage is a ValueError."""

from __future__ import annotations

import email.utils
import math
import time
from decimal import Decimal

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zest.engines._remote import _retry_after, retry_delay
from zest.router import RemoteModel
from zest.router._schema import parse_duration

FAST = settings(max_examples=200, deadline=None)
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}

amount = st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False, allow_infinity=False)


@FAST
@given(amount, st.sampled_from(sorted(UNITS)), st.sampled_from(["", " "]))
def test_a_written_duration_reads_back_as_its_seconds(value: object, unit: str, pad: str) -> None:
    written = f"{pad}{value}{pad}{unit}{pad}"
    seconds = parse_duration(written)
    assert seconds is not None
    assert math.isclose(seconds, float(str(value)) * UNITS[unit], rel_tol=1e-12)
    # and back: the seconds written out in full (no exponent) read the same
    assert parse_duration(f"{Decimal(seconds):f}s") == seconds


@FAST
@given(st.integers(min_value=0, max_value=10**9) | st.floats(min_value=0, max_value=1e9))
def test_a_number_is_seconds(value: float) -> None:
    assert parse_duration(value) == float(value)


@pytest.mark.parametrize("value", [None, -1, "forever"])
def test_never_unload(value: object) -> None:
    assert parse_duration(value) is None


@FAST
@given(
    st.text(max_size=12)
    | st.binary(max_size=8)
    | st.booleans()
    | st.integers(max_value=-2)
    | st.floats(max_value=-1e-9)
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=2), st.integers(), max_size=1)
)
def test_anything_else_is_a_value_error_never_another_exception(value: object) -> None:
    try:
        parsed = parse_duration(value)
    except ValueError as exc:
        error: ValueError | None = exc
    else:
        error = None
        # What is accepted is a finite, non-negative number of seconds (or None: never).
        assert parsed is None or (math.isfinite(parsed) and parsed >= 0)
    if error is not None:
        assert "keep_alive" in str(error)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_not_a_finite_number_is_refused(value: float) -> None:
    with pytest.raises(ValueError, match="keep_alive"):
        parse_duration(value)


# Retry-After (RFC 9110 §10.2.3): delay-seconds or an HTTP-date; the remote engine honours it.
CONFIG = RemoteModel(engine="remote", base_url="http://127.0.0.1:9/v1", model="m")


@FAST
@given(st.integers(min_value=0, max_value=10**6))
def test_retry_after_in_seconds(seconds: int) -> None:
    assert _retry_after(str(seconds)) == float(seconds)


@FAST
@given(st.integers(min_value=5, max_value=86_400))
def test_retry_after_as_an_http_date_is_the_seconds_until_then(ahead: int) -> None:
    header = email.utils.formatdate(time.time() + ahead, usegmt=True)
    delay = _retry_after(header)
    assert delay is not None
    # formatdate drops the fraction of a second, and the clock moves on while the test runs
    assert ahead - 2 <= delay <= ahead


@FAST
@given(st.integers(min_value=1, max_value=10**8))
def test_retry_after_in_the_past_is_now(ago: int) -> None:
    assert _retry_after(email.utils.formatdate(time.time() - ago, usegmt=True)) == 0.0


@FAST
@given(st.none() | st.text(max_size=40), st.integers(min_value=0, max_value=5))
def test_whatever_the_header_the_wait_is_bounded_and_nothing_raises(
    value: str | None, attempt: int
) -> None:
    headers = [] if value is None else [(b"Retry-After", value.encode("utf-8", "replace"))]
    response = httpx.Response(503, headers=headers)
    delay = retry_delay(response, attempt, CONFIG)
    assert delay is None or 0 <= delay <= CONFIG.max_retry_wait_s


@FAST
@given(st.integers(min_value=0, max_value=600))
def test_a_retry_after_within_the_wait_limit_is_waited_for_exactly(seconds: int) -> None:
    response = httpx.Response(429, headers={"Retry-After": str(seconds)})
    expected = float(seconds) if seconds <= CONFIG.max_retry_wait_s else None
    assert retry_delay(response, 0, CONFIG) == expected
