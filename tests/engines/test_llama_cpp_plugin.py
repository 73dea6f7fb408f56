"""The pytest plugin in an engine's own test suite: a marked test fails on FAILS or a broken contract,
passes otherwise."""

import textwrap
from importlib.metadata import version

from tests.plugin_suite import run_suite

VERSION = version("llama-cpp-python")  # the build whose environment runs this suite

CAMPAIGN = textwrap.dedent("""
    [campaign]
    name = "{name}"
    draws = 1000
    seed = 3
    shard = 1000
    [[config]]
    id = "{cid}"
    engine = "llama_cpp"
    build = "{build}"
    drafter = {{ method = "prompt_lookup", num_pred_tokens = 4, max_ngram_size = 2 }}
    sampling = {{ temperature = 1.0 }}
    {extra}
""")
TESTS = textwrap.dedent("""
    import pytest

    @pytest.mark.badc_campaign("neg.toml")
    def test_negative_control_passes():
        pass

    @pytest.mark.badc_campaign("par.toml")
    def test_parity_fails():
        pass

    def test_fixture(badc):
        report = badc.run("neg.toml", draws=500)
        assert report["configs"][0]["decision"] == "NOT_REJECTED"

    @pytest.mark.badc_campaign("stop.toml")
    def test_stop_recheck_breaks_the_contract():
        pass

    @pytest.mark.badc_campaign("neg.toml", exact_only=True)
    def test_negative_control_exact():
        pass

    @pytest.mark.badc_campaign("par.toml", exact_only=True)
    def test_parity_exact():
        pass
""")


def _campaign(name: str, cid: str, extra: str) -> str:
    return CAMPAIGN.format(name=name, cid=cid, build=VERSION, extra=extra)


def test_plugin_marker_and_fixture(tmp_path):
    proc = run_suite(tmp_path, {
        "neg.toml": _campaign("neg", "N", 'role = "negative-control"'),
        "par.toml": _campaign("par", "P", 'processors = [{ name = "parity" }]'),
        "stop.toml": _campaign("stop", "S", 'stopping = [{ name = "last_id", token = 6 }]'),
        "test_engine.py": TESTS,
    })
    out = proc.stdout
    assert proc.returncode == 1 and "3 failed, 3 passed" in out, out[-3000:]
    assert "test_parity_fails" in out and "FAILS" in out and "unverified drafts" in out
    # LCP-3's shape: its returned law is not rejected on 1,000 draws, but the stop re-check read drafts.
    assert f"S (llama_cpp {VERSION}): NOT_REJECTED, contract broken" in out and "D3" in out, out[-3000:]
    # exact_only: no draws; the failure names the config, the exact TV, the events that moved most with
    # their text, and the first call of the witness trace that broke the contract
    exact = out[out.index("test_parity_exact"):]
    assert "P (llama_cpp" in exact and "exact channel DIFFERS: TV(mu, P) = 0.17" in exact, exact[:3000]
    assert "exact event OTHER: mu 0.17" in exact  # the outcomes P never returns
    assert "first contract violation (the first 200 on-arm draws" in exact and "D1: at logical prefix" in exact
