"""`badc run` on llama_cpp configs: workers under the build's interpreter, seal, report."""

import json

import pytest

from badc_check.campaign import CampaignError, load_campaign, run_campaign

CAMPAIGN = """
[campaign]
name = "t"
alpha = 0.05
threshold = 0.01
draws = 1500
seed = 5

[defaults]
engine = "llama_cpp"
build = "0.3.36"
model = "tiny"
max_new_tokens = 4
drafter = {{ method = "prompt_lookup", num_pred_tokens = 4, max_ngram_size = 2 }}
sampling = {{ temperature = 1.0 }}

[[config]]
id = "NEG"
role = "negative-control"

[[config]]
id = "PAR"
processors = [{{ name = "parity" }}]
predicates = ["allowed_tokens"]
hypothesis = "H-D1-phys"

[[config]]
id = "OTHER-ENGINE"
engine = "{other}"
build = "9.9"
"""


def _write(tmp_path, text):
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_run_writes_report_with_decisions_and_refuses_changed_inputs(tmp_path):
    path = _write(tmp_path, CAMPAIGN.format(other="vllm"))
    out = tmp_path / "out"
    report = run_campaign(load_campaign(path), out, workers=2, log=lambda m: None)
    by_id = {c["id"]: c for c in report["configs"]}
    assert by_id["NEG"]["decision"] == "NOT_REJECTED" and by_id["NEG"]["calibration"]["passed"] is True
    assert by_id["PAR"]["decision"] == "FAILS" and by_id["PAR"]["witnesses"] > 0
    assert by_id["PAR"]["contract"]["first_violation"]["kind"] == "D1"
    other = by_id["OTHER-ENGINE"]
    assert other["decision"] == "INCONCLUSIVE" and "no campaign worker" in other["reasons"][0]
    assert report["m"] == 3
    saved = json.loads((out / "report.json").read_text())
    assert saved["seal"] == report["seal"] == json.loads((out / "seal.json").read_text())["seal"]
    assert "| PAR | llama_cpp |" in (out / "report.md").read_text()
    assert (out / "traces" / "PAR-on.badc").stat().st_size > 0
    # Same inputs: the collected counts are reused, not drawn again.
    again = run_campaign(load_campaign(path), out, workers=1, log=lambda m: None)
    assert [c["decision"] for c in again["configs"]] == [c["decision"] for c in report["configs"]]
    # A changed input under the seal is refused, naming what changed.
    changed = _write(tmp_path, CAMPAIGN.format(other="vllm").replace("threshold = 0.01", "threshold = 0.02"))
    with pytest.raises(CampaignError, match="settings"):
        run_campaign(load_campaign(changed), out, log=lambda m: None)
    edited = _write(tmp_path, CAMPAIGN.format(other="vllm").replace('id = "PAR"\n', 'id = "PAR"\nmax_new_tokens = 3\n'))
    with pytest.raises(CampaignError, match="config PAR"):
        run_campaign(load_campaign(edited), out, log=lambda m: None)


def test_bad_campaign_files_fail_clearly(tmp_path):
    with pytest.raises(CampaignError, match="not valid TOML"):
        load_campaign(_write(tmp_path, "[campaign\n"))
    with pytest.raises(CampaignError, match="at least one"):
        load_campaign(_write(tmp_path, "[campaign]\nname='x'\n"))
    with pytest.raises(CampaignError, match="duplicate config ids: A"):
        load_campaign(_write(tmp_path, "[[config]]\nid='A'\nengine='llama_cpp'\nbuild='0.3.36'\n" * 2))
    with pytest.raises(CampaignError, match=r"config\[0\]: field 'build'"):
        load_campaign(_write(tmp_path, "[[config]]\nid='A'\nengine='llama_cpp'\n"))
