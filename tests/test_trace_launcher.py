"""badc-trace on an unmodified program, and badc diff on faulty against repaired traces."""

import re
import subprocess
import sys
import textwrap

import pytest

from badc_check.builds import load_builds
from badc_check.cli import main
from tests.programs import trace_program

BUILD = load_builds()["llama_cpp-0.3.36"]
pytestmark = pytest.mark.skipif(not BUILD.installed, reason="build llama_cpp-0.3.36 not set up")

SCRIPT = textwrap.dedent("""
    from llama_cpp.llama import LogitsProcessorList, MinTokensLogitsProcessor
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    from badc_trace.tiny import llama_cpp as tiny
    DRAFTER = LlamaPromptLookupDecoding(num_pred_tokens=4, max_ngram_size=2)
    llm = tiny.load(3, draft_model=DRAFTER)
    for seed in range(40):
        llm.create_completion("abcdabcdab", max_tokens=4, seed=seed, temperature=1.0,
                              logits_processor=LogitsProcessorList([MinTokensLogitsProcessor(3, llm.token_eos())]))
    print("script done")
""")


def test_badc_trace_instruments_an_unmodified_program(tmp_path, capsys):
    import json

    (tmp_path / "on").mkdir(), (tmp_path / "off").mkdir()
    out = trace_program(tmp_path / "on", SCRIPT, BUILD.python)
    assert main(["replay", str(out), "--json"]) == 1
    res = json.loads(capsys.readouterr().out)
    assert res["requests"] == 40 and res["violations"] > 0 and res["first_violation"]["kind"] == "D1"
    # the probe wrote the model's pieces: the prompt's ids read as the prompt
    assert res["first_violation"]["text"]["prefix"].startswith("'abcdabcdab")
    # the same program without speculation: held (exit 0); compared by logical prefix, the first
    # divergence is MinTokens given the unverified drafts with the ids
    off = trace_program(tmp_path / "off", SCRIPT.replace(", draft_model=DRAFTER", ""), BUILD.python)
    assert main(["replay", str(off)]) == 0
    capsys.readouterr()
    assert main(["diff", "--by-prefix", str(out), str(off)]) == 0
    md = capsys.readouterr().out
    assert "(MinTokensLogitsProcessor), verify call" in md and "in `ids`" in md and "'abcdabcdab" in md, md
    assert main(["diff", "--by-prefix", str(off), str(off)]) == 0
    assert "No divergence" in capsys.readouterr().out


def test_badc_trace_usage_errors_and_help():
    proc = subprocess.run([sys.executable, "-m", "badc_trace.launcher", "python"], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr and "after --" in proc.stderr
    helped = subprocess.run([sys.executable, "-m", "badc_trace.launcher", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "--level" in helped.stdout and "badc replay" in helped.stdout


def test_diff_names_the_first_diverging_call(tmp_path, capsys):
    code = textwrap.dedent(f"""
        from badc_replay.arms import collect
        from badc_replay.engines.llama_cpp import ENGINE
        c = ENGINE.parse_config({{
            "id": "LCP-2", "processors": [{{"name": "min_tokens", "min_tokens": 3}}],
            "sampling": {{"temperature": 1.0}},
            "drafter": {{"method": "prompt_lookup", "num_pred_tokens": 4, "max_ngram_size": 2}}}})
        collect(ENGINE, c, "on", 100, 1, trace_path={str(tmp_path / 'on.badc')!r})
        collect(ENGINE, c, "repaired", 100, 1, trace_path={str(tmp_path / 'rep.badc')!r},
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
def test_badc_trace_instruments_a_transformers_program(tmp_path, capsys):
    from badc_trace.format import read_trace

    (tmp_path / "on").mkdir(), (tmp_path / "off").mkdir()
    out = trace_program(tmp_path / "on", TF_SCRIPT, TF_BUILD.python, "--level", "full")
    recs = list(read_trace(str(out)))
    assert sum(r["type"] == "request" for r in recs) == 10
    assert {r["role"] for r in recs if r["type"] == "processor"} == {"filter", "verify"}
    # the same program without speculation, compared by logical prefix: guidance's scores differ at the
    # first verification call (its unconditional history holds the drafts), at the prompt itself
    off = trace_program(tmp_path / "off", TF_SCRIPT.replace(", prompt_lookup_num_tokens=3", ""), TF_BUILD.python,
                        "--level", "full")
    assert main(["diff", "--by-prefix", str(out), str(off)]) == 0
    md = capsys.readouterr().out
    assert "Request **0**, at logical prefix [0, 1, 2, 3, 0, 1, 2, 3, 0, 1] 'abcdabcdab'" in md, md
    assert "UnbatchedClassifierFreeGuidanceLogitsProcessor), verify call" in md and "in `scores_out`" in md
    assert main(["diff", "--by-prefix", str(off), str(off)]) == 0
    assert "No divergence" in capsys.readouterr().out


@tf_only
def test_replay_of_a_transformers_campaign_trace_runs_under_its_build(tmp_path, capsys):
    # D2 needs the engine: from the main environment, `badc replay` re-runs itself under the build's
    # interpreter and finds the guidance processor's drifted state.
    code = textwrap.dedent(f"""
        from badc_replay.arms import collect
        from badc_replay.engines import transformers as tf
        c = tf.ENGINE.parse_config({{"id": "HF-6", "generation": {{"guidance_scale": 1.5}}}})
        collect(tf.ENGINE, c, "on", 30, 1, trace_path={str(tmp_path / 'on.badc')!r})
        collect(tf.ENGINE, c, "off", 30, 1, trace_path={str(tmp_path / 'off.badc')!r})
    """)
    subprocess.run([str(TF_BUILD.python), "-c", code], check=True, capture_output=True)
    assert main(["replay", str(tmp_path / "off.badc")]) == 0
    assert main(["replay", str(tmp_path / "on.badc"), "--json"]) == 1


TF24_BUILD = load_builds()["transformers-5.24.0"]
# An ordinary program: a model saved to a folder and loaded with from_pretrained, generate() with the
# processors and stop rules users combine with prompt lookup and with an assistant model.
TF_PROGRAM = textwrap.dedent("""
    import os, sys, torch
    from transformers import (AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList,
                              SynthIDTextWatermarkingConfig)
    if not os.path.isdir("tinyllama"):
        from badc_trace.tiny import transformers as tiny
        m, t = tiny.build(7)
        m.save_pretrained("tinyllama"); t.save_pretrained("tinyllama")
    model = AutoModelForCausalLM.from_pretrained("tinyllama")
    tok = AutoTokenizer.from_pretrained("tinyllama")
    assistant = AutoModelForCausalLM.from_pretrained("tinyllama")
    ids = tok("abcdabcdab", return_tensors="pt").input_ids

    def keywords(case):
        if case == "guidance":
            return {"guidance_scale": 1.5}
        if case == "synthid":
            return {"watermarking_config": SynthIDTextWatermarkingConfig(keys=[654, 400, 836, 123], ngram_len=2)}
        if case == "xgrammar":
            import xgrammar as xgr
            from xgrammar.contrib.hf import LogitsProcessor
            info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=model.config.vocab_size)
            grammar = xgr.GrammarCompiler(info).compile_grammar('root ::= [a-d] [b-e]* "g"?')
            return {"logits_processor": LogitsProcessorList([LogitsProcessor(grammar)])}
        if case == "repetition":
            return {"repetition_penalty": 1.3}
        if case == "min_new":
            return {"min_new_tokens": 2}
        return {"stop_strings": ["da"], "tokenizer": tok}

    for case in sys.argv[1].split(","):
        # with stop strings, 5.24's assistant generate() refuses to run without being given a tokenizer
        drafters = [{"prompt_lookup_num_tokens": 3}] + ([{"assistant_model": assistant}] if case != "stop" else [])
        for drafter in drafters:
            for seed in range(8):
                torch.manual_seed(seed)
                try:
                    model.generate(ids, do_sample=True, max_new_tokens=4, **drafter, **keywords(case))
                except AssertionError:  # xgrammar's matcher refuses a token the drafts led it to
                    pass
    print("script done")
""")
BROKEN_CASES, CLEAN_CASES = ("guidance", "synthid", "xgrammar"), ("repetition", "min_new", "stop")


def _violating_requests(trace) -> list[int]:
    import json

    code = (f"import json; from badc_replay.contract import replay_trace; "
            f"print(json.dumps(sorted(replay_trace({str(trace)!r}).violating_requests)))")
    return json.loads(subprocess.run([str(TF24_BUILD.python), "-c", code], capture_output=True, text=True,
                                     check=True).stdout)


def _rewrite(src, dst, keep, change=lambda r: r):
    """A copy of trace `src` with the records `keep` accepts, each passed through `change`."""
    from badc_trace.format import TraceWriter, read_trace

    reader = read_trace(str(src))
    h = reader.header
    with TraceWriter(str(dst), engine=h["engine"], build=h["build"], config=h["config"], seal=h["seal"]) as w:
        for rec in reader:
            if keep(rec):
                w.write(change(rec))
    return dst


@pytest.mark.skipif(not TF24_BUILD.installed, reason="build transformers-5.24.0 not set up")
def test_transformers_program_badc_never_saw_gets_d2_and_d3_checked(tmp_path, capfd, monkeypatch):
    # From the main environment, where transformers is not installed, `badc replay` runs under the
    # traced program's interpreter and rebuilds each request's processors from what the probe recorded.
    monkeypatch.chdir(tmp_path)
    trace = trace_program(tmp_path, TF_PROGRAM.replace("sys.argv[1]", repr(",".join(BROKEN_CASES + CLEAN_CASES))),
                   TF24_BUILD.python, "--level", "full")
    assert main(["replay", str(trace)]) == 1
    assert "D2" in capfd.readouterr().out
    # 16 requests per case (8 with prompt lookup, then 8 with the assistant; stop strings: 8); each
    # broken case's processor state drifts under both drafters, no control's does
    violating = set(_violating_requests(trace))
    for i, case in enumerate(BROKEN_CASES):
        assert violating & set(range(16 * i, 16 * i + 8)), (case, "prompt lookup", sorted(violating))
        assert violating & set(range(16 * i + 8, 16 * i + 16)), (case, "assistant", sorted(violating))
    first_clean = 16 * len(BROKEN_CASES)
    assert not {r for r in violating if r >= first_clean}, sorted(violating)
    # the controls alone: held (exit 0); without their scores and without the digests level calls keeps
    # of them (what an older badc's level calls wrote): exit 3, every request unchecked, saying why
    clean = _rewrite(trace, tmp_path / "clean.badc", lambda r: r.get("req") is None or r["req"] >= first_clean)
    assert main(["replay", str(clean)]) == 0
    calls = _rewrite(clean, tmp_path / "calls.badc", lambda r: True,
                     lambda r: {k: v for k, v in r.items() if k not in ("scores_in", "scores_out")})
    assert main(["replay", str(calls)]) == 3
    err = capfd.readouterr().err
    unchecked = re.findall(r"UNCHECKED: (\d+) of 40 requests not checked in full: D2 not checked: record \d+ "
                           r"\(processor 0\) has no digest of its scores", err)
    assert sum(map(int, unchecked)) == 40 and "--level full" in err, err


@pytest.mark.skipif(not TF24_BUILD.installed, reason="build transformers-5.24.0 not set up")
def test_transformers_program_at_the_default_level_gets_d2_decided_as_at_level_full(tmp_path, capfd, monkeypatch):
    # `badc-trace -- python script.py` and `badc replay`, no flags: level calls keeps 16-byte digests of
    # the scores; replay re-runs each request, with prompt lookup or with the assistant model (its draws
    # scripted to the recorded path), checks the re-run against the digests and decides D2 on its
    # scores as level full does: the same requests violate, none is left unchecked.
    monkeypatch.chdir(tmp_path)
    cases = ("guidance", "synthid", "repetition", "stop")  # 16 requests each (stop, last: 8)
    script = TF_PROGRAM.replace("sys.argv[1]", repr(",".join(cases)))
    for folder in ("default", "full"):
        (tmp_path / folder).mkdir()
    default = trace_program(tmp_path / "default", script, TF24_BUILD.python)
    full = trace_program(tmp_path / "full", script, TF24_BUILD.python, "--level", "full")
    assert main(["replay", str(default)]) == 1
    assert "UNCHECKED" not in capfd.readouterr().err
    violating = set(_violating_requests(default))
    assert violating == set(_violating_requests(full))
    for start in (0, 8, 16, 24):  # guidance and SynthID, with prompt lookup and with the assistant
        assert violating & set(range(start, start + 8)), (start, sorted(violating))
    assert not violating - set(range(32))  # the controls hold


# Programs that load models the ways users do, which replay must load again the same way: a model folder
# with no tokenizer files (the program passes token ids), and SmolLM2's GGUF through `gguf_file`.
LOADED_PROGRAM = textwrap.dedent("""
    import os, sys, torch
    from transformers import AutoModelForCausalLM
    how, case = sys.argv[1], sys.argv[2]
    if how == "no-tokenizer":
        if not os.path.isdir("weights-only"):
            from badc_trace.tiny import transformers as tiny
            tiny.build(7)[0].save_pretrained("weights-only")  # weights and config, no tokenizer files
        model = AutoModelForCausalLM.from_pretrained("weights-only")
        ids = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 0, 1]])
    else:
        from badc_trace.checkpoints import resolve_model
        folder, name = os.path.split(resolve_model("smollm2"))
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        ids = torch.tensor([[504, 2644, 3391, 335, 260, 2644, 504, 2644, 3391, 335, 260]])  # repeated n-grams
    extra = {"guidance_scale": 1.5} if case == "guidance" else {}
    for seed in range(int(sys.argv[3])):
        torch.manual_seed(seed)
        model.generate(ids, do_sample=True, max_new_tokens=4, prompt_lookup_num_tokens=3, **extra)
    print("script done")
""")


@pytest.mark.skipif(not TF24_BUILD.installed or "smollm2" not in TF24_BUILD.models,
                    reason="build transformers-5.24.0 with SmolLM2 not set up")
@pytest.mark.parametrize("how, draws", [("no-tokenizer", 10), ("gguf", 3)])
def test_replay_loads_a_model_the_way_the_program_did(tmp_path, capfd, monkeypatch, how, draws):
    monkeypatch.chdir(tmp_path)
    for case, expected in (("guidance", 1), ("plain", 0)):
        folder = tmp_path / case
        folder.mkdir()
        script = LOADED_PROGRAM.replace("sys.argv[1], sys.argv[2]", repr((how, case))[1:-1]).replace(
            "int(sys.argv[3])", str(draws))
        trace = trace_program(folder, script, TF24_BUILD.python, "--level", "full")
        assert main(["replay", str(trace)]) == expected, (how, case, capfd.readouterr())
        out = capfd.readouterr()
        assert "UNCHECKED" not in out.err, out.err
        if expected:
            assert "D2" in out.out
