"""Decisions, witnesses, calibration, compatibility, channel R, confirmation and the comparator."""

import numpy as np
import pytest

from badc_check.bounds import cp_upper
from badc_check.channels import RecordArm, find_witnesses
from badc_check.comparator import permutation_chi2
from badc_check.confirmation import bounds_for_confirmation, confirm_repair, least_bounds, least_confirm_draws
from badc_check.decide import FAILS, INCONCLUSIVE, NOT_REJECTED, VOID, Arm, Config, contract_lines, decide
from badc_check.events import EventFamily
from badc_check.marginals import marginal_tv_bounds, union_count
from tests.lawgen import random_law, sample, shifted_law

P = random_law(11)


def arms(law_on, law_off, n, seed=0, proposed=1000):
    rng = np.random.default_rng(seed)
    accepted = None if proposed is None else proposed // 3
    return Arm(sample(law_on, n, rng), proposed=proposed, accepted=accepted), Arm(sample(law_off, n, rng))


def test_equal_laws_not_rejected_and_planted_difference_fails():
    on, off = arms(P, P, 20000)
    d = decide(Config("same", on, off, reference=P))
    assert d.decision == NOT_REJECTED and d.D < 0.01 and d.calibration.passed and not d.eligible
    on, off = arms(shifted_law(P, 0.1), P, 20000)
    d = decide(Config("shifted", on, off, reference=P))
    assert d.decision == FAILS and d.eligible and 0.01 < d.D < 0.1


def test_replay_violations_are_the_contract_channel_never_an_event_of_d():
    # The case: equal returned laws, trace replay flags 10% of on-arm draws. A lossless returned
    # law is not rejected; the broken contract is reported beside it, and D stays a bound on returned outputs.
    on, off = arms(P, P, 20000)
    contract = {"status": "broken", "requests": 20000, "violating_requests": 2000, "violations": 2000,
                "calls": 90000, "by_class": {"D1": {"calls": 2000, "requests": 2000}}, "left_unchecked": []}
    d = decide(Config("lossless", Arm(on.outcomes, 2000, 1000, 300), off, reference=P, contract=contract))
    assert d.decision == NOT_REJECTED and d.D < 0.01 and not d.eligible
    assert d.to_dict()["contract"]["status"] == "broken" and "D_returned" not in d.to_dict()
    plain = decide(Config("same", on, off, reference=P))
    assert d.D == plain.D and d.channel_s.argmax == plain.channel_s.argmax
    lines = contract_lines(d.contract, d.decision)
    assert "BROKEN" in lines[0] and "not rejected" in lines[0] and "D1 2,000 calls" in lines[0]
    assert contract_lines(None, NOT_REJECTED) == ["contract UNCHECKED: no trace replay of the on arm"]
    # A planted predicate violation is an outcome: it enters the contract-violation event.
    bad = {**on.outcomes, "9|eos": 600}
    cfg = Config("pred", Arm(bad, proposed=10), off, reference=P, predicates={"vocab": {"9|eos"}})
    w = decide(cfg)
    i = cfg.family().index["contract-violation"]
    assert cfg.family().counts(bad)[i] == 600 and w.witnesses.count == 600
    assert w.channel_s.lower_on[i] - w.channel_s.upper_off[i] > 0.01 and w.decision == FAILS and w.eligible


def test_witness_rules():
    ref = {"1|eos": 0.5, "2|eos": 0.5}
    preds = {"allowed": {"7|eos"}}
    w = find_witnesses({"1|eos": 5, "7|eos": 2, "8|eos": 1}, {"1|eos": 8}, ref, preds)
    assert w.count == 2 and w.outcomes == {"7|eos": 2} and w.numerical_zeros == 1
    # An off-arm outcome violating the predicate disqualifies it.
    assert find_witnesses({"7|eos": 2}, {"7|eos": 1}, ref, preds).count == 0
    # P > 0 outcomes are never witnesses, and without a reference nothing is checked.
    assert find_witnesses({"7|eos": 2}, {}, {**ref, "7|eos": 0.1}, preds).count == 0
    assert not find_witnesses({"7|eos": 2}, {}, None, preds).checked


def test_single_witness_fails_even_without_a_bound():
    on, off = arms(P, P, 5000)
    bad = "9|eos"
    on = Arm({**on.outcomes, bad: 1}, proposed=10)
    d = decide(Config("w", on, off, reference=P, predicates={"vocab": lambda y: y.startswith("9")}))
    assert d.decision == FAILS and d.witnesses.count == 1 and d.eligible and d.D < 0.01


def test_void_when_off_arm_disagrees_with_reference():
    on, off = arms(P, shifted_law(P, 0.1), 20000)
    assert decide(Config("v", on, off, reference=P)).decision == VOID
    on, off = arms(P, P, 20000)
    off = Arm(off.outcomes, violations=1)
    d = decide(Config("v2", on, off, reference=P))
    assert d.decision == VOID and d.calibration.off_violations == 1


def test_inconclusive_without_exercise():
    on, off = arms(shifted_law(P, 0.2), P, 20000, proposed=0)
    assert decide(Config("z", on, off, reference=P)).decision == INCONCLUSIVE  # zero proposals
    on, off = arms(P, P, 20000, proposed=None)
    assert decide(Config("u", on, off, reference=P)).decision == INCONCLUSIVE  # unknown exercise
    on, off = arms(shifted_law(P, 0.2), P, 20000, proposed=None)
    assert decide(Config("u2", on, off, reference=P)).decision == FAILS  # a difference is a difference
    assert decide(Config("e", Arm({}, proposed=3), off, reference=P)).decision == INCONCLUSIVE


def test_crash_dominated_failure_is_not_eligible():
    # Like the paper's xgrammar row: a quarter of speculative draws crash, the rest follow P.
    rng = np.random.default_rng(5)
    on = sample(P, 15000, rng)
    on["|crash"] = 5000
    off = sample(P, 20000, rng)
    d = decide(Config("x", Arm(on, proposed=10), Arm(off), reference=P))
    assert d.decision == FAILS and d.D > 0.2 and d.D_crash_free < 0.01 and not d.eligible
    assert d.crashes == {"on": 5000, "off": 0}


def test_compatibility_accepts_the_true_mechanism_and_rejects_others():
    mu = shifted_law(P, 0.1, seed=1)
    on, off = arms(mu, P, 40000)
    good = decide(Config("h", on, off, reference=P, hypothesis=("H-true", mu)))
    assert good.hypothesis.compatible and good.hypothesis.null_rejected
    wrong = decide(Config("h", on, off, reference=P, hypothesis=("H-wrong", shifted_law(P, 0.1, seed=2))))
    assert not wrong.hypothesis.compatible
    # Zero-probability veto: an observed outcome the hypothesis gives no mass.
    zero = {y: (p if y != next(iter(on.outcomes)) else 0.0) for y, p in mu.items()}
    vetoed = decide(Config("h", on, off, reference=P, hypothesis=("H-zero", zero)))
    assert not vetoed.hypothesis.compatible and vetoed.hypothesis.zero_veto
    assert good.decision == wrong.decision == FAILS  # compatibility never enters detection


def test_channel_r_fails_on_record_mismatch_and_is_incomplete_without_reference():
    on, off = arms(P, P, 20000)
    rec_on, rec_off = RecordArm(20000, 3000, {1: 3000}), RecordArm(20000, 0, {})
    d = decide(Config("r", on, off, reference=P, records_status="complete", records_on=rec_on,
                      records_off=rec_off))
    assert d.decision == FAILS and d.records.failed and d.bounds == 2 * d.family_size + 4
    d = decide(Config("r", on, off, reference=P, records_status="incomplete"))
    assert d.decision == NOT_REJECTED and d.records.status == "incomplete" and not d.records.failed


def test_repair_confirmation():
    mu = shifted_law(P, 0.1, seed=3)
    fam = EventFamily.build(P, {"H": mu})
    rng = np.random.default_rng(9)
    n = 400_000
    off, on = sample(P, n, rng), sample(mu, n, rng)
    frozen = ["A_H(H)"]
    good = confirm_repair("fix", fam, frozen, P, {}, off, on, sample(P, n, rng), proposed_on=5,
                          proposed_repaired=5, alpha=0.05, m=1)
    assert good.confirmed and good.recurrence > 0.01 and good.gap_ub <= 0.01 and good.witness_ub <= 1e-4
    bad = confirm_repair("nofix", fam, frozen, P, {}, off, on, sample(mu, n, rng), proposed_on=5,
                         proposed_repaired=5, alpha=0.05, m=1)
    assert not bad.confirmed and bad.gap_ub > 0.01
    off_switch = confirm_repair("disable", fam, frozen, P, {}, off, on, sample(P, n, rng), proposed_on=5,
                                proposed_repaired=0, alpha=0.05, m=1)
    assert not off_switch.confirmed and "not exercised" in off_switch.reasons[0]
    with pytest.raises(ValueError, match="frozen events"):
        confirm_repair("x", fam, ["nope"], P, {}, off, on, off, proposed_on=1, proposed_repaired=1,
                       alpha=0.05, m=1)


def test_recurrence_at_a_look_uses_the_prefixes_and_the_looks_share_of_its_own_tail():
    # confirm_anytime: recurrence on both unrepaired arms' prefixes with the look's share of the tail, a
    # sixth bound per frozen event (the prefix U_off beside the whole arm's); gap and witness bounds stay on
    # the whole arms, so the same draws give the same gap as at fixed n but at a smaller tail
    from badc_check.bounds import cp_lower
    from badc_check.confirmation import recurrence
    from badc_check.looks import planned_looks

    mu = shifted_law(P, 0.1, seed=3)
    fam = EventFamily.build(P, {"H": mu})
    frozen, n = ["A_H(H)"], 400_000
    assert bounds_for_confirmation(fam, frozen, looks=True) == bounds_for_confirmation(fam, frozen) + 1
    rng = np.random.default_rng(9)
    off, on, rep = sample(P, n, rng), sample(mu, n, rng), sample(P, n, rng)
    look = planned_looks(n)[0]
    assert (look.index, look.draws) == (1, 1563)
    off_pre, on_pre = sample(P, look.draws, rng), sample(mu, look.draws, rng)
    at = confirm_repair("fix", fam, frozen, P, {}, off, on_pre, rep, proposed_on=5, proposed_repaired=5,
                        alpha=0.05, m=1, look=look, off_prefix=off_pre)
    fixed = confirm_repair("fix", fam, frozen, P, {}, off, on, rep, proposed_on=5, proposed_repaired=5,
                           alpha=0.05, m=1)
    tail = 0.05 / bounds_for_confirmation(fam, frozen, looks=True)
    i = fam.index["A_H(H)"]
    expect = cp_lower(fam.counts(on_pre)[i], look.draws, tail * look.spend) - \
        cp_upper(fam.counts(off_pre)[i], look.draws, tail * look.spend)
    assert at.recurrence == pytest.approx(float(expect)) and at.recurrence == recurrence(
        fam, frozen, off_pre, on_pre, tail * look.spend, P, {})[0]
    assert at.recurrence_look == look.to_dict() and fixed.recurrence_look is None
    assert at.recurrence < fixed.recurrence and at.gap_ub > fixed.gap_ub  # a prefix, and a smaller tail
    assert at.confirmed and fixed.confirmed  # the planted effect (TV 0.1) recurs at 1,563 draws already
    # no effect on the prefixes at the last look: not confirmed, and the reason says where it was judged
    last = planned_looks(n)[-1]
    flat = confirm_repair("fix", fam, frozen, P, {}, off, off, rep, proposed_on=5, proposed_repaired=5, alpha=0.05,
                          m=1, look=last, off_prefix=off)
    assert not flat.confirmed and flat.reasons[0].endswith("(at look 9 of 9 (400,000 draws per arm))")
    with pytest.raises(ValueError, match="prefix"):
        confirm_repair("fix", fam, frozen, P, {}, off, on, rep, proposed_on=5, proposed_repaired=5, alpha=0.05,
                       m=1, look=look)
    # the sixth bound moves the least confirmation draws to where its smaller tail crosses 1e-4 (RQ3's m = 8)
    least, tail = least_confirm_draws(0.05, 8, looks=True), 0.05 / (8 * least_bounds(looks=True))
    assert cp_upper(0, least, tail) <= 1e-4 < cp_upper(0, least - 1, tail) and least > least_confirm_draws(0.05, 8)


def test_the_least_confirmation_draws_are_where_a_repaired_arm_without_witness_can_pass():
    # at the loosest tail (one frozen event, a two-event family) the bound with no witness crosses 1e-4
    # exactly there, and a real family (more bounds) cannot do better: one draw fewer is never confirmed
    for m in (1, 3, 8):
        n, tail = least_confirm_draws(0.05, m), 0.05 / (m * least_bounds())
        assert cp_upper(0, n, tail) <= 1e-4 < cp_upper(0, n - 1, tail)
    smallest = EventFamily.build({"|eos": 1.0}, {})  # a one-outcome law: no family has fewer bounds
    assert least_bounds() <= bounds_for_confirmation(smallest, [smallest.events[0].id])
    fam = EventFamily.build(P, {})
    n = least_confirm_draws(0.05, 1) - 1
    rng = np.random.default_rng(4)
    off, on, rep = sample(P, n, rng), sample(shifted_law(P, 0.1, seed=3), n, rng), sample(P, n, rng)
    r = confirm_repair("fix", fam, [fam.events[0].id], P, {}, off, on, rep, proposed_on=5, proposed_repaired=5,
                       alpha=0.05, m=1)
    assert not r.confirmed and r.reasons[-1].startswith("repaired witness-rate upper bound")


def test_permutation_comparator_level_and_power():
    rng = np.random.default_rng(4)
    rejections = sum(permutation_chi2(sample(P, 2000, rng), sample(P, 2000, rng), level=0.05,
                                      permutations=199, seed=i).rejected for i in range(200))
    assert rejections / 200 <= 0.1  # nominal 0.05; 200 runs
    shifted = permutation_chi2(sample(shifted_law(P, 0.1), 5000, rng), sample(P, 5000, rng), level=0.05 / 11,
                               permutations=999)
    assert shifted.rejected and shifted.p_value == 1 / 1000


def test_marginal_tv_bounds_match_brute_force():
    assert [union_count(c) for c in (10, 7, 13, 8, 5)] == [511, 63, 4095, 127, 15]  # K = 4811 in the paper
    assert sum(union_count(c) for c in (10, 7, 13, 8, 5)) == 4811
    off, other = np.array([500, 300, 150, 50]), np.array([400, 300, 250, 50])
    r = marginal_tv_bounds(off, other, 0.05 / 30)
    assert r.events == 7 and r.tv == pytest.approx(0.1)
    assert 0 < r.lower < 0.1 < r.upper
    same = marginal_tv_bounds(off, off, 0.05 / 30)
    assert same.tv == 0 and same.lower == 0 and same.upper > 0


def test_a_diffuse_mechanism_is_detected_through_a_h_only_and_the_report_says_so():
    # mu_H moves 0.002 onto each of 10 of 20 equally likely outcomes: A_H moves 0.02, no singleton, prefix,
    # length or code event more than 0.002. Exact expected counts (no sampling noise): a known truth.
    outs = [f"{a} {b}|eos" for a in range(4) for b in range(5)]
    p = {y: 0.05 for y in outs}
    mu = {y: 0.05 + (0.002 if i % 2 else -0.002) for i, y in enumerate(outs)}
    n = 2_000_000
    on = Arm({y: round(n * q) for y, q in mu.items()}, proposed=1000)
    off = Arm({y: round(n * q) for y, q in p.items()})
    d = decide(Config("diffuse", on, off, reference=p, hypothesis=("H-x", mu)))
    assert d.decision == FAILS and d.eligible and d.channel_s.argmax == "A_H(H-x)" and d.D > 0.01
    w = d.without_hypothesis_events
    assert w["decision"] == NOT_REJECTED and w["D"] < 0.002 and w["events"] == d.family_size - 2  # A_H, not A_H
    assert d.to_dict()["without_hypothesis_events"] == w
    # without a hypothesis there is nothing to withhold
    assert decide(Config("plain", on, off, reference=p)).without_hypothesis_events is None


def test_the_report_says_whether_the_repaired_arms_calls_keep_the_contract():
    from badc_check.campaign.report import _repaired_contract

    first = {"message": "call 3 of request 7: processor saw 5 ids, expected 4"}
    broken = {"status": "broken", "calls": 900, "violations": 12, "requests": 100, "violating_requests": 9,
              "first_violation": first, "left_unchecked": []}
    assert _repaired_contract(broken) == ("the repaired arm's calls BREAK the contract (12 violations in 9 of 100 "
                                          "requests; first: call 3 of request 7: processor saw 5 ids, expected 4)")
    unchecked = {**broken, "status": "unchecked", "violations": 0, "left_unchecked": ["no request was replayed"]}
    assert _repaired_contract(unchecked) == "the repaired arm's contract is unchecked (no request was replayed)"
