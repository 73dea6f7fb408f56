"""Delta B (badc_check/delta_b.py): the paper's Table 3 interval widths, a planted reward shift, and TRL's
sequence-mask weights from returned records (badc_replay/records.py)."""

import math

import numpy as np
import pytest

from badc_check.delta_b import WeightedRewards, delta_b, hashed_reward, hoeffding_half_width, unweighted
from badc_replay.records import RecordTally, sequence_mask_weight


def test_the_interval_reproduces_the_papers_table_3_widths():
    # 1,000,000 draws per confirmation arm, level 0.05 / 3 (its three confirmed causes), weights up to 3
    half = 2 * hoeffding_half_width(1_000_000, 0.05 / 3 / 2)
    assert half == pytest.approx(0.00993, abs=1e-5)
    for point, (low, high) in {-0.00324: (-0.0132, 0.0067), -0.00466: (-0.0146, 0.0053),
                               -0.00424: (-0.0142, 0.0057)}.items():  # HF17-6, LCP-2-19, LCP-2-35
        assert (round(point - half, 4), round(point + half, 4)) == (low, high)


def test_a_planted_reward_shift_is_bounded_and_equal_laws_are_not():
    outcomes = [f"{i}|eos" for i in range(6)]
    r = np.array([hashed_reward(y) for y in outcomes])
    assert all(0 <= x < 1 for x in r) and len(set(r)) == 6 and hashed_reward("3|eos") == r[3]  # fixed
    p = np.full(6, 1 / 6)
    q = np.where(r > np.median(r), 2.0, 0.5)
    q /= q.sum()  # more mass on high rewards
    truth = float(q @ r - p @ r)
    rng = np.random.default_rng(7)
    n = 200_000

    def arm(law):
        counts = rng.multinomial(n, law)
        return unweighted({y: int(k) for y, k in zip(outcomes, counts, strict=True) if k})

    shifted = delta_b(arm(q), arm(p), 0.05, dict(zip(outcomes, p, strict=True)))
    assert shifted.low > 0 and shifted.low <= truth <= shifted.high and shifted.weights == "ones"
    assert shifted.expected == pytest.approx(p @ r) and shifted.bias_off == pytest.approx(0, abs=0.01)
    same = delta_b(arm(p), arm(p), 0.05)
    assert same.low < 0 < same.high and same.expected is None
    with pytest.raises(ValueError, match="draws in both arms"):
        delta_b(WeightedRewards(0, 0.0), arm(p), 0.05)


def test_trl_sequence_mask_weights_from_returned_log_probabilities():
    assert sequence_mask_weight(0.0) == 1.0 and sequence_mask_weight(math.log(2)) == pytest.approx(2.0)
    assert sequence_mask_weight(math.log(3.01)) == 0.0  # above the cutoff 3: masked, not clipped
    tally = RecordTally()
    tally.start_draw("1|eos")
    tally.logprob(-1.0, -1.0)  # records that match: weight one
    tally.start_draw("2|eos")
    tally.logprob(-0.5, -1.2)
    tally.logprob(-0.1, -0.1)  # log ratio 0.7: weight e^0.7 = 2.01
    tally.start_draw("3|eos")
    tally.logprob(-0.1, -2.0)  # log ratio 1.9: weight 6.7 > 3, masked
    w = tally.to_dict()["weighted_reward"]
    assert w["masked"] == 1
    assert w["sum"] == pytest.approx(hashed_reward("1|eos") + math.exp(0.7) * hashed_reward("2|eos"))


def test_a_draw_whose_outcome_is_not_known_leaves_the_weights_unknown():
    tally = RecordTally()
    tally.start_draw("1|eos")
    tally.start_draw(None)
    assert "weighted_reward" not in tally.to_dict()
    tally = RecordTally()
    tally.start_draw("1|eos")
    tally.logprob(None, -1.0)  # a token without its documented value: this draw's weight is not known either
    assert "weighted_reward" not in tally.to_dict()  # Delta B is then not computed, never taken with weight one


def test_an_arm_with_records_but_unknown_weights_gives_no_delta_b():
    from badc_check.campaign.merge import MergedArm, merge_shards, rewards

    def shard(start, weighted):
        rec = {"draws": 10, "mismatch": 0, "positions": {}, "first_mismatch": None}
        if weighted:
            rec["weighted_reward"] = {"sum": 4.0, "masked": 1}
        return {"start": start, "count": 10, "outcomes": {"1|eos": 10}, "proposed": 5, "accepted": 2,
                "violations": 0, "records": rec}

    both = merge_shards([shard(0, True), shard(10, True)])
    assert rewards(both).weights == "records" and rewards(both).sum_wr == 8.0 and rewards(both).masked == 2
    assert rewards(merge_shards([shard(0, True), shard(10, False)])) is None  # an older shard: not known
    plain = MergedArm({"1|eos": 3}, 3, 0, 0, 0, {}, None)
    assert rewards(plain).weights == "ones" and rewards(plain).sum_wr == pytest.approx(3 * hashed_reward("1|eos"))
