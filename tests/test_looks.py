"""`badc run --anytime`'s planned looks: contiguous prefixes, the budget spent over them exactly once."""

import numpy as np
import pytest

from badc_check.decide import FAILS, NOT_REJECTED, Arm, Config, decide, should_stop
from badc_check.looks import planned_looks
from tests.lawgen import random_law, sample, shifted_law

P = random_law(11)


def test_looks_halve_down_to_the_first_and_spend_the_budget_once():
    looks = planned_looks(200_000)
    assert [lk.draws for lk in looks] == [1563, 3125, 6250, 12500, 25000, 50000, 100000, 200000]
    assert sum(lk.spend for lk in looks) == pytest.approx(1.0) and looks[-1].spend == 0.5
    assert [lk.index for lk in looks] == list(range(1, 9)) and {lk.of for lk in looks} == {8}
    assert [(lk.draws, lk.spend) for lk in planned_looks(1500)] == [(1500, 1.0)]  # too few: fixed n
    with pytest.raises(ValueError):
        planned_looks(0)


def test_a_look_decides_with_its_share_of_the_budget_and_only_eligible_failures_stop():
    rng = np.random.default_rng(1)
    on, off = Arm(sample(shifted_law(P, 0.1), 20000, rng), proposed=50), Arm(sample(P, 20000, rng))
    whole, share = decide(Config("x", on, off, reference=P)), decide(Config("x", on, off, reference=P), spend=0.1)
    assert share.channel_s.tail == pytest.approx(0.1 * whole.channel_s.tail) and share.D < whole.D
    assert share.decision == FAILS and share.eligible and should_stop(share)
    crashy = Arm({**sample(P, 2000, rng), "|crash": 1000}, proposed=50)  # FAILS on crashes only: goes on
    d = decide(Config("c", crashy, Arm(sample(P, 3000, rng)), reference=P), spend=0.1)
    assert d.decision == FAILS and not d.eligible and not should_stop(d)
    same = decide(Config("s", Arm(sample(P, 3000, rng), proposed=5), Arm(sample(P, 3000, rng)), reference=P))
    assert same.decision == NOT_REJECTED and not should_stop(same)
    with pytest.raises(ValueError, match="spend"):
        decide(Config("x", on, off, reference=P), spend=0)
