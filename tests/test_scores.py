"""The score-level study's rules (badc_replay/scores.py) on hand-made calls; the engine runs are in
tests/engines/test_transformers_scores.py."""

import numpy as np
import pytest

from badc_replay.registry import get_engine
from badc_replay.scores import CallScore, RequestScores, ScoreStudy, ScoresUnavailable, tv


def call(tv_intended, history=(1, 2), intended=(1, 2), draft_row=True, tv_target=0.0, role="verify"):
    return CallScore(record=0, role=role, position=1, draft_row=draft_row, history=history, intended=intended,
                     tv_intended=tv_intended, tv_actual=0.0, tv_target=tv_target)


def test_tv_of_softmaxes_with_masked_scores():
    assert tv(np.array([0.0, 0.0]), np.array([0.0, -np.inf])) == pytest.approx(0.5)
    assert tv(np.array([1.0, 2.0, -np.inf]), np.array([11.0, 12.0, -np.inf])) == pytest.approx(0.0)


def req(*calls, exposed=True):
    return RequestScores(0, calls, exposed)


def test_a_witness_needs_exposure_a_history_mismatch_and_a_tv_above_the_threshold():
    mismatch = dict(history=(1, 5, 2), intended=(1, 2))
    assert req(call(0.01, **mismatch)).witness is not None
    assert req(call(0.01)).witness is None  # the same history: a score difference of another cause
    assert req(call(0.0005, **mismatch)).witness is None
    unexposed = req(call(0.01, **mismatch), exposed=False)
    assert unexposed.witness is None and not unexposed.agrees  # tests nothing either way
    # a drafter's filtering call belongs to no position: never a witness, never counted against agreement
    filtering = call(None, role="filter", **mismatch, tv_target=None)
    assert req(filtering, call(0.0)).agrees and not filtering.history_mismatch


def test_agreement_needs_a_checked_call_and_both_references_within_1e_4():
    assert req(call(5e-5, tv_target=5e-5)).agrees
    assert not req(call(5e-5, tv_target=2e-4)).agrees
    # plain sampling: no processor-list call at verification, only returned logits against the model
    returned = call(None, role="returned logits", draft_row=False, tv_target=3e-5)
    assert req(returned).agrees and not req(call(None, role="filter", tv_target=None)).agrees  # nothing checked
    study = ScoreStudy("x", (req(call(0.0)), req(call(0.0), exposed=False)))
    assert (study.exposed, study.agreeing, study.witnesses) == (1, 1, 0)
    assert "2 requests, 1 exposed" in study.summary()


def test_an_engine_without_scores_says_so():
    with pytest.raises(ScoresUnavailable, match="toy: no score-level study"):
        get_engine("toy").score_request(0, [], None)
