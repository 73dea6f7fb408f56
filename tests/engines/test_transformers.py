"""The tiny transformers model in the real engine."""

import torch

from badc_trace.tiny import DEFAULT_PROMPT, default_seed
from badc_trace.tiny import transformers as tiny

SEED = default_seed("transformers")


def test_one_seed_gives_byte_identical_weights():
    a, _ = tiny.build(SEED)
    b, _ = tiny.build(SEED)
    c, _ = tiny.build(SEED + 1)
    assert tiny.weights_digest(a) == tiny.weights_digest(b) != tiny.weights_digest(c)


def test_tokenizer_is_per_character_with_eos():
    _, tok = tiny.build(SEED)
    ids = tok(DEFAULT_PROMPT).input_ids
    assert ids == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert tok.decode([0, 5, 3]) == "afd" and tok.eos_token_id == tiny.EOS_ID


def test_first_step_has_visible_mass_everywhere():
    dist = tiny.first_step_distribution(SEED)
    assert set(dist) == set(tiny.VOCAB) and abs(sum(dist.values()) - 1) < 1e-9
    assert min(dist.values()) >= 1e-3 and max(dist.values()) <= 0.9, dist


def test_generate_with_prompt_lookup_runs():
    model, tok = tiny.build(SEED)
    ids = tok(DEFAULT_PROMPT, return_tensors="pt").input_ids
    torch.manual_seed(0)
    out = model.generate(ids, do_sample=True, max_new_tokens=3, prompt_lookup_num_tokens=3,
                         max_matching_ngram_size=2)
    new = out[0, ids.shape[1]:].tolist()
    assert 1 <= len(new) <= 3 and all(0 <= t < len(tiny.VOCAB) for t in new)


def test_state_digest_is_by_content_and_sees_in_place_changes_of_big_tensors():
    """Tensors of 64 KiB or more are hashed once per in-place version (SynthID's sampling table is
    512 KiB): an in-place change, a new tensor and a different content must all still show."""
    from badc_trace.instrument import BIG_TENSOR, state_digest

    class State:
        pass

    a, b = State(), State()
    a.table, a.context = torch.arange(BIG_TENSOR // 8 * 2), torch.zeros(3)  # 128 KiB of int64
    b.table, b.context = a.table.clone(), a.context.clone()
    first = state_digest(a)
    assert state_digest(a) == first == state_digest(b)  # by content, not by object or address
    a.table[5] += 1
    changed = state_digest(a)
    assert changed != first
    a.table.view(-1)[5] -= 1  # through a view: the version counter is shared
    assert state_digest(a) == first
    b.table = torch.arange(BIG_TENSOR // 8 * 2)
    b.table[7] = -1
    assert state_digest(b) not in (first, changed)
    b.table[7] = 7
    b.context[0] = 1.0  # a small tensor is hashed every time
    assert state_digest(b) != first


def _repro():
    """findings/transformers/upstream/repro.py, the standalone reproducer for upstream reports."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "findings" / "transformers" / "upstream" / "repro.py"
    spec = importlib.util.spec_from_file_location("badc_upstream_repro", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_upstream_reproducer_builds_the_tiny_model_and_shows_guidance_state_advanced_by_drafts():
    repro = _repro()
    model, _ = repro.build(SEED)
    assert tiny.weights_digest(model) == tiny.weights_digest(tiny.build(SEED)[0])
    from transformers.generation import logits_process as lp

    cfg_processor = lp.UnbatchedClassifierFreeGuidanceLogitsProcessor
    new, calls = repro.trace_stateful(repro.Run({"guidance_scale": 1.5}), cfg_processor, seed=0)
    placeholders = [c for c in calls if c[1]]
    sampled = [c for c in calls if not c[1]]
    # sequential decoding calls the processor once per new token, on the scores it samples from
    assert len(calls) > len(new) and placeholders and sampled[0][0] == []
    assert sampled[0][2] > 0.01  # the first sampled row already differs from the sequential schedule's
    assert cfg_processor.__call__.__name__ == "__call__"  # the logging patch is undone


def test_upstream_reproducer_plain_sampling_rows_agree_with_the_sequential_schedule():
    # the control: a processor without state (temperature) gives the same scores on every schedule
    repro = _repro()
    from transformers.generation import logits_process as lp

    new, calls = repro.trace_stateful(repro.Run({"temperature": 0.7}), lp.TemperatureLogitsWarper, seed=0)
    assert calls and all(c[2] < 1e-6 for c in calls if not c[1])
