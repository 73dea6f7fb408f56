"""Supplement F's returned-output event study: the paper's Table S3 counts give its published intervals
and bounds to four decimals (a known truth), and the frozen event rule is the pilot's modal first token."""

import pytest

from badc_check.event_study import event_study, modal_first_token


def test_table_s3_reproduced():
    # 823, 145 and 833 of 1,024 requests in the event: ordinary, native prompt lookup, history control
    arms = {"ordinary": {"5 1|eos": 823, "6|eos": 201}, "native": {"5|length": 145, "6 6|eos": 879},
            "history": {"5|eos": 833, "7|eos": 190, "|crash:RuntimeError": 1}}
    r = event_study(arms, frozenset({5}))
    pct = {a: (round(100 * i.low, 4), round(100 * i.high, 4)) for a, i in r.intervals.items()}
    assert pct == {"ordinary": (77.2287, 83.2620), "native": (11.6540, 16.9638), "history": (78.2583, 84.1774)}
    assert [round(100 * g, 4) for g in r.gap] == [60.2649, 71.6080] and r.gap_shown
    assert round(100 * r.control_gap, 4) == 0.9766 and round(100 * r.control_ub, 4) == 6.9487 and r.control_within


def test_equal_arms_show_no_gap_and_small_samples_bound_nothing():
    same = {"5|eos": 50, "6|eos": 50}
    r = event_study({"ordinary": same, "native": same, "history": same}, frozenset({5}))
    assert not r.gap_shown and r.gap[0] < 0 < r.gap[1] and not r.control_within  # n = 100: too wide for 10 points


def test_event_rule_and_missing_arms():
    assert modal_first_token({"3 1|eos": 4, "2|eos": 4, "1 2|length": 3, "|crash:E": 9}) == 2
    with pytest.raises(ValueError, match="arms history missing"):
        event_study({"ordinary": {}, "native": {}}, frozenset({1}))
    with pytest.raises(ValueError, match="returned no token"):
        modal_first_token({"|eos": 3})
