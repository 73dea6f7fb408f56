"""The exact channel on llama-cpp-python: mu of prompt-lookup decoding, enumerated through the live
create_completion with only the final draw scripted inside the engine's own sampler chain. Known truths:
badc's numpy mirror of the chain with the physical reads (the hypothesis H-D1-phys) gives the same law
to float rounding; the frozen repair brings mu back to P; greedy decoding is one path; sampled on-arm
draws of the real engine agree with mu."""

import numpy as np
import pytest
from scipy import stats

from badc_check.exact import tv
from badc_replay.engines import llama_cpp as lcp

BASE = {"engine": "llama_cpp", "model": "tiny", "prompt": "abcdabcdab", "max_new_tokens": 4,
        "drafter": {"method": "prompt_lookup", "num_pred_tokens": 4, "max_ngram_size": 2},
        "sampling": {"temperature": 1.0}}
FLOAT = 5e-6  # block against step evaluation in float32: the controls measure ~5e-7


def cfg(**kw):
    return lcp.ENGINE.parse_config({**BASE, "id": "T", **kw})


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BADC_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_plain_sampling_mu_is_p():
    c = cfg()
    mu = lcp.ENGINE.speculative_law(c)
    assert tv(mu.law, lcp.ENGINE.reference_law(c).law) < FLOAT and mu.proposed > 0
    assert abs(sum(mu.law.values()) - 1) < 1e-9


@pytest.mark.parametrize("processors", [[{"name": "parity"}], [{"name": "min_tokens", "min_tokens": 3}]])
def test_processors_reading_drafts_give_the_hypothesis_law_and_the_repair_gives_p(processors):
    c = cfg(processors=processors)
    p = lcp.ENGINE.reference_law(c).law
    mu = lcp.ENGINE.speculative_law(c).law
    assert tv(mu, p) > 0.02
    assert tv(mu, lcp.ENGINE.hypothesis_law(c, "H-D1-phys").law) < FLOAT
    assert tv(lcp.ENGINE.speculative_law(c, ["llama_cpp/logical-prefix"]).law, p) < FLOAT


def test_the_stop_recheck_on_unrolled_drafts_is_measured_exactly():
    # LCP-3: a last-id stopping criterion re-checked after the loop on ids holding unverified drafts; the
    # difference is below the paper's 0.01 threshold, so sampling says NOT_REJECTED, but it is real
    c = cfg(stopping=[{"name": "last_id", "token": 6}])
    p = lcp.ENGINE.reference_law(c).law
    mu = lcp.ENGINE.speculative_law(c).law
    assert 1e-3 < tv(mu, p) < 0.01
    moved = max(set(mu) | set(p), key=lambda y: abs(mu.get(y, 0) - p.get(y, 0)))
    assert moved.endswith("|length") and p.get(moved.replace("|length", "|stop"), 0) > 0


def test_greedy_is_one_path():
    c = cfg(sampling={"temperature": 0.0})
    mu = lcp.ENGINE.speculative_law(c)
    assert mu.paths == 1 and list(mu.law.values()) == [1.0] and mu.law == lcp.ENGINE.reference_law(c).law


def test_sampled_on_arm_draws_agree_with_mu():
    c = cfg(processors=[{"name": "parity"}])
    mu = lcp.ENGINE.speculative_law(c).law
    h = lcp.ENGINE.harness(c, speculative=True)
    n = 4000
    counts: dict[str, int] = {}
    for seed in range(n):
        y = h.draw(seed)
        counts[y] = counts.get(y, 0) + 1
    assert set(counts) <= set(mu)
    top = sorted(mu, key=mu.get, reverse=True)[:12]
    obs = [counts.get(y, 0) for y in top] + [n - sum(counts.get(y, 0) for y in top)]
    exp = np.array([mu[y] for y in top] + [1 - sum(mu[y] for y in top)]) * n
    assert stats.chisquare(obs, exp).pvalue > 0.001
