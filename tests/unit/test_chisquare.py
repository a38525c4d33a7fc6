"""The chi-square helper of the sampler's distribution tests (tests/chisquare.py), against
tabulated critical values and simulated draws."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.chisquare import chi2_sf, goodness_of_fit, homogeneity


@pytest.mark.parametrize(
    ("x", "df", "p"),
    [
        (3.841459, 1, 0.05),
        (6.634897, 1, 0.01),
        (5.991465, 2, 0.05),
        (11.344867, 3, 0.01),
        (9.487729, 4, 0.05),
        (18.307038, 10, 0.05),
        (29.141238, 14, 0.01),
        (41.401065, 21, 0.005),  # odd df, into the tail
        (43.820196, 19, 0.001),
    ],
)
def test_the_survival_function_matches_the_tables(x: float, df: int, p: float) -> None:
    assert chi2_sf(x, df) == pytest.approx(p, rel=2e-3)


def test_the_survival_function_is_one_at_zero_and_refuses_no_degrees() -> None:
    assert chi2_sf(0.0, 3) == 1.0
    with pytest.raises(ValueError, match="degrees of freedom must be >= 1, got 0"):
        chi2_sf(1.0, 0)


def test_draws_of_the_distribution_pass_and_draws_of_another_fail() -> None:
    exact = {0: 0.5, 1: 0.3, 2: 0.15, 3: 0.05}
    rng = random.Random(5)
    right = Counter(rng.choices(list(exact), weights=list(exact.values()), k=4000))
    wrong = Counter(rng.choices(list(exact), weights=[0.4, 0.35, 0.2, 0.05], k=4000))
    assert goodness_of_fit(right, exact).p_value > 1e-3
    assert goodness_of_fit(wrong, exact).p_value < 1e-6
    assert homogeneity(right, wrong).p_value < 1e-6


def test_a_draw_outside_the_support_is_refused_outright() -> None:
    with pytest.raises(ValueError, match="drew tokens the exact distribution never gives"):
        goodness_of_fit(Counter({0: 10, 7: 1}), {0: 1.0})


def test_rare_tokens_are_pooled_into_one_bin() -> None:
    exact = {0: 0.9, 1: 0.098, 2: 0.001, 3: 0.001}
    verdict = goodness_of_fit(Counter({0: 900, 1: 98, 2: 1, 3: 1}), exact)
    assert verdict.df == 1  # {0}, {1, 2, 3}: the two rare tokens expect one draw each
