"""Family-wise error and power of channel S by simulation, with fixed-n and anytime-valid bounds.

Each simulated campaign draws both arms from known laws. Under equal laws, the rate of any false
FAILS must stay below alpha; the sharper statement that *no* event has L_on(A) > U_off(A) (the
simultaneous guarantee itself, threshold 0) is checked too, since the 0.01 threshold alone would hide
a mis-levelled bound.
"""

import numpy as np

from badc_check.bounds import cp_lower, cp_upper, cs_lower, cs_upper
from badc_check.decide import FAILS, Arm, Config, decide, should_stop
from badc_check.events import EventFamily
from tests.lawgen import random_law, sample, shifted_law

ALPHA = 0.05
P = random_law(21)  # 85 outcomes: vocabulary 4, horizon 3, EOS


def _sim_counts(fam, law, keys, n, campaigns, rng):
    p = np.array([law.get(k, 0.0) for k in keys])
    x = rng.multinomial(n, p / p.sum(), size=campaigns)
    base = x @ fam.membership(keys)
    return np.hstack([base, n - base])


def _rate_ci(k, n):
    return k / n, float(cp_lower(k, n, 0.025)), float(cp_upper(k, n, 0.025))


def test_fixed_n_false_fails_and_simultaneous_coverage_under_equal_laws():
    fam = EventFamily.build(P)
    keys = list(P)
    tail = ALPHA / fam.bounds_per_config
    rng = np.random.default_rng(20261129)
    runs, n = 4000, 3000
    on, off = _sim_counts(fam, P, keys, n, runs, rng), _sim_counts(fam, P, keys, n, runs, rng)
    gap = cp_lower(on, n, tail) - cp_upper(off, n, tail)
    any_gap = int(((gap > 0).any(axis=1)).sum())
    rate, lo, hi = _rate_ci(any_gap, runs)
    print(f"fixed-n: any L_on - U_off > 0 in {any_gap}/{runs} campaigns = {rate:.4f} [{lo:.4f}, {hi:.4f}]")
    assert hi < ALPHA
    # Mis-levelled bounds (tail alpha per bound, no multiplicity) would break the guarantee here.
    naive = ((cp_lower(on, n, ALPHA) - cp_upper(off, n, ALPHA) > 0).any(axis=1)).mean()
    assert naive > ALPHA
    # End to end through decide(): 2,000 campaigns, none may FAIL more often than alpha.
    fails = 0
    for i in range(2000):
        r = np.random.default_rng(i)
        d = decide(Config("eq", Arm(sample(P, n, r), proposed=1), Arm(sample(P, n, r)), reference=P),
                   family=fam)
        fails += d.decision == FAILS
    rate, lo, hi = _rate_ci(fails, 2000)
    print(f"fixed-n: false FAILS {fails}/2000 = {rate:.4f} [{lo:.4f}, {hi:.4f}]")
    assert hi < ALPHA


def test_fixed_n_detects_tv_005_at_200000_draws():
    q = shifted_law(P, 0.05, seed=7)
    fam = EventFamily.build(P)
    for seed in range(5):
        rng = np.random.default_rng(seed)
        d = decide(Config("tv05", Arm(sample(q, 200_000, rng), proposed=1), Arm(sample(P, 200_000, rng)),
                          reference=P), family=fam)
        assert d.decision == FAILS and d.eligible and d.D > 0.01


def test_anytime_coverage_with_a_look_after_every_batch():
    fam = EventFamily.build(P)
    keys = list(P)
    tail = ALPHA / fam.bounds_per_config
    rng = np.random.default_rng(7)
    runs, batch, looks = 2000, 500, 10
    on = np.zeros((runs, len(fam)), dtype=np.int64)
    off = np.zeros_like(on)
    ever = np.zeros(runs, dtype=bool)
    ever_naive = np.zeros(runs, dtype=bool)
    for look in range(1, looks + 1):
        on += _sim_counts(fam, P, keys, batch, runs, rng)
        off += _sim_counts(fam, P, keys, batch, runs, rng)
        n = look * batch
        ever |= (cs_lower(on, n, tail) - cs_upper(off, n, tail) > 0).any(axis=1)
        ever_naive |= (cp_lower(on, n, ALPHA) - cp_upper(off, n, ALPHA) > 0).any(axis=1)
    rate, lo, hi = _rate_ci(int(ever.sum()), runs)
    print(f"anytime: any L_on - U_off > 0 at any of {looks} looks in {int(ever.sum())}/{runs} = {rate:.4f} "
          f"[{lo:.4f}, {hi:.4f}]")
    assert hi < ALPHA and ever_naive.mean() > ALPHA


def test_anytime_stops_early_on_a_planted_difference():
    q = shifted_law(P, 0.05, seed=7)
    fam = EventFamily.build(P)
    rng = np.random.default_rng(3)
    on, off = {}, {}
    stopped_at = None
    for look in range(1, 11):
        for arm, law in ((on, q), (off, P)):
            for y, k in sample(law, 20_000, rng).items():
                arm[y] = arm.get(y, 0) + k
        d = decide(Config("tv05", Arm(on, proposed=1), Arm(off), reference=P), family=fam, anytime=True)
        if should_stop(d):
            stopped_at = look * 20_000
            break
    print(f"anytime: TV 0.05 stopped FAILS after {stopped_at} draws per arm (budget 200,000)")
    assert d.decision == FAILS and stopped_at is not None and stopped_at < 200_000
