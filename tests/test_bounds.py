"""Clopper-Pearson and anytime bounds: the paper's printed arithmetic, exactness and coverage."""

import numpy as np
import pytest
from scipy import stats

from badc_check.bounds import cp_interval, cp_lower, cp_upper, cs_lower, cs_upper


def test_supplement_f_table_s3_to_the_printed_digits():
    tail = 0.05 / 6
    ordinary, lookup, control = (cp_interval(k, 1024, tail) for k in (823, 145, 833))
    assert (round(100 * ordinary.low, 4), round(100 * ordinary.high, 4)) == (77.2287, 83.2620)
    assert (round(100 * lookup.low, 4), round(100 * lookup.high, 4)) == (11.6540, 16.9638)
    assert (round(100 * control.low, 4), round(100 * control.high, 4)) == (78.2583, 84.1774)
    assert round(100 * ordinary.estimate, 4) == 80.3711
    # The signed gap p0 - ps lies in [l0 - us, u0 - ls]; the control gap is at most
    # max(|lh - u0|, |uh - l0|).
    assert round(100 * (ordinary.low - lookup.high), 4) == 60.2649
    assert round(100 * (ordinary.high - lookup.low), 4) == 71.6080
    control_ub = max(abs(control.low - ordinary.high), abs(control.high - ordinary.low))
    assert round(100 * control_ub, 4) == 6.9487


def test_supplement_c_small_cell_intervals():
    five, two = cp_interval(5, 5, 0.025), cp_interval(2, 2, 0.025)
    assert (round(five.low, 2), five.high) == (0.48, 1.0)
    assert (round(two.low, 2), two.high) == (0.16, 1.0)


@pytest.mark.parametrize("k, n", [(0, 10), (1, 10), (5, 10), (10, 10), (3, 1000), (997, 1000)])
def test_cp_matches_scipy_exact_interval(k, n):
    tail = 0.01
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=1 - 2 * tail, method="exact")
    assert cp_lower(k, n, tail) == pytest.approx(ci.low, abs=1e-12)
    assert cp_upper(k, n, tail) == pytest.approx(ci.high, abs=1e-12)


def test_cp_one_sided_coverage_by_simulation():
    rng = np.random.default_rng(1)
    p, n, tail = 0.07, 400, 0.05
    k = rng.binomial(n, p, size=20000)
    miss_low = np.mean(cp_lower(k, n, tail) > p)
    miss_high = np.mean(cp_upper(k, n, tail) < p)
    # Exact bounds are conservative: each one-sided miss rate is at most the tail.
    assert miss_low <= tail and miss_high <= tail
    assert miss_low > tail / 4 and miss_high > tail / 4  # and not absurdly wide


def test_confidence_sequence_holds_at_every_look():
    rng = np.random.default_rng(2)
    p, tail, paths, steps = 0.2, 0.05, 4000, 2000
    x = rng.random((paths, steps)) < p
    s = np.cumsum(x, axis=1)
    n = np.arange(1, steps + 1)
    looks = np.unique(np.geomspace(1, steps, 60).astype(int)) - 1
    lo = cs_lower(s[:, looks], n[looks], tail)
    hi = cs_upper(s[:, looks], n[looks], tail)
    ever_low = np.mean((lo > p).any(axis=1))
    ever_high = np.mean((hi < p).any(axis=1))
    assert ever_low <= tail and ever_high <= tail, (ever_low, ever_high)
    # With the same tail, the naive fixed-n bound re-used at every look does not hold uniformly.
    naive = np.mean((cp_lower(s[:, looks], n[looks], tail) > p).any(axis=1))
    assert naive > tail


def test_confidence_sequence_is_wider_than_fixed_n_but_not_by_much():
    k, n, tail = np.array([20, 2000, 100000]), 200000, 1e-6
    assert (cs_lower(k, n, tail) <= cp_lower(k, n, tail)).all()
    assert (cs_upper(k, n, tail) >= cp_upper(k, n, tail)).all()
    ratio = (cs_upper(k, n, tail) - cs_lower(k, n, tail)) / (cp_upper(k, n, tail) - cp_lower(k, n, tail))
    assert (ratio < 1.6).all(), ratio
