"""The pytest plugin in transformers' own test suite: a marked test fails on FAILS, passes otherwise."""

import textwrap

from badc_replay.engines.transformers import ENGINE
from tests.plugin_suite import run_suite

CAMPAIGN = textwrap.dedent("""
    [campaign]
    name = "{name}"
    draws = 1000
    seed = 3
    shard = 1000
    [[config]]
    id = "{cid}"
    engine = "transformers"
    build = "{build}"
    drafter = {{ method = "prompt_lookup", num_tokens = 3, max_ngram_size = 2 }}
    {extra}
""")
TESTS = textwrap.dedent("""
    import pytest

    @pytest.mark.badc_campaign("plain.toml")
    def test_plain_sampling_passes():
        pass

    @pytest.mark.badc_campaign("synthid.toml")
    def test_synthid_fails():
        pass
""")
SYNTHID = 'generation = { watermarking_config = { type = "synthid", keys = [654, 400, 836, 123], ngram_len = 2 } }'


def test_plugin_marker_on_transformers(tmp_path):
    build = ENGINE.version()
    proc = run_suite(tmp_path, {
        "plain.toml": CAMPAIGN.format(name="plain", cid="N", build=build, extra='role = "negative-control"'),
        "synthid.toml": CAMPAIGN.format(name="synthid", cid="S", build=build, extra=SYNTHID),
        "test_engine.py": TESTS,
    })
    out = proc.stdout
    if build == "5.12.0":  # its known defect (HF12-P2): plain sampling with prompt lookup passes its stop map too
        assert proc.returncode == 1 and "2 failed" in out and "N (transformers 5.12.0): NOT_REJECTED, contract " \
            "broken" in out and "D3" in out, out[-3000:]
        return
    assert proc.returncode == 1 and "1 failed, 1 passed" in out, out[-3000:]
    assert "test_synthid_fails" in out and "FAILS" in out and "SynthIDTextWatermarkLogitsProcessor" in out
