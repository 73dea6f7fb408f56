"""Binomial bounds: exact Clopper-Pearson (fixed n) and beta-binomial confidence sequences (anytime).

All functions are vectorised over k and n. `tail` is the probability that the one-sided statement
fails: `cp_lower(k, n, tail) <= p` holds with probability at least 1 - tail.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special, stats


class BoundError(ValueError):
    """Counts no binomial bound exists for (k < 0, k > n, not finite) or a tail outside (0, 1)."""


def _checked(k, n, tail: float) -> tuple[np.ndarray, np.ndarray]:
    """k and n as float arrays, refused when no bound exists for them: never a silent trivial bound."""
    k, n = np.broadcast_arrays(np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64))
    if not (np.isfinite(tail) and 0 < tail < 1):
        raise BoundError(f"a bound's tail must lie in (0, 1), got {tail!r}")
    bad = ~(np.isfinite(k) & np.isfinite(n) & (k >= 0) & (k <= n))
    if bad.any():
        i = np.flatnonzero(bad.ravel())[0]
        raise BoundError(f"impossible counts: {k.ravel()[i]:g} events in {n.ravel()[i]:g} draws")
    return k, n


def _finite(out: np.ndarray, what: str) -> np.ndarray:
    if np.isnan(out).any():
        raise BoundError(f"{what} bound is NaN for valid counts: refusing a silent trivial bound")
    return out


def cp_lower(k, n, tail: float) -> np.ndarray:
    """One-sided Clopper-Pearson lower bound; 0 where k == 0."""
    k, n = _checked(k, n, tail)
    with np.errstate(all="ignore"):
        out = stats.beta.ppf(tail, np.maximum(k, 1), n - k + 1)
    return _finite(np.where(k <= 0, 0.0, out), "a Clopper-Pearson lower")


def cp_upper(k, n, tail: float) -> np.ndarray:
    """One-sided Clopper-Pearson upper bound; 1 where k == n."""
    k, n = _checked(k, n, tail)
    with np.errstate(all="ignore"):
        out = stats.beta.isf(tail, k + 1, np.maximum(n - k, 1))
    return _finite(np.where(k >= n, 1.0, out), "a Clopper-Pearson upper")


@dataclass(frozen=True)
class Interval:
    """A two-sided interval for a binomial proportion, like scipy's `proportion_ci()` result."""

    k: int
    n: int
    low: float
    high: float
    tail: float  # per side

    @property
    def estimate(self) -> float:
        return self.k / self.n if self.n else float("nan")


def cp_interval(k: int, n: int, tail: float) -> Interval:
    """Two-sided Clopper-Pearson interval with `tail` in each side (confidence 1 - 2*tail)."""
    return Interval(int(k), int(n), float(cp_lower(k, n, tail)), float(cp_upper(k, n, tail)), tail)


# -- anytime-valid: beta-binomial mixture confidence sequences ----------------------------------
#
# Under p, M_n(p) = [B(a + S, b + n - S) / B(a, b)] / [p^S (1 - p)^(n - S)] is a non-negative
# martingale with M_0 = 1 (the Beta(a, b) mixture of likelihood ratios against p). Ville's
# inequality gives P(exists n: M_n(p) >= 1/tail) <= tail, so {p : M_n(p) < 1/tail} covers p at every
# n at once, with probability at least 1 - tail; each of its endpoints is a one-sided bound that holds
# uniformly over n. log M_n is convex in p with its minimum at S/n (where M_n <= 1), so the set is
# an interval, found by bisection on each side.

PRIOR_A = PRIOR_B = 0.5


def _log_m(p, k, n):
    with np.errstate(divide="ignore"):
        return (special.betaln(PRIOR_A + k, PRIOR_B + n - k) - special.betaln(PRIOR_A, PRIOR_B)
                - special.xlogy(k, p) - special.xlog1py(n - k, -p))


def _bisect(k, n, tail, lo, hi, inside_at_hi: bool, iters: int = 60):
    target = np.log(1.0 / tail)
    lo, hi = lo.copy(), hi.copy()
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        inside = _log_m(mid, k, n) < target
        if inside_at_hi:  # searching the lower end: inside points are above it
            hi = np.where(inside, mid, hi)
            lo = np.where(inside, lo, mid)
        else:
            lo = np.where(inside, mid, lo)
            hi = np.where(inside, hi, mid)
    return lo if inside_at_hi else hi


def cs_lower(k, n, tail: float) -> np.ndarray:
    """Lower end of the anytime-valid confidence sequence (valid simultaneously over all n)."""
    k, n = _checked(k, n, tail)
    phat = np.divide(k, n, out=np.zeros_like(k), where=n > 0)
    out = _bisect(k, n, tail, np.zeros_like(phat), phat, inside_at_hi=True)
    return np.where(k <= 0, 0.0, out)


def cs_upper(k, n, tail: float) -> np.ndarray:
    """Upper end of the anytime-valid confidence sequence (valid simultaneously over all n)."""
    k, n = _checked(k, n, tail)
    phat = np.divide(k, n, out=np.ones_like(k), where=n > 0)
    out = _bisect(k, n, tail, phat, np.ones_like(phat), inside_at_hi=False)
    return np.where(k >= n, 1.0, out)
