"""llama-cpp-python end to end on the tiny model: kernel adapter, calibration, probes, contract replay,
hypotheses and the frozen repair. Modest draw counts; the paper-scale run is tools/campaign.py."""

import numpy as np
import pytest

from badc_check.decide import FAILS, NOT_REJECTED, Arm, Config, decide
from badc_replay.arms import collect
from badc_replay.contract import replay_trace
from badc_replay.engines import llama_cpp as lcp
from badc_replay.worker import laws
from badc_trace.engines.llama_cpp import LlamaCppInstrumentor
from badc_trace.format import read_trace

BASE = {"engine": "llama_cpp", "model": "tiny", "prompt": "abcdabcdab", "max_new_tokens": 4,
        "drafter": {"method": "prompt_lookup", "num_pred_tokens": 4, "max_ngram_size": 2},
        "sampling": {"temperature": 1.0}}


def cfg(**kw):
    return lcp.ENGINE.parse_config({**BASE, "id": "T", **kw})


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BADC_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_mirror_matches_engine_softmax_with_truncation():
    # top_p 0.5 and min_p 0.2 cut the support; the mirror's law must put mass exactly where the C chain
    # can sample. Ten thousand seeded engine draws of one token never leave the mirrored support.
    c = cfg(sampling={"temperature": 0.7, "top_p": 0.5, "min_p": 0.2}, max_new_tokens=1)
    law = lcp.ENGINE.reference_law(c).law
    h = lcp.Harness(c, speculative=False)
    seen = {h.call(seed) for seed in range(10_000)}
    assert seen <= set(law) and len(law) >= 2 and abs(sum(law.values()) - 1) < 1e-12


@pytest.mark.parametrize("api", ["create_completion", "generate"])
def test_calibration_against_20000_off_draws(api):
    c = cfg(api=api, id=f"cal-{api}")
    ref = lcp.ENGINE.reference_law(c).law
    off = collect(lcp.ENGINE, c, "off", 20_000, 7)
    on = collect(lcp.ENGINE, c, "on", 2_000, 7)
    d = decide(Config(c.id, Arm(on.outcomes, proposed=on.proposed), Arm(off.outcomes), reference=ref))
    assert d.calibration.passed is True and d.calibration.worst_excess <= 0.005
    assert d.decision == NOT_REJECTED and on.proposed > 0


@pytest.mark.parametrize("processors, hypothesis", [([{"name": "parity"}], "H-D1-phys"),
                                                     ([{"name": "min_tokens", "min_tokens": 3}], "H-D1-phys")])
def test_simulator_reproduces_p_with_logical_reads(processors, hypothesis):
    c = cfg(processors=processors)
    assert lcp.ENGINE.simulator_check(c).value <= 1e-12
    assert lcp.ENGINE.simulator_check(cfg(stopping=[{"name": "last_id", "token": 6}])).value <= 1e-12
    # ... and the physical reads are what make the hypothesis differ from P.
    p, mu = lcp.ENGINE.reference_law(c).law, lcp.ENGINE.hypothesis_law(c, hypothesis).law
    assert 0.5 * sum(abs(p.get(y, 0) - mu.get(y, 0)) for y in set(p) | set(mu)) > 0.02


def test_parity_processor_fails_with_witnesses_and_repair_removes_them(tmp_path):
    config = {**BASE, "id": "LCP-1", "processors": [{"name": "parity"}], "hypothesis": "H-D1-phys"}
    c = lcp.ENGINE.parse_config(config)
    law = laws(config, tmp_path)
    on = collect(lcp.ENGINE, c, "on", 3000, 11, trace_path=str(tmp_path / "on.badc"))
    off = collect(lcp.ENGINE, c, "off", 3000, 11, trace_path=str(tmp_path / "off.badc"))
    rep = collect(lcp.ENGINE, c, "repaired", 3000, 11, trace_path=str(tmp_path / "rep.badc"),
                      repair="llama_cpp/logical-prefix")
    preds = {"allowed_tokens": lcp.ENGINE.predicate("allowed_tokens", c)}
    d = decide(Config("LCP-1", Arm(on.outcomes, on.violations, on.proposed), Arm(off.outcomes, off.violations),
                      reference=law["reference"], predicates=preds,
                      hypothesis=(law["hypothesis"]["id"], law["hypothesis"]["law"])))
    assert d.decision == FAILS and d.eligible and d.witnesses.count > 100
    assert d.calibration.passed and d.hypothesis.compatible and d.hypothesis.null_rejected
    assert law["simulator_check"] <= 1e-12
    first = on.contract["first_violation"]
    assert first["kind"] == "D1" and "unverified drafts" in first["seen"]
    assert rep.violations == 0 and rep.proposed > 0 and off.violations == 0
    d_rep = decide(Config("LCP-1-rep", Arm(rep.outcomes, 0, rep.proposed), Arm(off.outcomes),
                          reference=law["reference"], predicates=preds))
    assert d_rep.decision == NOT_REJECTED and d_rep.witnesses.count == 0


def test_min_tokens_fails_through_the_bound(tmp_path):
    config = {**BASE, "id": "LCP-2", "processors": [{"name": "min_tokens", "min_tokens": 3}],
              "hypothesis": "H-D1-phys"}
    c = lcp.ENGINE.parse_config(config)
    law = laws(config, tmp_path)
    on = collect(lcp.ENGINE, c, "on", 6000, 12, trace_path=str(tmp_path / "on.badc"))
    off = collect(lcp.ENGINE, c, "off", 6000, 12)
    d = decide(Config("LCP-2", Arm(on.outcomes, on.violations, on.proposed), Arm(off.outcomes, off.violations),
                      reference=law["reference"], hypothesis=(law["hypothesis"]["id"], law["hypothesis"]["law"])))
    assert d.decision == FAILS and d.witnesses.count == 0
    assert d.D > 0.01 and d.eligible and d.hypothesis.compatible


def test_probe_records_calls_and_uninstrument_restores_everything(tmp_path):
    import llama_cpp._internals as internals
    import llama_cpp.llama as llama
    import llama_cpp.llama_speculative as speculative

    before = {n: llama.Llama.__dict__[n] for n in ("create_completion", "generate", "sample")}
    before_draft = speculative.LlamaPromptLookupDecoding.__dict__["__call__"]
    before_kv = internals.LlamaContext.__dict__["kv_cache_seq_rm"]
    c = cfg(processors=[{"name": "min_tokens", "min_tokens": 3}])
    trace = tmp_path / "t.badc"
    res = collect(lcp.ENGINE, c, "on", 50, 3, trace_path=str(trace), level="full")
    probe = LlamaCppInstrumentor()
    assert not probe.is_instrumented
    assert {n: llama.Llama.__dict__[n] for n in before} == before
    assert speculative.LlamaPromptLookupDecoding.__dict__["__call__"] is before_draft
    assert internals.LlamaContext.__dict__["kv_cache_seq_rm"] is before_kv
    kinds = {}
    for r in read_trace(trace):
        kinds[r["type"]] = kinds.get(r["type"], 0) + 1
        if r["type"] == "processor":
            assert len(np.frombuffer(r["scores_in"], np.float32)) == 10
    assert kinds["request"] == kinds["return"] == 50 and kinds["draft"] > 0 and kinds["kv_rm"] > 0
    assert kinds["processor"] == kinds["sample"] and res.counters["proposed"] == res.proposed > 0
    # level counts takes a shorter path (no records, no prompt ids): the same counters, draw for draw
    # (both after the same draws: the reused Llama's first request rewinds a KV cache that is warm now)
    counted = collect(lcp.ENGINE, c, "on", 50, 3, level="counts").counters
    recorded = collect(lcp.ENGINE, c, "on", 50, 3, trace_path=str(tmp_path / "t2.badc"), level="calls").counters
    assert counted == recorded and counted["accepted"] > 0 and counted["kv_removals"] > 0, (counted, recorded)
    again = replay_trace(str(trace))
    assert again.violations > 0 and again.to_dict() == res.contract


def test_instrument_is_idempotent_and_checks_versions(monkeypatch):
    from badc_trace.instrument import UnsupportedVersionError

    probe = LlamaCppInstrumentor()
    probe.instrument()
    patched = list(probe._patched)
    probe.instrument()
    assert probe._patched == patched
    probe.uninstrument()
    probe.uninstrument()
    monkeypatch.setattr(LlamaCppInstrumentor, "installed_version", lambda self: "0.2.90")
    with pytest.raises(UnsupportedVersionError, match="0.2.90"):
        probe.instrument()
    assert not probe.is_instrumented


def test_processor_exception_is_a_crash_outcome():
    class Boom:
        def __call__(self, ids, scores):
            raise RuntimeError("boom")

    c = cfg()
    probe = LlamaCppInstrumentor()
    from badc_trace.instrument import TraceSink

    probe.instrument(TraceSink())
    try:
        h = lcp.Harness(c, speculative=False)
        from llama_cpp.llama import LogitsProcessorList

        out = h.llm.create_completion(h.prompt_tokens, max_tokens=2, seed=1, temperature=1.0,
                                      logits_processor=LogitsProcessorList([Boom()]))
        # ctypes swallowed it: the caller got a completion ...
        assert out["choices"][0]["finish_reason"] in ("length", "stop")
        # ... but the probe saw the exception.
        assert probe.last_request.crash == "RuntimeError" and probe.last_request.outcome == "|crash:RuntimeError"
        assert probe.sink.counters["crashes"] >= 1
    finally:
        probe.uninstrument()


def test_logit_oracle_is_independent_of_evaluation_history():
    c = cfg()
    h = lcp.Harness(c, speculative=False)
    a, b = lcp.LogitOracle(h), lcp.LogitOracle(h)
    p = h.prompt_tokens
    first = a(p + [5, 6])  # evaluates the prompt and both tokens
    assert np.array_equal(a(p), b(p)) and np.array_equal(a(p + [5]), b(p + [5]))
    assert np.array_equal(first, b(p + [5, 6]))


def test_logprob_records_match_their_documented_value_and_a_planted_error_is_caught(tmp_path):
    from badc_trace.format import TraceWriter

    c = cfg(id="LCP-5", sampling={"temperature": 1.0, "logprobs": 10})
    for arm in ("off", "on"):
        r = collect(lcp.ENGINE, c, arm, 800, 4, trace_path=str(tmp_path / f"{arm}.badc"))
        assert r.records["draws"] == 800 and r.records["mismatch"] == 0, r.records["first_mismatch"]
    # The same check on a trace whose second record is off by 0.01 at position 2.
    h = lcp.Harness(c, speculative=False)
    oracle = lcp.LogitOracle(h)
    p = h.prompt_tokens
    logits = oracle(p + [5]).astype(np.float64)
    good = float(logits[6] - logits.max() - np.log(np.exp(logits - logits.max()).sum()))
    first = oracle(p).astype(np.float64)
    lp0 = float(first[5] - first.max() - np.log(np.exp(first - first.max()).sum()))
    path = tmp_path / "planted.badc"
    with TraceWriter(path, engine="llama_cpp", build="x") as w:
        w.write({"type": "request", "req": 0, "prompt": p})
        w.write({"type": "return", "req": 0, "tokens": [5, 6], "logprobs": {"token_logprobs": [lp0, good + 0.01]}})
    rec = lcp.check_records(str(path), oracle)
    assert rec["mismatch"] == 1 and rec["positions"] == {2: 1} and rec["first_mismatch"]["position"] == 2


@pytest.mark.parametrize("extra", [
    {"grammar": 'root ::= [a-d] [b-e]* "g"?'},
    {"sampling": {"temperature": 1.0, "repeat_penalty": 1.3, "frequency_penalty": 0.2, "presence_penalty": 0.2}},
    {"sampling": {"temperature": 1.0, "stop": ["da"]}},
    {"sampling": {"temperature": 0.9, "top_k": 5, "top_p": 0.9, "min_p": 0.05, "logit_bias": {"9": 2.0}}},
], ids=["grammar", "penalties", "stop-string", "truncation-bias"])
def test_mirror_calibrates_for_each_mirrored_feature(extra):
    c = cfg(id="feat", **extra)
    ref = lcp.ENGINE.reference_law(c).law
    off = collect(lcp.ENGINE, c, "off", 20_000, 8)
    on = collect(lcp.ENGINE, c, "on", 2_000, 8)
    d = decide(Config(c.id, Arm(on.outcomes, proposed=on.proposed), Arm(off.outcomes), reference=ref))
    assert d.calibration.passed is True and set(off.outcomes) <= set(ref)
    assert d.decision == NOT_REJECTED and on.proposed > 0


def test_known_defect_logit_bias_drops_user_processors():
    """Finding (llama-cpp-python 0.3.36, not speculation-specific): with both `logit_bias` and
    `logits_processor`, `_create_completion` runs `logits_processor = logits_processor.extend(...)`;
    list.extend returns None, so neither the user's processors nor the bias are applied. When this test
    fails, upstream has fixed it: move the expectation."""
    from llama_cpp.llama import LogitsProcessorList

    calls = []

    def proc(ids, scores):
        calls.append(len(ids))
        return scores

    h = lcp.Harness(cfg(), speculative=False)
    banned = 0
    for seed in range(200):
        h.llm.create_completion(h.prompt_tokens, max_tokens=3, seed=seed, temperature=1.0, logit_bias={9: -100.0},
                                logits_processor=LogitsProcessorList([proc]))
        banned += 9 in h.yielded
    assert calls == [] and banned > 20
    h.llm.create_completion(h.prompt_tokens, max_tokens=3, seed=1, logits_processor=LogitsProcessorList([proc]))
    assert calls  # without logit_bias the processor runs


def test_stage_s3_with_looks_stops_the_unrepaired_arm_once_it_recurs(tmp_path):
    # confirm_anytime on the real engine: prefix parity reads unverified drafts (D1), so the unrepaired
    # arm's fresh draws show witnesses at the first look and its chain stops; the off and repaired arms
    # are drawn whole, and the logical-prefix repair leaves no witness on them
    import json

    from badc_check.campaign import load_campaign, run_campaign

    path = tmp_path / "s3.toml"
    path.write_text("""
[campaign]
draws = 2000
confirm_draws = 16000
confirm_anytime = true
seed = 7
shard = 8000

[[config]]
id = "LCP-1"
engine = "llama_cpp"
build = "0.3.36"
prompt = "abcdabcdab"
max_new_tokens = 4
drafter = { method = "prompt_lookup", num_pred_tokens = 4, max_ngram_size = 2 }
sampling = { temperature = 1.0 }
processors = [{ name = "parity" }]
predicates = ["allowed_tokens"]
hypothesis = "H-D1-phys"
repair = "llama_cpp/logical-prefix"
""")
    out = tmp_path / "out"
    report = run_campaign(load_campaign(path), out, workers=2, log=lambda m: None, plots=False)
    (c,) = report["configs"]
    rep = c["repair"]
    assert c["decision"] == FAILS and rep["attempted"] and rep["exercised"] and rep["calibration_passed"]
    assert rep["recurrence_look"]["look"] == 1 and rep["recurrence_look"]["draws"] == 1000
    assert rep["recurrence_witnesses"] > 0 and not any("recurrence" in r for r in rep["reasons"])

    def drawn(arm):
        return sum(json.loads(f.read_text())["count"] for f in (out / "shards" / "LCP-1").glob(f"{arm}-*.json"))

    assert drawn("off-confirm") == drawn("repaired") == 16_000 and 1_000 <= drawn("on-confirm") < 16_000
    repaired = json.loads((out / "shards" / "LCP-1" / "repaired-8000.json").read_text())
    assert repaired["proposed"] > 0 and repaired["violations"] == 0  # speculation exercised, contract held
    assert rep["contract"]["status"] == "held" and rep["contract"]["requests"] == 16_000  # said in the report


def test_a_killed_shard_with_held_records_goes_on_from_its_checkpoint_draw_for_draw(tmp_path):
    """The probe holds its per-token records until the request ends (TraceSink.emit_later): a checkpoint
    is taken between draws, after they are written, so a shard killed mid-run and run again has every
    record once, in order, and the same shard as an uninterrupted run."""
    import sys

    from tests.shard_resume import kill_and_resume, same_shard

    config = {**BASE, "id": "R", "build": lcp.ENGINE.version(), "processors": [{"name": "min_tokens", "min_tokens": 3}]}
    # llama.cpp reuses the prompt's KV cache between requests: after a start, the first request removes less
    # from the cache, and its prompt, evaluated afresh, gives logits about 1e-6 apart (so level calls: no scores)
    straight, resumed = kill_and_resume(sys.executable, config, tmp_path, arm="on", count=600, level="calls",
                                        kill_after=200, history=("kv_rm", "kv_removals"))
    assert straight["resumed"] == 0 and 200 <= resumed["resumed"] < 600
    assert same_shard(straight, resumed) and resumed["contract"]["calls"] > 0 and resumed["proposed"] > 0


def test_llama_cpp_passes_the_conformance_kit(tmp_path):
    from badc_replay.testing import PASSED, check_engine

    control = {"id": "KIT", "max_new_tokens": 4, "sampling": {"temperature": 1.0},
               "drafter": {"method": "prompt_lookup", "num_pred_tokens": 4, "max_ngram_size": 2}}
    result = check_engine(lcp.ENGINE, control, tmp_path, draws=40)
    assert all(c.status == PASSED for c in result.checks), result.summary()
