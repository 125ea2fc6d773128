"""p_eff (paper Eq. 2) against brute-force Beta-Binomial enumeration and numerical integration."""

import math

import numpy as np
import pytest
from scipy import integrate, stats

from sara_trl.allocation import abandon_point_uniform, decide, p_eff
from sara_trl.allocation.types import ABANDON, CONTINUE


def _log_beta(a, b):
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def brute_force_p_eff(n, s, k, a, b):
    """Sum the Beta-Binomial predictive over every number j of future successes; mixed iff 0 < s + j < k."""
    r = k - n
    total = 0.0
    for j in range(r + 1):
        if 0 < s + j < k:
            total += math.comb(r, j) * math.exp(_log_beta(a + s + j, b + n - s + r - j) - _log_beta(a + s, b + n - s))
    return total


PRIORS = [(1.0, 1.0), (0.5, 0.5), (2.0, 5.0), (0.3, 3.0), (7.0, 1.5)]


@pytest.mark.parametrize("a,b", PRIORS)
def test_p_eff_matches_enumeration_for_all_counts(a, b):
    for k in range(2, 13):
        ns, ss = zip(*[(n, s) for n in range(k + 1) for s in range(n + 1)])
        got = p_eff(np.array(ns), np.array(ss), k, a, b)
        want = np.array([brute_force_p_eff(n, s, k, a, b) for n, s in zip(ns, ss)])
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("a,b", [(1.0, 1.0), (2.0, 5.0)])
def test_p_eff_matches_numerical_integration(a, b):
    # Independent route: integrate P(mixed | gamma) against the Beta posterior density.
    k = 8
    for n, s in [(0, 0), (2, 0), (3, 3), (5, 0), (7, 7)]:
        post = stats.beta(a + s, b + n - s)
        r = k - n

        def mixed_prob(g):
            if s == 0:
                return 1 - (1 - g) ** r
            return 1 - g**r if s == n and n > 0 else 1.0

        if n == 0:
            mixed_prob = lambda g: 1 - g**k - (1 - g) ** k  # noqa: E731
        want, _ = integrate.quad(lambda g: post.pdf(g) * mixed_prob(g), 0, 1)
        assert p_eff(n, s, k, a, b) == pytest.approx(want, abs=1e-7)


def test_uniform_prior_closed_forms():
    k = 8
    for n in range(1, k + 1):
        assert p_eff(n, 0, k) == pytest.approx((k - n) / (k + 1))
        assert p_eff(n, n, k) == pytest.approx((k - n) / (k + 1))
    assert p_eff(0, 0, k) == pytest.approx((k - 1) / (k + 1))
    assert p_eff(3, 1, k) == 1.0 and p_eff(8, 4, k) == 1.0
    assert p_eff(8, 0, 8) == 0.0 and p_eff(8, 8, 8) == 0.0


@pytest.mark.parametrize("a,b", PRIORS)
def test_p_eff_strictly_decreasing_along_unanimous_prefixes(a, b):
    """Prop. 2: along all-fail and all-pass prefixes p_eff strictly decreases in n."""
    for k in (4, 8, 16):
        n = np.arange(1, k + 1)
        fail = p_eff(n, np.zeros_like(n), k, a, b)
        pas = p_eff(n, n, k, a, b)
        assert np.all(np.diff(fail) < 0) and np.all(np.diff(pas) < 0)


@pytest.mark.parametrize("k", [4, 8, 16, 32])
@pytest.mark.parametrize("tau", [0.1, 0.3, 0.45, 0.62, 0.9])
def test_abandon_point_uniform_prior(k, tau):
    n_a = abandon_point_uniform(k, tau)
    if not float(tau * (k + 1)).is_integer():
        assert n_a == max(1, min(k, k - math.floor(tau * (k + 1))))
    # The decision rule abandons an all-fail prefix first at exactly n_a.
    n = np.arange(1, k + 1)
    dec, _ = decide(n, n, np.zeros_like(n), k=k, tau_low=tau, commit_min=k)
    first = int(n[np.argmax(dec == ABANDON)])
    assert first == n_a
    assert np.all(dec[n < n_a] == CONTINUE)


def test_abandon_point_at_exact_boundary():
    # tau * (k + 1) = 0.5 * 9 is not an integer; 1/3 * 9 = 3 is: p_eff(5, 0) = 3/9 == tau, not < tau.
    assert abandon_point_uniform(8, 1 / 3) == 6
    assert p_eff(5, 0, 8) == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    "args,match",
    [
        ((3, 4, 8), "s=4 successes exceed n=3"),
        ((9, 0, 8), "n=9 exceeds the group size k=8"),
        ((1, 0, 1), "k must be >= 2"),
        ((2, 1, 8, 0.0, 1.0), "alpha0 must be finite and > 0"),
        ((2, 1, 8, 1.0, -2.0), "beta0 must be finite and > 0"),
        ((2, 1, 8, float("nan"), 1.0), "alpha0"),
        ((float("nan"), 0, 8), "n contains NaN"),
        ((2.5, 0, 8), "whole numbers"),
        ((-1, 0, 8), ">= 0"),
    ],
)
def test_p_eff_rejects_invalid_input(args, match):
    with pytest.raises(ValueError, match=match):
        p_eff(*args)


def test_p_eff_scalar_and_array_types():
    assert isinstance(p_eff(2, 0, 8), float)
    out = p_eff(np.array([2, 3]), 0, 8)
    assert out.shape == (2,)
