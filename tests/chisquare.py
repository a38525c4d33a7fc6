"""Pearson's chi-square tests for the sampler's distribution tests: goodness of fit against an
exact distribution, and homogeneity of two samplers' draws.

The survival function of the chi-square distribution is exact for a whole number of degrees of
freedom (the closed forms of the regularized upper incomplete gamma function at k/2), so no
statistics library is needed for the one function the tests use.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Verdict", "chi2_sf", "goodness_of_fit", "homogeneity"]

# Expected counts below this are pooled into one bin: Pearson's statistic is only chi-square
# distributed when every bin expects a handful of draws.
MIN_EXPECTED = 5.0


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X chi-square distributed with `df` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if x <= 0:
        return 1.0
    half = x / 2
    if df % 2 == 0:  # exp(-x/2) * sum_{i < df/2} (x/2)^i / i!
        term = total = math.exp(-half)
        for i in range(1, df // 2):
            term *= half / i
            total += term
        return min(total, 1.0)
    # odd: erfc(sqrt(x/2)) + exp(-x/2) * sum_{i=1}^{(df-1)/2} (x/2)^(i-1/2) / Gamma(i+1/2)
    total = math.erfc(math.sqrt(half))
    term = math.exp(-half) * math.sqrt(half) / math.gamma(1.5)
    for i in range(1, (df - 1) // 2 + 1):
        if i > 1:
            term *= half / (i - 0.5)
        total += term
    return min(total, 1.0)


@dataclass(frozen=True)
class Verdict:
    statistic: float
    df: int
    p_value: float

    def __str__(self) -> str:
        return f"chi-square {self.statistic:.2f} on {self.df} df, p = {self.p_value:.2e}"


def goodness_of_fit(counts: Counter[int], probabilities: Mapping[int, float]) -> Verdict:
    """Pearson's test of `counts` (draws per token) against `probabilities` (the exact
    distribution). A draw outside the distribution's support is a ValueError: no statistic
    is needed to reject that."""
    outside = {token: n for token, n in counts.items() if probabilities.get(token, 0.0) <= 0}
    if outside:
        raise ValueError(f"drew tokens the exact distribution never gives: {outside}")
    draws = sum(counts.values())
    expected = {t: p * draws for t, p in probabilities.items() if p > 0}
    bins = _pooled(expected)
    statistic = sum(
        (sum(counts.get(t, 0) for t in group) - sum(expected[t] for t in group)) ** 2
        / sum(expected[t] for t in group)
        for group in bins
    )
    df = len(bins) - 1
    return Verdict(statistic, df, chi2_sf(statistic, df) if df else 1.0)


def homogeneity(first: Counter[int], second: Counter[int]) -> Verdict:
    """Pearson's test that two samplers' draws come from one distribution (a 2 x k table)."""
    n1, n2 = sum(first.values()), sum(second.values())
    pooled = {t: (first.get(t, 0) + second.get(t, 0)) / (n1 + n2) for t in {*first, *second}}
    bins = _pooled({t: p * min(n1, n2) for t, p in pooled.items()})
    statistic = 0.0
    for group in bins:
        share = sum(pooled[t] for t in group)
        for counts, n in ((first, n1), (second, n2)):
            observed, expected = sum(counts.get(t, 0) for t in group), share * n
            statistic += (observed - expected) ** 2 / expected
    df = len(bins) - 1
    return Verdict(statistic, df, chi2_sf(statistic, df) if df else 1.0)


def _pooled(expected: Mapping[int, float]) -> list[tuple[int, ...]]:
    """One bin per token expecting MIN_EXPECTED draws or more; the rest pooled in one bin
    (merged into the smallest bin if the pool itself expects too few)."""
    big = [(t,) for t, e in sorted(expected.items()) if e >= MIN_EXPECTED]
    small = tuple(t for t, e in sorted(expected.items()) if e < MIN_EXPECTED)
    if not small:
        return big
    if sum(expected[t] for t in small) >= MIN_EXPECTED or not big:
        return [*big, small]
    smallest = min(range(len(big)), key=lambda i: sum(expected[t] for t in big[i]))
    big[smallest] = big[smallest] + small
    return big
