"""The exact channel on transformers: mu of assisted decoding with prompt lookup, enumerated through the live
generate() with only torch.multinomial scripted. Known truths it is checked against: the independent
hypothesis simulator (AssistedSimulator, which models the mechanism the paper names) gives the same law to
float rounding; the frozen repair brings mu back to P; a config whose drafter proposes nothing is
UNEXERCISED; the soundness pass finds a wrong pruning rule; sampled on-arm draws of the real engine agree
with mu."""

import numpy as np
import pytest
from scipy import stats

from badc_check.exact import tv
from badc_replay.engines import transformers as tf
from badc_replay.engines.transformers import exact
from badc_replay.exact import UNSUPPORTED, ExactUnavailable

SYNTHID = {"type": "synthid", "keys": [654, 400, 836, 123, 340, 443, 597, 160], "ngram_len": 2}
FLOAT = 1e-6  # block against step logits in float32: the controls measure ~1e-7
VERSION = tf.ENGINE.version()


def cfg(**kw):
    return tf.ENGINE.parse_config({"id": "T", "max_new_tokens": 3, **kw})


def assert_same_law(mu, law, c):
    """mu is `law` to float rounding; on 5.12.0, whose verification block can return more than max_new_tokens
    (its own defect, test_5_12_returns_more_than_max_new_tokens), except for those outputs: all of the
    difference lies on them, and there is some."""
    if VERSION != "5.12.0":
        assert tv(mu, law) < FLOAT
        return
    over = tf.ENGINE.predicate("max_new_tokens", c)
    overshoot = sum(v for y, v in mu.items() if over(y))
    assert overshoot > 0 and all(over(y) for y in mu if y not in law)
    assert abs(tv(mu, law) - overshoot) < FLOAT


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BADC_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_plain_sampling_mu_is_p_and_every_pruned_leaf_is_sound():
    c = cfg()
    mu = tf.ENGINE.speculative_law(c, soundness=60)
    assert_same_law(mu.law, tf.ENGINE.reference_law(c).law, c)
    assert mu.proposed > 0 and mu.soundness.leaves == 60 and mu.soundness.mismatches == 0


@pytest.mark.parametrize("generation, hypothesis", [({"guidance_scale": 1.5}, "H-D2-cfg"),
                                                    ({"watermarking_config": SYNTHID}, "H-D2-synthid")])
def test_stateful_processors_mu_is_the_hypothesis_law_and_the_repair_gives_p(generation, hypothesis):
    c = cfg(generation=generation)
    p = tf.ENGINE.reference_law(c).law
    mu = tf.ENGINE.speculative_law(c).law
    assert tv(mu, p) > 0.05
    assert_same_law(mu, tf.ENGINE.hypothesis_law(c, hypothesis).law, c)
    assert_same_law(tf.ENGINE.speculative_law(c, ["transformers/stateful-replay"]).law, p, c)


def test_stop_string_mass_lies_exactly_where_p_is_zero():
    c = cfg(generation={"stop_strings": ["cd"]})
    p = tf.ENGINE.reference_law(c).law
    mu = tf.ENGINE.speculative_law(c).law
    structural = sum(v for y, v in mu.items() if y not in p)
    assert structural > 1e-3 and abs(tv(mu, p) - structural) < FLOAT
    past_stop = tf.ENGINE.predicate("stop_strings", c)
    over = tf.ENGINE.predicate("max_new_tokens", c) if VERSION == "5.12.0" else lambda y: False
    assert all(past_stop(y) or over(y) for y in mu if y not in p)
    assert_same_law(mu, tf.ENGINE.hypothesis_law(c, "H-D3-stopstring").law, c)


def test_a_drafter_that_proposes_nothing_and_a_draft_model():
    # top_k 3 with repetition penalty 1.3 filters every candidate (the paper's HF17-3)
    c = cfg(generation={"temperature": 0.7, "top_k": 3, "top_p": 0.9, "repetition_penalty": 1.3})
    assert tf.ENGINE.speculative_law(c).proposed == 0
    with pytest.raises(ExactUnavailable) as e:
        tf.ENGINE.speculative_law(cfg(drafter={"method": "draft_model", "model": "tiny:11"}))
    assert e.value.status == UNSUPPORTED and "draft model" in e.value.reason


def test_the_soundness_pass_finds_a_wrong_pruning_rule(monkeypatch):
    # the rule as first written: row i kept when row i - 1's token, a filler or not, equals the candidate
    monkeypatch.setattr(exact, "row_kept", lambda kept, before, cand: before == cand)
    mu = tf.ENGINE.speculative_law(cfg(), soundness=100)
    assert mu.soundness.mismatches > 0


def test_sampled_on_arm_draws_agree_with_mu():
    c = cfg(generation={"guidance_scale": 1.5})
    mu = tf.ENGINE.speculative_law(c).law
    h = tf.ENGINE.harness(c, speculative=True)
    counts: dict[str, int] = {}
    for seed in range(1500):
        y = h.draw(seed)
        counts[y] = counts.get(y, 0) + 1
    assert set(counts) <= set(mu)
    top = sorted(mu, key=mu.get, reverse=True)[:12]  # the heaviest outcomes, the rest pooled
    obs = [counts.get(y, 0) for y in top] + [1500 - sum(counts.get(y, 0) for y in top)]
    exp = np.array([mu[y] for y in top] + [1 - sum(mu[y] for y in top)]) * 1500
    assert stats.chisquare(obs, exp).pvalue > 0.001
