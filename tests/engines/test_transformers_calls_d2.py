"""D2 at level calls (badc_replay/engines/transformers/rerun.py): a trace keeps 16-byte digests of each
processor call's scores, replay re-runs the request under the engine with its draws scripted to the
recorded tokens and checks the re-run's scores against the digests, then D2 exactly as at level full.
It must find what level full finds, catch a processor that is off by one score entry, hold where full
holds, and say unchecked, never held, where the re-run is not the recorded run. With prompt lookup and
with a draft model."""

import weakref

import pytest
import torch
from transformers.generation import logits_process as lp

from badc_replay.arms import collect
from badc_replay.contract import replay_trace
from badc_replay.engines import transformers as tf
from badc_trace.format import TraceWriter, read_trace

BASE = {"model": "tiny", "prompt": "abcdabcdab", "max_new_tokens": 3,
        "drafter": {"method": "prompt_lookup", "num_tokens": 3, "max_ngram_size": 2}}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BADC_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def traced(tmp_path, cid, generation, level, arm="on", repair=None, draws=30):
    c = tf.ENGINE.parse_config({"id": cid, **BASE, "generation": generation})
    path = str(tmp_path / f"{cid}-{arm}-{level}.badc")
    collect(tf.ENGINE, c, arm, draws, 7, trace_path=path, level=level, repair=repair)
    return path


def firsts(path):
    res = replay_trace(path)
    return res, {r: str(v) for r, v in res.first_per_request.items()}


@pytest.mark.parametrize("generation, arm, repair", [
    ({"guidance_scale": 1.5}, "on", None),
    ({"watermarking_config": {"type": "synthid", "keys": [654, 400, 836, 123], "ngram_len": 2}}, "on", None),
    ({"temperature": 0.7}, "on", None),
    ({"guidance_scale": 1.5}, "repaired", "transformers/stateful-replay"),
])
def test_level_calls_decides_d2_as_level_full_does(tmp_path, generation, arm, repair):
    calls, full = (firsts(traced(tmp_path, "T", generation, level, arm, repair)) for level in ("calls", "full"))
    assert not calls[0].partial and not full[0].partial and calls[0].unchecked is None
    assert calls[1] == full[1]  # the same requests, the same first violation, word for word
    broken = arm == "on" and "temperature" not in generation
    assert bool(calls[1]) == broken and all("D2" in v for v in calls[1].values())


class _OneEntryOff:
    """Planted into TemperatureLogitsWarper: a processor that counts its calls and, once it has been called
    more often than the positions before the one it scores (speculation's extra calls), lowers one score
    entry (token 0) by 1. A fresh one stepped along the prefix is never off. `hidden` keeps the count
    outside the instance (as native state is), where no state digest can see it."""

    def __init__(self, hidden: bool):
        self.hidden, self.counts = hidden, weakref.WeakKeyDictionary()

    def __call__(self, proc, input_ids, scores):
        if self.hidden:
            n = self.counts[proc] = self.counts.get(proc, 0) + 1
        else:
            n = proc.__dict__["planted_calls"] = proc.__dict__.get("planted_calls", 0) + 1
        out = scores / proc.temperature
        if n > input_ids.shape[1] - len(BASE["prompt"]) + 1:
            out = out.clone()
            out[:, 0] -= 1.0
        return out


@pytest.mark.parametrize("hidden", [False, True])
def test_a_processor_off_by_one_score_entry_is_caught_at_level_calls(tmp_path, monkeypatch, hidden):
    planted = _OneEntryOff(hidden)
    monkeypatch.setattr(lp.TemperatureLogitsWarper, "__call__", lambda self, i, s: planted(self, i, s))
    calls, full = (firsts(traced(tmp_path, "P", {"temperature": 0.7}, level)) for level in ("calls", "full"))
    assert not calls[0].partial and calls[1] == full[1] and calls[1]
    first = next(iter(calls[1].values()))
    assert "TemperatureLogitsWarper" in first and "at tokens [0]" in first and "max difference 1 over 7" in first


def _forge(tmp_path, path, change):
    """A copy of the trace with `change` made to each request's first verification element record."""
    reader = read_trace(path)
    forged = str(tmp_path / "forged.badc")
    done = set()
    with TraceWriter(forged, engine="transformers", build=reader.header["build"], config=reader.header["config"],
                     seal="") as w:
        for rec in reader:
            if rec.get("type") == "processor" and rec.get("proc", -1) >= 0 and rec["req"] not in done \
                    and rec["role"] == "verify":
                rec = change(rec)
                done.add(rec["req"])
            w.write(rec)
    return forged


@pytest.mark.parametrize("change, says", [
    # one call's digest no longer the engine's scores'
    (lambda r: {**r, "out_digest": bytes(16)}, "outgoing scores' digest is"),
    # the incoming scores' digest dropped where they are the model's logits, not a checked element's output
    (lambda r: {k: v for k, v in r.items() if k != "in_digest"}, "has no digest of its incoming scores"),
])
def test_a_rerun_that_cannot_be_checked_against_the_trace_is_unchecked_never_held(tmp_path, change, says):
    path = traced(tmp_path, "N", {"temperature": 0.7}, "calls", draws=6)
    assert not replay_trace(path).partial
    res = replay_trace(_forge(tmp_path, path, change))
    [(reason, n)] = res.partial.items()  # every request unchecked, for one reason: none held, none violated
    assert res.violations == 0 and n == 6 and says in reason, reason


@pytest.mark.parametrize("generation", [{"guidance_scale": 1.5}, {"temperature": 0.7}])
def test_a_draft_models_requests_are_re_run_too(tmp_path, generation):
    # The re-run scripts the assistant's draws (its proposals, from the draft records), the target's draw
    # after the accepted ones and the uniform draws of speculative sampling (accepting exactly the
    # proposals the returned tokens repeat): the same first violations as level full, none unchecked.
    c = tf.ENGINE.parse_config({"id": "A", **BASE, "drafter": {"method": "draft_model", "model": "tiny:11"},
                                "generation": generation})
    got = {}
    for level in ("calls", "full"):
        path = str(tmp_path / f"a-{level}.badc")
        collect(tf.ENGINE, c, "on", 12, 7, trace_path=path, level=level)
        got[level] = firsts(path)
    assert not got["calls"][0].partial and got["calls"][1] == got["full"][1]
    assert bool(got["calls"][1]) == ("guidance_scale" in generation)
    assert torch.multinomial.__module__ == "torch" and torch.rand_like.__module__ == "torch"  # scripts undone
