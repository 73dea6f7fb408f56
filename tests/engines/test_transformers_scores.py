"""The score-level study (Supplement E and G, `badc replay --scores`) on the tiny model: guidance under
prompt lookup has mechanism witnesses explained by its actual call history; plain sampling, repetition
penalty and the frozen prefix-history repair agree with their sequential references within 1e-4; a
request whose drafter never proposes is unexposed, never agreement."""

import subprocess
import sys

import pytest

from badc_replay.arms import collect
from badc_replay.engines import transformers as tf
from badc_replay.score_study import score_study
from badc_replay.scores import AGREE_TV, WITNESS_TV, ScoresUnavailable
from badc_trace.format import TraceWriter, read_trace

N = 8


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BADC_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def traced(tmp_path, name, generation=None, level="full", repair=None, **kw):
    c = tf.ENGINE.parse_config({"engine": "transformers", "id": name, "generation": generation or {}, **kw})
    path = str(tmp_path / f"{name}.badc")
    collect(tf.ENGINE, c, "repaired" if repair else "on", N, 11, trace_path=path, level=level, repair=repair)
    return path


def replay_scores(path):
    return subprocess.run([sys.executable, "-m", "badc_check.cli", "replay", path, "--scores"],
                          capture_output=True, text=True)


def test_guidance_has_history_witnesses_that_its_actual_call_history_explains(tmp_path):
    path = traced(tmp_path, "cfg", {"guidance_scale": 1.5})
    study = score_study([path])
    assert study.exposed == N and study.witnesses == N and study.agreeing == 0
    w = study.requests[0].witness
    # the unconditional model was fed tokens sequential decoding never fed it (drafts, filtering calls)
    assert w.history != w.intended and w.tv_intended > WITNESS_TV
    assert study.explained and max(r.max_tv_actual for r in study.requests) <= AGREE_TV
    assert max(r.max_tv_target for r in study.requests) <= AGREE_TV  # the target scores themselves are right
    proc = replay_scores(path)
    assert proc.returncode == 1 and f"mechanism witnesses (history mismatch and score TV > 0.001 at a verification " \
        f"call): {N} of {N} exposed" in proc.stdout and "WITNESS at call" in proc.stdout


@pytest.mark.parametrize("name, generation, repair", [
    # plain sampling: transformers calls no empty processor list, so its target scores are the returned logits
    ("plain", {"output_logits": True, "return_dict_in_generate": True}, None),
    ("rep", {"repetition_penalty": 1.3}, None),
    ("cfg-rep", {"guidance_scale": 1.5}, "transformers/stateful-replay"),  # the prefix-history control
])
def test_controls_agree_with_their_references_within_1e_4(tmp_path, name, generation, repair):
    path = traced(tmp_path, name, generation, repair=repair)
    study = score_study([path])
    assert study.exposed == N and study.witnesses == 0 and study.agreeing == N
    assert all(r.max_tv_intended <= AGREE_TV and r.max_tv_target <= AGREE_TV for r in study.requests)
    # the repair changes what the processor is fed: its output is no longer its raw call history's
    assert study.explained is (repair is None)
    assert replay_scores(path).returncode == 0


def test_an_unexposed_request_is_not_agreement_and_a_trace_without_scores_is_unchecked(tmp_path):
    # one new token: prompt lookup never proposes (no room for a draft)
    study = score_study([traced(tmp_path, "short", {"repetition_penalty": 1.3}, max_new_tokens=1)])
    assert study.exposed == 0 and study.agreeing == 0 and study.witnesses == 0
    proc = replay_scores(str(tmp_path / "short.badc"))
    assert proc.returncode == 3 and f"{N} of {N} requests unexposed" in proc.stderr
    calls = traced(tmp_path, "calls", {"guidance_scale": 1.5}, level="calls")
    with pytest.raises(ScoresUnavailable, match="--level full"):
        score_study([calls])
    proc = replay_scores(calls)
    assert proc.returncode == 3 and "UNCHECKED: no score-level study" in proc.stderr


def test_a_torn_trace_never_reads_as_agreement(tmp_path):
    path = traced(tmp_path, "rep", {"repetition_penalty": 1.3})
    assert replay_scores(path).returncode == 0
    reader = read_trace(path)
    torn = tmp_path / "torn.badc"
    writer = TraceWriter(torn, engine=reader.header["engine"], build=reader.header["build"],
                         config=reader.header.get("config"), chunk_records=20)  # many small chunks
    for rec in reader:
        writer.write(rec)
    writer.close()
    data = torn.read_bytes()
    torn.write_bytes(data[: len(data) * 2 // 3])  # killed mid-write: the requests after the cut are lost
    check = read_trace(torn, allow_torn_tail=True)
    assert list(check) and check.torn_tail is not None  # some requests kept, the tail torn
    proc = replay_scores(str(torn))
    assert proc.returncode == 3 and "UNCHECKED: a torn tail" in proc.stderr, proc.stderr
