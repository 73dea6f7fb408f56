"""The tiny GGUF model in the real llama-cpp-python."""

import pytest

from badc_trace.tiny import DEFAULT_PROMPT, default_seed
from badc_trace.tiny import llama_cpp as tiny

SEED = default_seed("llama_cpp")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BADC_CACHE", str(tmp_path / "cache"))


def test_one_seed_gives_byte_identical_gguf(tmp_path):
    tiny.write_gguf(SEED, tmp_path / "a.gguf")
    tiny.write_gguf(SEED, tmp_path / "b.gguf")
    tiny.write_gguf(SEED + 1, tmp_path / "c.gguf")
    a, b, c = (tiny.file_digest(tmp_path / f"{x}.gguf") for x in "abc")
    assert a == b != c
    assert tiny.file_digest(tiny.model_path(SEED)) == a


def test_tokenizer_has_no_bos_or_space_prefix():
    llm = tiny.load(SEED)
    assert llm.tokenize(DEFAULT_PROMPT.encode(), add_bos=False) == [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]
    assert llm.token_eos() == tiny.EOS_ID and llm.n_vocab() == len(tiny.VOCAB)
    assert llm.detokenize([3, 9]) == b"ag"


def test_first_step_has_visible_mass_everywhere():
    dist = tiny.first_step_distribution(SEED)
    assert set(dist) == set(tiny.VOCAB) and abs(sum(dist.values()) - 1) < 1e-9
    assert min(dist.values()) >= 1e-3 and max(dist.values()) <= 0.9, dist


def test_completion_with_prompt_lookup_runs():
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    llm = tiny.load(SEED, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=3, max_ngram_size=2))
    out = llm.create_completion(DEFAULT_PROMPT, max_tokens=4, temperature=1.0, seed=11)
    assert out["choices"][0]["finish_reason"] in ("stop", "length")
    assert 0 <= out["usage"]["completion_tokens"] <= 4
