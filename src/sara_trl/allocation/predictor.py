"""The closed-form effectiveness predictor p_eff (paper Eq. 2, Prop. 1) and the uniform-prior abandon point.

A prompt with success rate gamma ~ Beta(alpha0, beta0) has shown ``s`` successes in its first ``n`` rollouts. Its
group of size ``k`` is *effective* (mixed, non-zero GRPO advantage, paper Def. 1) unless all k outcomes agree. By
conjugacy gamma | (n, s) ~ Beta(alpha0 + s, beta0 + n - s), and with r = k - n rollouts still to come:

* mixed already (1 <= s <= n - 1): p_eff = 1 (effectiveness is absorbing, Prop. 2);
* all failures so far (s = 0 < n): p_eff = 1 - B(alpha0, beta0 + n + r) / B(alpha0, beta0 + n);
* all successes so far (s = n > 0): p_eff = 1 - B(alpha0 + n + r, beta0) / B(alpha0 + n, beta0);
* nothing observed (n = 0): p_eff = 1 - [B(alpha0, beta0 + k) + B(alpha0 + k, beta0)] / B(alpha0, beta0).

Beta functions are evaluated in log space with :func:`scipy.special.betaln`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import betaln

__all__ = ["p_eff", "p_eff_unchecked", "abandon_point_uniform"]


def _as_int_array(name: str, value) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind == "f":
        if np.isnan(arr).any():
            raise ValueError(f"{name} contains NaN")
        if not np.all(arr == np.round(arr)):
            raise ValueError(f"{name} must hold whole numbers, got {arr[arr != np.round(arr)].ravel()[0]!r}")
        arr = arr.astype(np.int64)
    elif arr.dtype.kind not in "iub":
        raise ValueError(f"{name} must be integer counts, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def p_eff_unchecked(n: np.ndarray, s: np.ndarray, k: np.ndarray, alpha0, beta0) -> np.ndarray:
    """Vectorized Eq. 2 without input validation (the hot path of the allocator).

    Inputs broadcast together; ``k`` here is the number of *scorable* slots of the group, so callers that saw
    unscorable rollouts pass ``k - n_unscorable``. Requires 0 <= s <= n <= k and positive prior parameters.

    Returns
    -------
    ndarray of float64
        p_eff, of the broadcast shape, in [0, 1].
    """
    n, s, k = np.broadcast_arrays(np.asarray(n, np.float64), np.asarray(s, np.float64), np.asarray(k, np.float64))
    a = np.broadcast_to(np.asarray(alpha0, np.float64), n.shape)
    b = np.broadcast_to(np.asarray(beta0, np.float64), n.shape)
    out = np.ones(n.shape, dtype=np.float64)
    all_fail = (s == 0) & (n > 0)
    all_pass = (s == n) & (n > 0)
    fresh = n == 0
    if all_fail.any():
        af, bf, nf, kf = a[all_fail], b[all_fail], n[all_fail], k[all_fail]
        out[all_fail] = -np.expm1(betaln(af, bf + kf) - betaln(af, bf + nf))
    if all_pass.any():
        ap, bp, np_, kp = a[all_pass], b[all_pass], n[all_pass], k[all_pass]
        out[all_pass] = -np.expm1(betaln(ap + kp, bp) - betaln(ap + np_, bp))
    if fresh.any():
        a0, b0, k0 = a[fresh], b[fresh], k[fresh]
        base = betaln(a0, b0)
        out[fresh] = 1.0 - np.exp(betaln(a0, b0 + k0) - base) - np.exp(betaln(a0 + k0, b0) - base)
    return np.clip(out, 0.0, 1.0) + 0.0  # "+ 0.0" turns -0.0 into 0.0


def p_eff(n, s, k, alpha0: float = 1.0, beta0: float = 1.0) -> np.ndarray | float:
    """Posterior-predictive probability that a group of size ``k`` will be effective (paper Eq. 2, Prop. 1).

    Parameters
    ----------
    n : int or array_like of int
        Rollouts observed so far for the prompt, ``0 <= n <= k``.
    s : int or array_like of int
        Successes among them, ``0 <= s <= n``.
    k : int or array_like of int
        Group size (rollouts per prompt in a full group), ``k >= 2``.
    alpha0, beta0 : float or array_like, default 1.0
        Parameters of the Beta prior on the success rate gamma; must be finite and > 0. Beta(1, 1) is the paper's
        uniform default, for which the all-fail case reduces to ``(k - n) / (k + 1)``.

    Returns
    -------
    float or ndarray
        p_eff in [0, 1], broadcast over the inputs (a Python float when every input is a scalar). 1 for an already
        mixed group; 0 for a complete (n == k) unmixed group.

    Raises
    ------
    ValueError
        If ``s > n``, ``n > k``, a count is negative or not a whole number, ``k < 2``, or the prior is not finite
        and positive (NaN included). The message names the offending value.
    """
    n_a, s_a, k_a = _as_int_array("n", n), _as_int_array("s", s), _as_int_array("k", k)
    try:
        n_b, s_b, k_b = np.broadcast_arrays(n_a, s_a, k_a)
    except ValueError as err:
        raise ValueError(f"n, s and k must broadcast together: {err}") from err
    if (k_b < 2).any():
        raise ValueError(f"group size k must be >= 2, got k={int(k_b[k_b < 2].ravel()[0])}")
    if (n_b < 0).any() or (s_b < 0).any():
        raise ValueError("n and s must be >= 0")
    if (n_b > k_b).any():
        i = np.argwhere(n_b > k_b)[0]
        raise ValueError(f"n={int(n_b[tuple(i)])} exceeds the group size k={int(k_b[tuple(i)])}")
    if (s_b > n_b).any():
        i = np.argwhere(s_b > n_b)[0]
        raise ValueError(f"s={int(s_b[tuple(i)])} successes exceed n={int(n_b[tuple(i)])} rollouts")
    for name, v in (("alpha0", alpha0), ("beta0", beta0)):
        arr = np.asarray(v, dtype=np.float64)
        if not np.all(np.isfinite(arr)) or (arr <= 0).any():
            raise ValueError(f"prior parameter {name} must be finite and > 0, got {v!r}")
    out = p_eff_unchecked(n_b, s_b, k_b, alpha0, beta0)
    if np.ndim(n) == np.ndim(s) == np.ndim(k) == np.ndim(alpha0) == np.ndim(beta0) == 0:
        return float(out)
    return out


def abandon_point_uniform(k: int, tau_low: float) -> int:
    """Rollouts after which an all-fail (or all-pass) prefix is abandoned under the uniform prior (paper App. F).

    With Beta(1, 1), p_eff(n, 0) = (k - n) / (k + 1) < tau_low first holds at ``n_a = k - floor(tau_low * (k + 1))``
    when ``tau_low * (k + 1)`` is not an integer; when it is (a boundary case, p_eff == tau_low exactly), the
    strict inequality of Eq. 3 moves the abandon point one rollout later. ``n_a`` is returned clipped to [1, k]:
    decisions are only taken after a probe, and a complete unmixed group is always abandoned.

    Raises
    ------
    ValueError
        ``k < 2`` or ``tau_low`` outside [0, 1).
    """
    if k < 2:
        raise ValueError(f"group size k must be >= 2, got {k}")
    if not 0.0 <= tau_low < 1.0:
        raise ValueError(f"tau_low must lie in [0, 1), got {tau_low}")
    x = tau_low * (k + 1)
    n_a = k - math.floor(x) + (1 if float(x).is_integer() else 0)
    return max(1, min(k, n_a))
